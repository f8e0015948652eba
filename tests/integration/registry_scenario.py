"""``raylog registry --embedded`` stopped and started again on its data, run as a scenario
(scenarios.py) so that its two embedded clusters start while the unit tests run: ``python -m
tests.integration.registry_scenario registry-restart ROOT`` registers schemas, stops the
registry (SIGTERM), starts it again on ROOT/data, reads them back, registers one more, stops
it (SIGINT), and prints what it saw as JSON (test_schemas.py judges it)."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from tests.children import Child
from tests.integration.test_schemas import NO_DEFAULT, USER, USER_V2

FRESH = {"type": "record", "name": "C", "fields": []}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Registry(Child):
    """``raylog registry --embedded`` in a subprocess (tests/children.py)."""

    def __init__(self, data_dir: Path, port: int) -> None:
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env["RAYLOG_DATA_DIR"] = str(data_dir)
        raylog = os.path.join(os.path.dirname(sys.executable), "raylog")
        super().__init__([raylog, "registry", "--embedded", "--port", str(port)], env=env,
                         merge_stderr=True)

    def stop(self, sig: int) -> int:
        code = super().stop(sig)
        self.wait_for_line("schema registry stopped", timeout=10)
        return code


def restarted(root: Path) -> dict[str, Any]:
    port, data_dir = free_port(), root / "data"
    url = f"http://127.0.0.1:{port}"
    seen: dict[str, Any] = {}
    first = Registry(data_dir, port)
    try:
        first.wait_for_line("schema registry listening on", timeout=120)
        client = SchemaRegistryClient({"url": url})
        seen["ids"] = [
            client.register_schema("a-value", Schema(json.dumps(USER), "AVRO")),
            client.register_schema("a-value", Schema(json.dumps(USER_V2), "AVRO")),
            client.register_schema("b-value", Schema(json.dumps(NO_DEFAULT), "AVRO"))]
        seen["deleted_versions"] = client.delete_subject("b-value")
        seen["first_stop"] = first.stop(signal.SIGTERM)
    finally:
        first.kill()
    second = Registry(data_dir, port)
    try:
        second.wait_for_line("schema registry listening on", timeout=120)
        seen["second_lines"] = list(second.lines)
        client = SchemaRegistryClient({"url": url})
        seen["version_ids"] = [client.get_version("a-value", v).schema_id for v in (1, 2)]
        seen["subjects"] = client.get_subjects()
        seen["deleted_schema"] = json.loads(client.get_schema(seen["ids"][2]).schema_str)
        seen["fresh_id"] = client.register_schema("c-value", Schema(json.dumps(FRESH), "AVRO"))
        seen["second_stop"] = second.stop(signal.SIGINT)
    finally:
        second.kill()
    return seen


if __name__ == "__main__":
    if sys.argv[1] != "registry-restart":
        raise SystemExit(f"no scenario named {sys.argv[1]!r}")
    print(json.dumps(restarted(Path(sys.argv[2]))))
