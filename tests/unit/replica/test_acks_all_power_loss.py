"""acks=all and a power loss of every replica at once.

By default nothing is fsynced (as in Kafka, durability comes from replication): a record
acknowledged with acks=all is in the page cache of every in-sync replica, and a power loss
of all of them together can take it back. With ``flush.messages=1`` every in-sync replica
has it on disk before the producer is answered, and nothing acknowledged is lost.

Three in-process replicas (Partitions over real logs, no Ray) replicate as the broker's
fetcher makes them: a follower's fetch tells the leader its log end, which moves the high
watermark, and takes back the leader's batches; the follower appends them when the answer
arrives, and its next fetch reports its new log end. A batch is acknowledged (acks=all) once
the high watermark passed it. A seeded schedule interleaves appends and the two halves of
the followers' fetches; after every step, :class:`~tests.unit.powerloss.PowerLoss` copies
every replica's directory as a power loss then could leave it: each unsynced byte gone,
each unsynced name change undone. Every copy is reopened; every replica (all three stay in
the ISR) must hold every record acknowledged by then, and after an election of any of them
the new leader serves them all below its high watermark.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from raylog.errors import LogClosedError, StorageError
from raylog.metadata.topics import log_config, normalize_configs
from raylog.replica.partition import LeaderAndIsr, Partition
from raylog.replica.truncation import Ask
from raylog.storage import PartitionLog
from tests.unit.logutil import FakeClock, all_records, batch_of
from tests.unit.powerloss import FailingDisk, PowerLoss
from tests.unit.replica.test_partition import sync as catch_up

NOW = 1_700_000_000_000
REPLICAS = (1, 2, 3)
STEPS = 100
ELECT_EVERY = 4  # crash copies whose election is tried too (each costs a catch-up)


def topic_configs(flush: dict[str, Any]) -> dict[str, Any]:
    """Small segments, so that schedules cross rolls; acks=all needs 2 of the 3."""
    return normalize_configs({"segment.bytes": 2048, "retention.ms": -1,
                              "min.insync.replicas": 2, **flush})


def open_replica(directory: Path, replica: int, configs: dict[str, Any],
                 clock: FakeClock) -> Partition:
    log = PartitionLog(directory / f"broker-{replica}" / "t-0", log_config(configs),
                       clock=clock)
    return Partition("t", 0, log, replica, configs, clock=clock)


def elect(replicas: dict[int, Partition], leader: int, epoch: int) -> None:
    for p in replicas.values():
        p.apply(LeaderAndIsr(leader, epoch, epoch, REPLICAS, REPLICAS))


class Cluster:
    """Three replicas, a producer and the followers' fetches, stepped one at a time."""

    def __init__(self, root: Path, configs: dict[str, Any], seed: int) -> None:
        self.clock = FakeClock(NOW)  # frozen: the ISR never shrinks, nobody times out
        self.replicas = {r: open_replica(root, r, configs, self.clock) for r in REPLICAS}
        elect(self.replicas, 1, 1)
        self.leader = self.replicas[1]
        self.rng = random.Random(seed)
        self.answers: dict[int, Any] = {}  # a follower's fetch answer on its way back
        self.in_flight: list[tuple[int, list[bytes]]] = []  # (last offset, values) unacked
        self.acknowledged: list[tuple[int, bytes]] = []  # (offset, value), in offset order
        self.sent = 0

    def step(self) -> None:
        """One of: the producer sends a batch; a follower's fetch reaches the leader (which
        learns where the follower's log ends and answers with what follows); a fetch's
        answer reaches its follower, which appends it."""
        followers = [r for r in REPLICAS if r != self.leader.replica_id]
        kind, r = self.rng.choice(
            [("produce", None)] + [("answer" if r in self.answers else "fetch", r)
                                   for r in followers])
        if kind == "produce":
            values = [b"r%d" % (self.sent + i) for i in range(self.rng.randint(1, 3))]
            self.sent += len(values)
            info = self.leader.append(batch_of(values, ts=NOW + self.sent), acks="all",
                                      leader_epoch=1)
            self.in_flight.append((info.last_offset, values))
        elif kind == "fetch":
            offset = self.replicas[r].log_end_offset
            self.leader.follower_fetched(r, 1, offset)
            self.answers[r] = self.leader.read_for_follower(offset,
                                                            self.rng.choice([1, 1 << 20]))
        else:
            answer = self.answers.pop(r)
            self.replicas[r].append_replicated(answer.data, answer.high_watermark,
                                               answer.log_start_offset)
        self._acknowledge()

    def _acknowledge(self) -> None:
        """Answer the producer for the batches the high watermark passed (acks=all)."""
        while self.in_flight and self.leader.acks_all_done(self.in_flight[0][0]):
            last, values = self.in_flight.pop(0)
            first = last - len(values) + 1
            self.acknowledged.extend(zip(range(first, last + 1), values, strict=True))


def lost_at(copy: Path, configs: dict[str, Any], acknowledged: list[tuple[int, bytes]],
            election: bool) -> dict[int, list[tuple[int, bytes]]]:
    """Reopen every replica of a crash copy: the acknowledged records each one lacks. With
    ``election``, if none lacks any, one is elected and must serve them all."""
    clock = FakeClock(NOW)
    reopened = {r: open_replica(copy, r, configs, clock) for r in REPLICAS}
    end = acknowledged[-1][0] + 1 if acknowledged else 0
    lost = {}
    for r, p in reopened.items():
        held = [(rec.offset, rec.value) for rec in all_records(p.log) if rec.offset < end]
        if held != acknowledged:
            lost[r] = sorted(set(acknowledged) - set(held))
    if election and not lost and acknowledged:
        # Any in-sync replica may be elected after the outage: it serves them all.
        leader = 1 + len(acknowledged) % len(REPLICAS)
        elect(reopened, leader, 2)
        for r in REPLICAS:
            if r != leader:
                catch_up(reopened[r], reopened[leader])
        served = reopened[leader].read_table(0, end, leader_epoch=2)
        assert served.column("offset").to_pylist() == list(range(end)), copy
        assert served.column("value").to_pylist() == [v for _, v in acknowledged], copy
    for p in reopened.values():
        p.log.close()
    return lost


def run_schedule(power: PowerLoss, flush: dict[str, Any], seed: int
                 ) -> tuple[int, dict[int, dict[int, list]]]:
    """Step a seeded schedule, losing power after every step; returns how many records were
    acknowledged and, per crash (by step), what each replica lost of them."""
    configs = topic_configs(flush)
    cluster = Cluster(power.root, configs, seed)
    losses = {}
    for step in range(STEPS):
        cluster.step()
        copy = power.crash_copy()
        lost = lost_at(copy, configs, list(cluster.acknowledged),
                       election=step % ELECT_EVERY == 0 or step == STEPS - 1)
        if lost:
            losses[step] = lost
        shutil.rmtree(copy)
    assert cluster.acknowledged, "the schedule acknowledged nothing: it tests nothing"
    assert any(len(p.log.segments) > 1 for p in cluster.replicas.values())  # rolls too
    return len(cluster.acknowledged), losses


@pytest.fixture
def power(monkeypatch, tmp_path) -> PowerLoss:
    return PowerLoss(monkeypatch, tmp_path / "data")


@pytest.mark.parametrize(("flush", "seed"), [({"flush.messages": 1}, 1),
                                             ({"flush.messages": 1}, 2),
                                             ({"flush.ms": 0}, 3)],
                         ids=["flush.messages=1-seed1", "flush.messages=1-seed2",
                              "flush.ms=0-seed3"])
def test_acks_all_with_every_append_synced_loses_nothing_acknowledged(power, flush, seed):
    acknowledged, losses = run_schedule(power, flush, seed)
    assert acknowledged >= 20
    assert losses == {}


@pytest.mark.parametrize("flush", [{}, {"flush.messages": 3}],
                         ids=["default", "flush.messages=3"])
def test_acks_all_without_it_loses_acknowledged_records_to_a_power_loss(power, flush):
    """What the default promises, shown: an acknowledged record lives in the page cache of
    every in-sync replica, which a power loss of all of them takes. (So the test above can
    fail: the same schedule and checks find the losses here.)"""
    acknowledged, losses = run_schedule(power, flush, seed=1)
    assert acknowledged >= 20
    assert losses, "no acknowledged record lost: the power loss is not simulated"


def lost_at_replica(copy: Path, replica: int, configs: dict[str, Any]) -> int:
    """How many of its records replica ``replica`` lacks in a crash copy (all were 2)."""
    p = open_replica(copy, replica, configs, FakeClock(NOW))
    try:
        return 2 - len(all_records(p.log))
    finally:
        p.log.close()


def test_flush_ms_syncs_a_followers_records_when_maintenance_comes_by(power):
    """flush.ms is periodic: the broker's maintenance flushes every replica it hosts,
    followers too, as a job for its background thread (start_flush, run, finish_flush).
    Until then a power loss takes the records back."""
    configs = topic_configs({"flush.ms": 1000})
    clock = FakeClock(NOW)
    replicas = {r: open_replica(power.root, r, configs, clock) for r in (1, 2)}
    for p in replicas.values():
        p.apply(LeaderAndIsr(1, 1, 1, (1, 2), (1, 2)))
    leader, follower = replicas[1], replicas[2]
    leader.append(batch_of([b"a", b"b"]), acks="all", leader_epoch=1)
    catch_up(follower, leader)
    assert leader.high_watermark == 2 and follower.log.synced_end_offset == 0
    assert follower.log.start_flush() is None  # not yet due
    copy = power.crash_copy()
    assert lost_at_replica(copy, 2, configs) == 2
    clock.advance(1000)
    assert follower.log.time_work_pending()
    job = follower.log.start_flush()
    job.run()
    follower.log.finish_flush(job)
    assert follower.log.synced_end_offset == 2
    assert lost_at_replica(power.crash_copy(), 2, configs) == 0


def test_setting_flush_messages_1_syncs_what_a_replica_holds_before_it_counts(power):
    """A topic altered to flush.messages=1: from then on a replica's log end is synced at
    every step (a follower's next fetch reports it to its leader)."""
    configs = topic_configs({})
    clock = FakeClock(NOW)
    replicas = {r: open_replica(power.root, r, configs, clock) for r in (1, 2)}
    for p in replicas.values():
        p.apply(LeaderAndIsr(1, 1, 1, (1, 2), (1, 2)))
    leader, follower = replicas[1], replicas[2]
    leader.append(batch_of([b"a", b"b"]), leader_epoch=1)
    catch_up(follower, leader)
    assert follower.log.synced_end_offset == leader.log.synced_end_offset == 0
    for p in replicas.values():
        p.update_configs(topic_configs({"flush.messages": "1"}))
        assert p.log.synced_end_offset == p.log.committable_end_offset == 2
    assert lost_at_replica(power.crash_copy(), 1, configs) == 0
    assert lost_at_replica(power.crash_copy(), 2, configs) == 0


def test_a_follower_whose_log_closed_itself_never_reports_its_log_end_again(monkeypatch,
                                                                            tmp_path):
    """A follower's disk refuses the fsync, then the cut that would undo the append: its log
    holds records it could not sync and closes itself. The fetcher starts it over from
    truncation, which now fails every time, so it sends no fetch that would count them."""
    disk = FailingDisk(monkeypatch, truncate=True)
    configs = topic_configs({"flush.messages": 1})
    clock = FakeClock(NOW)
    replicas = {r: open_replica(tmp_path, r, configs, clock) for r in (1, 2)}
    for p in replicas.values():
        p.apply(LeaderAndIsr(1, 1, 1, (1, 2), (1, 2)))
    leader, follower = replicas[1], replicas[2]
    leader.append(batch_of([b"a", b"b"]), acks="all", leader_epoch=1)
    catch_up(follower, leader)
    leader.append(batch_of([b"c"]), acks="all", leader_epoch=1)
    answer = leader.read_for_follower(follower.log_end_offset, 1 << 20)
    disk.failing = True
    with pytest.raises(StorageError):
        follower.append_replicated(answer.data, answer.high_watermark, answer.log_start_offset)
    assert follower.log.committable_end_offset == 2 < follower.log_end_offset == 3
    step = follower.truncation_step()
    with pytest.raises(LogClosedError):
        follower.truncate(step.truncate_to if isinstance(step, Ask) else step.offset)
    with pytest.raises(LogClosedError):
        follower.truncate(follower.log_end_offset)  # nothing to cut: refused all the same
