"""Mirroring between two clusters: the session's cluster is the target; the source is a
one-node cluster in Ray processes of its own (raylog.mirror.local), served over Flight by
``raylog flight-serve`` and written by a driver process (mirror_source_driver.py).

The mirror runs as ``raylog mirror`` processes, killed (SIGKILL) twice while producers
write to the source, then run with ``--once``: the target must hold every source record
exactly once per partition, in order, with keys, values, headers and timestamps; a mirror
stopped with SIGTERM exits cleanly with its totals; a group translated to the target
resumes where it stopped on the source.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from raylog import Admin, Consumer, TopicPartition
from raylog.errors import GroupNotEmptyError
from raylog.mirror import translate_group
from raylog.mirror.local import BIN, FlightEndpoint, LocalCluster, clean_env
from tests.children import Child
from tests.integration.conftest import consume_all, wait_for

COMMAND_TIMEOUT_S = 300  # one command of the source driver (a read of a whole topic at most)

REPO = Path(__file__).resolve().parents[2]
ALIAS = "src"


class SourceDriver(Child):
    """The JSON-lines client of mirror_source_driver.py (tests/children.py)."""

    def __init__(self, cluster: LocalCluster) -> None:
        super().__init__([sys.executable, "-m", "tests.integration.mirror_source_driver",
                          cluster.address], cwd=REPO, env=cluster.env(), stdin=True)
        assert json.loads(self.next_line(timeout=120)) == {"ok": "ready"}

    def __call__(self, cmd: str, **args: object) -> object:
        self.send(json.dumps({"cmd": cmd, **args}))
        answer = json.loads(self.next_line(timeout=COMMAND_TIMEOUT_S))
        assert "error" not in answer, answer["error"]
        return answer["ok"]

    def close(self) -> None:
        try:
            self.close_stdin(timeout=30)
        finally:
            self.kill()


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Iterator[tuple[LocalCluster, FlightEndpoint, SourceDriver]]:
    root = tmp_path_factory.mktemp("mirror-source")
    token = root / "flight-token"
    token.write_text("mirror-test-token\n")
    # Killed at the end without ray start's grace (which it always outwaits): its data goes
    # with the test's directory.
    with LocalCluster(root / "cluster", grace_s=0) as cluster, \
            FlightEndpoint(cluster, token, root / "flight.log") as endpoint:
        driver = SourceDriver(cluster)
        try:
            yield cluster, endpoint, driver
        finally:
            driver.close()


class MirrorProcess:
    """``raylog mirror`` into the session's cluster, in a process group of its own, its
    output in ``log``; killed by the ``start_mirror`` fixture at the end at the latest."""

    def __init__(self, endpoint: FlightEndpoint, target: str, log: Path, *extra: str) -> None:
        self.log = log
        with open(log, "a") as out:
            self.process = subprocess.Popen(
                [str(BIN / "raylog"), "mirror", "--source", endpoint.location, "--target",
                 target, "--alias", ALIAS, "--token-file", str(endpoint.token_file),
                 "--checkpoint-interval-ms", "300", "--refresh-interval-ms", "1000", *extra],
                env=clean_env(), stdout=out, stderr=out, start_new_session=True)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout=timeout)


@pytest.fixture
def start_mirror() -> Iterator[Callable[..., MirrorProcess]]:
    """``start_mirror(endpoint, target, log, *extra)``; every mirror started is killed at
    the end of the test, whatever happened."""
    started: list[MirrorProcess] = []

    def start(*args: Any) -> MirrorProcess:
        started.append(MirrorProcess(*args))
        return started[-1]

    yield start
    for mirror in started:
        mirror.kill()


def _end(admin: Admin, topic: str) -> int:
    """Records on the target in ``topic`` (0 while it does not exist)."""
    if topic not in admin.list_topics():
        return 0
    tps = [TopicPartition(topic, p) for p in range(len(admin.describe_topic(topic)["partitions"]))]
    with Consumer() as consumer:
        return sum(consumer.end_offsets(tps).values())


def _fields(record: tuple) -> tuple:
    """What must survive a mirror: timestamp, key, value, headers."""
    return tuple(record[1:])


@pytest.mark.cluster
def test_a_mirror_killed_twice_copies_every_record_once_and_a_group_fails_over(
        ray_cluster, source, tmp_path, start_mirror):
    _, endpoint, driver = source
    target = ray_cluster.cluster.address
    admin = Admin()
    log = tmp_path / "mirror.log"
    driver("create", topic="orders", partitions=3, configs={"retention.ms": "86400000"})
    driver("create", topic="clicks", partitions=1)
    driver("create", topic="doomed", partitions=1)
    driver("produce-some", topic="doomed", count=100)
    driver("produce-start", topics=["orders", "clicks"], per_tick=40, tick_s=0.05)

    first = start_mirror(endpoint, target, log)
    wait_for(lambda: _end(admin, "src.orders") > 300, timeout=60, what="the first copies")
    first.kill()  # at whatever point it is

    second = start_mirror(endpoint, target, log)
    before = _end(admin, "src.orders")
    wait_for(lambda: _end(admin, "src.orders") > before + 300, timeout=60,
             what="the restarted mirror to go on")
    # While it runs: a new topic, a partition added, a config changed, a topic deleted,
    # and a group that reads part of a topic on the source.
    driver("create", topic="late", partitions=2)
    driver("produce-some", topic="late", count=50)
    driver("alter", topic="clicks", partitions=2)
    driver("alter", topic="orders", configs={"retention.ms": "7200000"})
    committed = driver("consume-group", group="reports", topic="orders", at_least=500)
    wait_for(lambda: _end(admin, "src.doomed") > 0, timeout=30, what="doomed copied")
    driver("delete", topic="doomed")
    wait_for(lambda: "source topic doomed was deleted" in log.read_text() or
             "doomed-0: the source topic is gone" in log.read_text(), timeout=30,
             what="the deletion reported")
    wait_for(lambda: "late" in [t.removeprefix("src.") for t in admin.list_topics()],
             timeout=30, what="the new topic picked up")
    second.kill()

    sent = driver("produce-stop")
    assert sent > 1000
    third = start_mirror(endpoint, target, log, "--once")
    assert third.wait(timeout=120) == 0, log.read_text()[-3000:]
    # A mirror that runs until told: SIGTERM stops it as Ctrl-C does, with its totals.
    fourth_log = tmp_path / "fourth.log"
    fourth = start_mirror(endpoint, target, fourth_log)
    wait_for(lambda: "copying orders into src.orders" in fourth_log.read_text(), timeout=120,
             what="the fourth mirror copying")
    fourth.process.send_signal(signal.SIGTERM)
    assert fourth.wait(timeout=120) == 0, fourth_log.read_text()[-3000:]
    said = fourth_log.read_text()
    assert "stopping: finishing what is in flight" in said and "Traceback" not in said
    assert re.fullmatch(r"copied [\d,]+ records from src in [\d.]+ s",
                        said.strip().splitlines()[-1]), said

    for topic, partitions in (("orders", 3), ("clicks", 2), ("late", 2)):
        dump = tmp_path / f"{topic}.pickle"
        count = driver("records", topic=topic, path=str(dump))
        expected = pickle.loads(dump.read_bytes())
        assert len(admin.describe_topic(f"src.{topic}")["partitions"]) == partitions
        copied = consume_all(f"src.{topic}", partitions, count)
        assert len(copied) == count, f"{topic}: {len(copied)} copied of {count}"
        for p in range(partitions):
            mine = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in copied
                    if r.partition == p]
            assert [_fields(r) for r in mine] == [_fields(r) for r in expected[p]], \
                f"{topic}-{p} differs from its source"
            assert [r[0] for r in mine] == list(range(len(mine)))
    assert admin.describe_topic("src.orders")["configs"]["retention_ms"] == 7_200_000
    assert _end(admin, "src.doomed") > 0  # the copy of a deleted topic stays

    # Translating a group that runs on the target is refused, and changes nothing.
    with Consumer(group_id="reports", enable_auto_commit=False) as running:
        running.subscribe(["src.orders"])
        wait_for(lambda: (running.poll(timeout_ms=100), running.assignment())[1],
                 timeout=30, what="a running member")
        with pytest.raises(GroupNotEmptyError, match="active members"):
            translate_group("reports", ALIAS)
    assert admin.list_consumer_group_offsets("reports") == {}

    # The group fails over: the translation of each offset it committed on the source is
    # that offset or a little before it (never past a record it did not read), and it
    # reads on from there. A gap-free copy from the start keeps offsets, so the target's
    # record at the translated offset is the source's at the same offset.
    answer = subprocess.run(
        [str(BIN / "raylog"), "groups", "translate", "reports", "--cluster-alias", ALIAS,
         "--json", "--address", target], env=clean_env(), capture_output=True, text=True,
        timeout=120)
    plan = {row["partition"]: row for row in json.loads(answer.stdout or "{}")
            .get("offsets", [])}
    if answer.returncode or {str(p): row["source_offset"] for p, row in plan.items()} != \
            committed:
        dump = subprocess.run(
            [str(BIN / "raylog"), "consume", f"_mirror.{ALIAS}.checkpoints", "--from-beginning",
             "--until-end", "--print", "offset,key,value", "--address", target],
            env=clean_env(), capture_output=True, text=True, timeout=120)
        pytest.fail(f"{answer.stderr} {plan} {committed}\ncheckpoints:\n{dump.stdout}\n"
                    f"{log.read_text()}")
    orders = pickle.loads((tmp_path / "orders.pickle").read_bytes())
    with Consumer(group_id="reports", enable_auto_commit=False,
                  auto_offset_reset="none") as consumer:
        consumer.subscribe(["src.orders"])
        firsts: dict[int, tuple] = {}

        def read_some() -> bool:
            for r in consumer.poll(timeout_ms=200):
                firsts.setdefault(r.partition, (r.offset, r.timestamp, r.key, r.value,
                                                r.headers))
            return len(firsts) == 3

        wait_for(read_some, timeout=60, what="the group's first records on the target")
    for p, record in firsts.items():
        resume = plan[p]["new_offset"]
        assert committed[str(p)] - 100 <= resume <= committed[str(p)]
        assert record[0] == resume
        assert _fields(record) == _fields(orders[p][resume]), f"orders-{p} resumed elsewhere"
