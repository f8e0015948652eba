"""Kafka's wire formats, translated to raylog's: record batches v2 (records.py), the
codecs Kafka's clients use (compression.py), and the Kafka error codes raylog's typed
errors stand for (error_codes.py). Plain Python: no Ray, no sockets."""
