"""A broker's process imports only what hosting replicas needs.

Brokers run on every broker node and hold thousands of replicas: every module their process
imports is memory on every broker. The broker's code runs here in a fresh interpreter (no
Ray cluster: it opens a replica the way the broker actor does, through HostedReplica, and
works on it as the actor's RPCs do), then the modules it loaded are checked.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.unit.logutil import batch_of

ROOT = Path(__file__).resolve().parents[3]
NEVER_IN_A_REPLICA = ["pandas", "pyspark", "raydp", "ray.data", "raylog.client",
                      "raylog.integrations", "actors.controller"]

SCRIPT = textwrap.dedent("""
    import json, sys
    from pathlib import Path

    import actors.broker  # noqa: F401 (what a broker process imports)
    from actors.serving import forgo_pandas
    forgo_pandas()  # as ReplicaHost.__init__ does first
    from actors.hosting import HostedReplica
    from raylog.replica.partition import LeaderAndIsr
    from raylog.records.kafka_columns import kafka_table

    root = Path(sys.argv[1])
    hosted = HostedReplica.open(root, "t", 0, "topic-id", 0, {})
    partition = hosted.partition
    partition.apply(LeaderAndIsr(0, 0, 0, (0,), (0,)))
    for path in sorted(root.glob("batch-*")):
        partition.append(path.read_bytes(), leader_epoch=0)
    partition.fetch(0, 1 << 20, 0)
    kafka_table(partition.read_table(0, partition.log_end_offset, 0), "t", 0)
    partition.list_offset(0, 0)
    partition.list_offset("latest", 0)
    partition.log.compact()
    partition.close()
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
              "import raylog.replica.epochs, raylog.replica.isr, "
              "raylog.replica.truncation\n"
              "print(json.dumps(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    modules = json.loads(done.stdout.strip().splitlines()[-1])
    assert [m for m in modules if m == "ray" or m.startswith("ray.")] == []
