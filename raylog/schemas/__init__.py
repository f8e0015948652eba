"""Schemas: Avro parsing and compatibility, the registry's state machine, Confluent's wire
format, serializers and Arrow columns. Plain Python: nothing here imports Ray; the Ray actor
that hosts the registry is ``actors/schema_registry.py``, its client
``raylog/schemas/client.py``."""
