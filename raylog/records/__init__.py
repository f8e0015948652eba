"""The record batch format: a fixed header and an Arrow IPC payload (see header.py)."""

from raylog.records.builder import BatchBuilder, record_size
from raylog.records.header import (
    HEADER_SIZE,
    MAGIC,
    BatchHeader,
    Codec,
    TimestampType,
    iter_headers,
    parse_header,
    stamp,
    stamped_prefix,
    validate_batch,
)
from raylog.records.payload import PAYLOAD_SCHEMA, TABLE_SCHEMA, decode, encode
from raylog.records.reader import (
    Record,
    batch_records,
    batch_table,
    iter_batches,
    read_records,
    read_table,
)

__all__ = [
    "HEADER_SIZE",
    "MAGIC",
    "PAYLOAD_SCHEMA",
    "TABLE_SCHEMA",
    "BatchBuilder",
    "BatchHeader",
    "Codec",
    "Record",
    "TimestampType",
    "batch_records",
    "batch_table",
    "decode",
    "encode",
    "iter_batches",
    "iter_headers",
    "parse_header",
    "read_records",
    "read_table",
    "record_size",
    "stamp",
    "stamped_prefix",
    "validate_batch",
]
