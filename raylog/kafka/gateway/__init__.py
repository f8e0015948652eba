"""The Kafka protocol listener: Kafka clients produce, consume and administer raylog
topics over Kafka's wire protocol, unchanged.

Modules:

- ``listener``: the asyncio server; framing, per-connection order, limits, bad input.
- ``protocol``: the thin adapter over kafka-python's ``kafka.protocol`` (decode a request
  frame, encode a response frame); nothing else depends on kafka-python's framing.
- ``produce_frame`` and ``fetch_frame``: Produce requests (v3-11) decoded and Fetch
  answers encoded by hand, the records left where they are (kafka-python's copies were
  measured costs); tested byte for byte against kafka-python's.
- ``dispatch``: API key -> handler, the handler signature and the request ``Context``.
- ``backend``: the seam to the cluster (what handlers may ask of it); ``cluster``: its
  implementation through raylog's clients (Ray); unit tests use a fake.
- ``errors``: Kafka's error codes and the one each raylog error is answered with.
- one module per group of APIs (``versions``, ``metadata``, ...), each with a
  ``register(dispatch)``; ``sasl`` (the logins) and ``scram_users`` (the user APIs) among
  them.
- ``security``: a listener's security settings (TLS files, SASL mechanisms, super users);
  ``users``: the SCRAM credentials in ``__raylog_users`` and the follower that keeps a
  listener's copy current (docs/security.md).

How to add a handler:

1. In a module of this package (say ``groups.py``) write, per API, a coroutine
   ``async def handle_x(ctx: Context, version: int, request) -> response | None``.
   ``request`` is the decoded kafka-python message (fields as attributes, snake_case as in
   Kafka's JSON specs); build the answer with
   ``protocol.response_class(API_KEY, version)(field=..., ...)``; answer errors with
   ``errors.code_of(raylog_error)`` in the response's error fields. Reach the cluster only
   through ``ctx.backend`` (its blocking controller calls through
   ``await ctx.backend.blocking(ctx.backend.controller.join_group, ...)``).
2. Give the module ``def register(dispatch): dispatch.add(API_KEY, min_v, max_v, handle_x)``.
3. Add the module's name to ``dispatch.HANDLER_MODULES``. ApiVersions then advertises it.
4. Test it on raw sockets over ``tests/unit/kafka/gateway/fake_backend.py`` (see
   ``test_listener.py``), and with a real client in tests/integration.

The package is in the "clients" layer (tests/unit/test_layers.py): it talks to the cluster
through raylog/client/ and never imports actors/.
"""
