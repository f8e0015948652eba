"""The C helper compiles from its source alone and reads records as records_py does."""

from __future__ import annotations

import importlib.util

from raylog.kafka import records_py
from raylog.kafka.batch import HEADER_SIZE
from raylog.kafka.build import build
from tests.unit.kafka.builders import kafka_batch

RECS = [(5, b"k", b"v", [("h", None)]), (9, None, b"", [])]


def test_build_compiles_a_module_that_decodes_as_records_py(tmp_path):
    built = build(tmp_path)
    assert built.is_relative_to(tmp_path / "raylog" / "kafka")
    spec = importlib.util.spec_from_file_location("raylog.kafka._records", built)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    records = kafka_batch(RECS)[HEADER_SIZE:]
    assert records_py.Columns._make(module.decode(records, 2)) == \
        records_py.decode_records(records, 2)
