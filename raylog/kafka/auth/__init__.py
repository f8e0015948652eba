"""Authentication for the Kafka listener, in plain Python (no I/O, no Ray): SCRAM's
exchange and credentials (``scram``), their records and the in-memory store (``credentials``),
SASL/PLAIN's message (``plain``), principals (``principal``) and the limits on failed logins
and connections per client address (``throttle``). The listener's use of them is in
raylog/kafka/gateway/ (``security``, ``sasl``, ``users``); docs/security.md."""
