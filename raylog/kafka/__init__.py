"""Kafka's wire protocol in front of raylog: Kafka record batches to and from raylog's
(``records``), and the listener that serves Kafka clients (``gateway``)."""
