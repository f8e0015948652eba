"""A partition replica's process imports only what a replica needs.

Brokers hold thousands of replicas, one Ray actor process each, so every module a replica
imports is paid thousands of times. The replica's code runs here in a fresh interpreter (no
Ray cluster: its work is done on the plain Partition it hosts, as the actor does), then the
modules it loaded are checked.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.unit.logutil import batch_of

ROOT = Path(__file__).resolve().parents[2]
NEVER_IN_A_REPLICA = ["pandas", "pyspark", "raydp", "ray.data", "raylog.client", "raylog.data",
                      "raylog.spark", "actors.controller"]

SCRIPT = textwrap.dedent("""
    import json, sys
    from pathlib import Path

    import actors.replica as replica
    replica.forgo_pandas()  # as ReplicaActor.__init__ does first
    from raylog.partition import Partition
    from raylog.records.kafka_columns import kafka_table
    from raylog.storage import PartitionLog
    from raylog.topics import log_config

    root = Path(sys.argv[1])
    log = PartitionLog(root / "t-0", log_config({}))
    partition = Partition("t", 0, log, 0, {})
    for path in sorted(root.glob("batch-*")):
        partition.append(path.read_bytes())
    partition.fetch(0, 1 << 20)
    kafka_table(partition.read_table(0, log.log_end_offset), "t", 0)
    partition.list_offset(0)
    partition.list_offset("latest")
    log.compact()
    log.close()
    print(json.dumps(sorted(sys.modules)))
""")


def test_a_replica_that_has_worked_never_imported_clients_pandas_spark_or_ray_data(tmp_path):
    for i in range(3):
        (tmp_path / f"batch-{i}").write_bytes(
            batch_of([b"value-%d" % j for j in range(50)], keys=[b"k"] * 50))
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    modules = set(json.loads(done.stdout.strip().splitlines()[-1]))
    loaded = [m for m in NEVER_IN_A_REPLICA
              if m in modules or any(name.startswith(m + ".") for name in modules)]
    assert loaded == [], f"a replica imported {loaded}"



def test_the_replication_rules_import_no_ray():
    # Issue 12: the rules are plain Python, testable (and usable) without Ray.
    script = ("import json, sys\n"
              "import raylog.replication.epochs, raylog.replication.isr, "
              "raylog.replication.truncation\n"
              "print(json.dumps(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    modules = json.loads(done.stdout.strip().splitlines()[-1])
    assert [m for m in modules if m == "ray" or m.startswith("ray.")] == []
