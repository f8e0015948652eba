"""The producer snapshot uploaded with each remote segment is the producer state the replica
had at the segment's end: across segments and producers (idempotent, transactional, epoch
bumps by a batch and by a marker), for a new leader that continues mid-segment, and when the
previous upload has no snapshot (an upload of before snapshots, which still reads)."""

from __future__ import annotations

import dataclasses

import pytest

from raylog.errors import RemoteObjectError
from raylog.replica.partition import Partition
from raylog.replica.producer_state import ProducerSnapshots
from raylog.storage.config import LogConfig
from raylog.tiered.cold_read import segment_batches
from raylog.tiered.layout import MANIFEST, PRODUCER_SNAPSHOT, RemoteSegment
from raylog.tiered.metadata import RemoteLogState
from raylog.tiered.reader import load_producer_snapshot
from raylog.tiered.store import ObjectStore
from raylog.tiered.uploader import PartitionRef, Uploader, closed_segments, plan_copy
from tests.unit.logutil import batch_of
from tests.unit.replica.test_partition import lead, new_partition
from tests.unit.txnutil import ABORT, COMMIT, txn_batch

REF = PartitionRef("t", "tid", 0)


def idem(values, pid, epoch, seq):
    return batch_of(values, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


# What the producers do, in order: ("batch", bytes) appended by the leader, ("marker",
# producer id, producer epoch, kind, coordinator epoch) written by it.
SCRIPT = [
    ("batch", idem([b"a", b"b"], 1, 0, 0)),
    ("batch", txn_batch([b"t0", b"t1"], 7)),            # producer 7 opens a transaction
    ("batch", txn_batch([b"c0"], 8)),
    ("marker", 8, 0, COMMIT, 1),
    ("batch", idem([b"c"], 1, 0, 2)),
    ("batch", batch_of([b"plain"])),                    # no producer
    ("batch", idem([b"x"], 2, 0, 0)),
    ("batch", txn_batch([b"t2"], 7, base_sequence=2)),  # still open across segments
    ("batch", idem([b"y", b"z"], 2, 1, 0)),             # producer 2 bumps its epoch
    ("batch", idem([b"d"], 1, 0, 3)),
    ("marker", 7, 1, ABORT, 2),                         # a marker bumps producer 7's epoch
    ("batch", txn_batch([b"n0"], 7, producer_epoch=1)),  # and a new transaction opens
    ("batch", idem([b"e"], 1, 0, 4)),
    ("batch", txn_batch([b"n1"], 8, base_sequence=1)),
    ("marker", 8, 0, ABORT, 2),
    ("batch", idem([b"f"], 2, 1, 2)),
    ("batch", batch_of([b"hot"])),                      # stays in the active segment
]


def run(p: Partition, rolls: set[int]) -> dict[int, dict]:
    """Play SCRIPT on the leader ``p``, rolling its log before the steps in ``rolls``;
    returns the producer state (its snapshot JSON) after each step, by log end offset."""
    states = {0: p.producers.to_json()}
    for step, (kind, *args) in enumerate(SCRIPT):
        if step in rolls:
            p.log.roll()
        if kind == "batch":
            p.append(args[0], leader_epoch=p.leader_epoch)
        else:
            pid, epoch, marker, coordinator_epoch = args
            p.write_marker(pid, epoch, marker, coordinator_epoch, leader_epoch=p.leader_epoch)
        states[p.log_end_offset] = p.producers.to_json()
    p._set_hw(p.log_end_offset)
    return states


class Metadata:
    """The metadata topic, as a state; ``old`` records are written as an uploader of
    before snapshots wrote them (and their snapshot objects are not in the store)."""

    def __init__(self, store: ObjectStore) -> None:
        self.state = RemoteLogState()
        self.store = store
        self.old = False

    def write(self, record: RemoteSegment) -> bool:
        if self.old:
            files = {n: f for n, f in record.files.items() if n != PRODUCER_SNAPSHOT}
            record = dataclasses.replace(record, files=files)
        return self.state.apply(record)

    def strip_snapshots(self) -> None:
        """Make the store hold the ``old`` uploads as an uploader of before snapshots left
        them: no snapshot object, a manifest that lists none (as their records)."""
        for segment in self.state.readable(REF.topic_id, REF.partition):
            assert PRODUCER_SNAPSHOT not in segment.files
            folder = segment.folder(self.store.prefix)
            self.store.filesystem.delete_file(f"{folder}/{PRODUCER_SNAPSHOT}")
            self.store.put(f"{folder}/{MANIFEST}", segment.to_json())


def copy(p: Partition, metadata: Metadata, store: ObjectStore, limit: int = 100) -> int:
    """Copy ``p``'s closed segments as the leader does (plan_copy as actors/tiered.py calls
    it), at most ``limit``; how many were copied."""
    uploader, copies = Uploader(store, metadata.write), 0
    while copies < limit:
        plan = plan_copy(metadata.state, REF, closed_segments(p.log), p.log.high_watermark,
                         p.log.log_start_offset, p.leader_epoch, p.replica_id,
                         [tuple(e) for e in p.epochs.entries], p.log.aborted_transactions,
                         p.log.directory)
        if plan is None:
            return copies
        assert uploader.copy(plan) is not None
        copies += 1
    return copies


def uploaded_states(metadata: Metadata, store: ObjectStore) -> dict[int, dict | None]:
    """Each readable segment's uploaded producer state, by the offset after its end."""
    return {s.end_offset + 1: (None if (states := load_producer_snapshot(store, s)) is None
                               else states.to_json())
            for s in metadata.state.readable(REF.topic_id, REF.partition)}


@pytest.fixture
def store(tmp_path) -> ObjectStore:
    return ObjectStore.from_uri(f"file://{tmp_path / 'store'}")


@pytest.fixture
def replicas(tmp_path):
    made = []

    def make(name: str, epoch: int = 0) -> Partition:
        made.append(lead(new_partition(tmp_path / name,
                                       config=LogConfig(retention_ms=None)), epoch))
        return made[-1]

    yield make
    for p in made:
        p.log.close()


def test_each_segments_snapshot_is_the_replicas_state_at_its_end(replicas, store):
    p = replicas("a")
    states = run(p, {3, 5, 8, 11, 13, 16})
    metadata = Metadata(store)
    assert copy(p, metadata, store) == 6
    uploaded = uploaded_states(metadata, store)
    assert list(uploaded) == [s.next_offset for s in p.log.segments[:-1]]
    for end, state in uploaded.items():
        assert state == states[end], end
    # The states checked hold what the test means them to: an open transaction across a
    # segment end, both epoch bumps, a producer with no transaction.
    ongoing = {end: {entry[0]: entry[4] for entry in state["producers"] if entry[4] != -1}
               for end, state in uploaded.items()}
    assert 7 in ongoing[p.log.segments[2].base_offset]
    last = {entry[0]: entry[1] for entry in uploaded[p.log.segments[-1].base_offset]["producers"]}
    assert last == {1: 0, 2: 1, 7: 1, 8: 0}


def test_a_new_leader_mid_segment_continues_from_the_previous_snapshot(replicas, store):
    """The old leader copied two segments; the new one rolled elsewhere, so its copy starts
    inside a local segment: its snapshot is the old one's plus its own batches."""
    old = replicas("old")
    states = run(old, {4, 9, 13})
    metadata = Metadata(store)
    assert copy(old, metadata, store, limit=2) == 2
    new = replicas("new", epoch=1)
    assert run(new, {6, 12, 16}) == states  # same batches, same state, other segments
    start = metadata.state.end_offset(REF.topic_id, REF.partition) + 1
    holding = new.log.segments[1]
    assert holding.base_offset < start < holding.next_offset  # the copy starts inside
    ends = [s.next_offset for s in new.log.segments[1:-1]]
    # Its local log no longer holds the first batches (nor a snapshot below the copy): only
    # the previous upload's snapshot knows what they did.
    assert new.log.advance_log_start(holding.base_offset) == 1  # segment 0 goes
    assert copy(new, metadata, store) == 2
    uploaded = uploaded_states(metadata, store)
    assert list(uploaded)[2:] == ends
    for end, state in uploaded.items():
        assert state == states[end], end


def test_after_uploads_of_before_snapshots_the_state_comes_from_the_local_log(
        replicas, store):
    old = replicas("old")
    states = run(old, {4, 9, 13})
    metadata = Metadata(store)
    metadata.old = True
    assert copy(old, metadata, store, limit=2) == 2
    metadata.strip_snapshots()
    # They still read, without a snapshot.
    earlier = metadata.state.readable(REF.topic_id, REF.partition)
    assert [load_producer_snapshot(store, s) for s in earlier] == [None, None]
    for segment in earlier:
        manifest = RemoteSegment.from_json(
            store.get(f"{segment.folder(store.prefix)}/{MANIFEST}"))
        assert manifest == segment and PRODUCER_SNAPSHOT not in manifest.files
    assert segment_batches(store, earlier[1], earlier[1].base_offset,
                           earlier[1].end_offset + 1, ()) == \
        old.read_batches(earlier[1].base_offset, earlier[1].end_offset + 1, 0)
    # A new leader copies on: its first snapshot is rebuilt from its own log below (here
    # from its local producer snapshot at the copy's first offset).
    metadata.old = False
    new = replicas("new", epoch=1)
    run(new, {8, 16})
    start = earlier[1].end_offset + 1
    assert start in ProducerSnapshots(new.log.directory).offsets()
    assert copy(new, metadata, store) == 1
    uploaded = uploaded_states(metadata, store)
    assert list(uploaded.values())[:2] == [None, None]
    for end, state in list(uploaded.items())[2:]:
        assert state == states[end], end


def test_a_damaged_snapshot_is_reported_and_the_next_copy_rebuilds_locally(replicas, store):
    p = replicas("a")
    states = run(p, {5, 11})
    metadata = Metadata(store)
    assert copy(p, metadata, store, limit=1) == 1
    (first,) = metadata.state.readable(REF.topic_id, REF.partition)
    path = f"{first.folder(store.prefix)}/{PRODUCER_SNAPSHOT}"
    store.put(path, store.get(path).replace(b"producers", b"Producers"))
    with pytest.raises(RemoteObjectError, match=r"producer\.snapshot is corrupt"):
        load_producer_snapshot(store, first)
    assert copy(p, metadata, store) == 1
    second = metadata.state.readable(REF.topic_id, REF.partition)[1]
    assert load_producer_snapshot(store, second).to_json() == states[second.end_offset + 1]
