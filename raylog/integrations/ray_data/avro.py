"""Ray Data: a topic's Avro values (Confluent's wire format) as typed columns.

``read_topic(..., value_format="avro")`` reads the Kafka columns as usual, then decodes
each block's ``value`` column in a Ray Data task (fastavro, one value at a time) into the
reader schema's columns, resolving every value's writer schema (by the id in its first
bytes, fetched from the cluster's schema registry once per task process) against the
reader schema: the one given, else the latest version of ``<topic>-value``.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import ray

from raylog.errors import InvalidArgumentError
from raylog.records.kafka_columns import KAFKA_SCHEMA

_columns: dict[str, Any] = {}  # per process: reader schema text -> its AvroColumns


def given_schema(topics: list[str], value_schema: str | dict | None) -> str | None:
    """``value_schema``'s text, checked; None when not given, for the latest version of the
    topic's ``-value`` subject (one topic: several may hold different records)."""
    from raylog.schemas.avro import parse

    if value_schema is not None:
        return parse(value_schema).text
    if len(topics) != 1:
        raise InvalidArgumentError("reading several topics as Avro needs value_schema: "
                                   "their subjects may hold different records")
    return None


def reader_schema(topics: list[str], value_schema: str | dict | None) -> str:
    """The reader schema's text: ``value_schema`` if given, else the latest version of
    the topic's ``-value`` subject."""
    from raylog.schemas.client import SchemaRegistry

    text = given_schema(topics, value_schema)
    return text if text is not None else \
        SchemaRegistry().version(f"{topics[0]}-value", "latest")["schema"]


def decode_block(block: pa.Table, reader: str) -> pa.Table:
    from raylog.schemas.arrow import AvroColumns
    from raylog.schemas.client import SchemaRegistry

    columns = _columns.get(reader)
    if columns is None:
        columns = _columns[reader] = AvroColumns(SchemaRegistry(), reader)
    typed = columns.decode(block.column("value").to_pylist())
    # The value's fields, then the Kafka columns they do not shadow.
    for name in block.column_names:
        if name != "value" and name not in typed.column_names:
            typed = typed.append_column(block.schema.field(name), block.column(name))
    return typed


def avro_dataset(refs: list[ray.ObjectRef], reader: str) -> ray.data.Dataset:
    """The Kafka tables of ``refs`` as a Dataset, their values decoded with ``reader`` (a
    schema's text) into typed columns."""
    if not refs:  # no block to decode: the columns still have their types
        return ray.data.from_arrow(decode_block(KAFKA_SCHEMA.empty_table(), reader))
    return ray.data.from_arrow_refs(refs).map_batches(
        decode_block, fn_kwargs={"reader": reader}, batch_format="pyarrow", batch_size=None)
