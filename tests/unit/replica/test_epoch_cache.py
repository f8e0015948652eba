"""The leader-epoch cache: assign, queries with KIP-279 semantics, truncation, the file."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raylog.errors import (
    CorruptCheckpointError,
    InvalidArgumentError,
    LeaderEpochRegressionError,
)
from raylog.records.header import NO_LEADER_EPOCH, BatchHeader
from raylog.replica.epochs import (
    LEADER_EPOCH_FILE,
    UNDEFINED,
    EpochEndOffset,
    EpochEntry,
    LeaderEpochCache,
)
from raylog.storage import PartitionLog
from raylog.storage.checkpoint import Checkpoint
from tests.unit.logutil import batch_of


def header(base_offset: int, leader_epoch: int, records: int = 1) -> BatchHeader:
    """A header with the fields the cache reads; the rest are placeholders."""
    return BatchHeader(base_offset, 0, leader_epoch, 1, 0, 0, 0, records - 1, 0, 0,
                       -1, -1, -1, records)


@pytest.fixture
def cache() -> LeaderEpochCache:
    return LeaderEpochCache(entries=[(1, 0), (3, 10), (6, 20)])


# -- assign -------------------------------------------------------------------------------------

def test_assign_records_the_first_batch_of_each_epoch():
    cache = LeaderEpochCache()
    assert cache.latest_epoch == -1 and cache.entries == ()
    assert cache.assign(0, 0)
    assert not cache.assign(0, 5)  # later batches of the latest epoch change nothing
    assert cache.assign(2, 9)
    assert cache.entries == (EpochEntry(0, 0), EpochEntry(2, 9))
    assert cache.latest_epoch == 2 and cache.entries[0] == (0, 0)


def test_assign_the_latest_epoch_earlier_moves_its_start_down(cache):
    # Kafka's rule: the same epoch at a lower offset replaces the entry (the log was cut
    # below the epoch's start without the cache being told).
    assert cache.assign(6, 15)
    assert cache.entries == ((1, 0), (3, 10), (6, 15))


def test_assign_removes_entries_at_or_above_the_new_start(cache):
    assert cache.assign(7, 10)
    assert cache.entries == ((1, 0), (7, 10))


def test_assign_of_an_older_epoch_is_refused_and_changes_nothing(cache, tmp_path):
    path = tmp_path / LEADER_EPOCH_FILE
    cache = LeaderEpochCache(path, cache.entries)
    cache.assign(6, 25)  # no-op, but the file must exist for the comparison below
    cache.assign(7, 30)
    before = path.read_bytes()
    for epoch, start in [(5, 40), (2, 5), (6, 31)]:
        with pytest.raises(LeaderEpochRegressionError, match="older than the latest epoch 7"):
            cache.assign(epoch, start)
    assert cache.entries == ((1, 0), (3, 10), (6, 20), (7, 30))
    assert path.read_bytes() == before


@pytest.mark.parametrize("entry", [(-1, 0), (0, -1), (NO_LEADER_EPOCH, 5), (1.0, 2), (1, "2"),
                                   (True, 0)])
def test_assign_refuses_bad_entries(entry):
    cache = LeaderEpochCache()
    with pytest.raises(InvalidArgumentError):
        cache.assign(*entry)
    assert cache.entries == ()


@pytest.mark.parametrize("entries", [[(1, 0), (1, 5)], [(1, 5), (2, 5)], [(2, 0), (1, 5)],
                                     [(1, 5), (2, 3)], [(-1, 0)]])
def test_entries_given_must_increase(entries):
    with pytest.raises(InvalidArgumentError):
        LeaderEpochCache(entries=entries)


# -- queries ------------------------------------------------------------------------------------

@pytest.mark.parametrize("offset, epoch", [(0, 1), (9, 1), (10, 3), (19, 3), (20, 6), (99, 6)])
def test_epoch_at(cache, offset, epoch):
    assert cache.epoch_at(offset) == epoch


def test_epoch_at_below_the_first_entry_is_undefined():
    assert LeaderEpochCache(entries=[(2, 5)]).epoch_at(4) == -1
    assert LeaderEpochCache().epoch_at(0) == -1




@pytest.mark.parametrize("requested, answer", [
    (6, (6, 30)),     # the latest epoch: still being written, ends at the log end
    (3, (3, 20)),     # a past epoch ends where the next one starts
    (1, (1, 10)),
    (4, (3, 20)),     # unknown here: the largest epoch below it, and the next epoch's start
    (5, (3, 20)),
    (2, (1, 10)),
    (0, (0, 0)),      # below the first epoch: the requested epoch and the first start
    (7, (-1, -1)),    # above every epoch
    (-1, (-1, -1)),   # the asker has no epoch
    (-7, (-1, -1)),
])
def test_end_offset_for_follows_kip_279(cache, requested, answer):
    assert cache.end_offset_for(requested, log_end_offset=30) == EpochEndOffset(*answer)


def test_end_offset_for_below_a_truncated_start():
    cache = LeaderEpochCache(entries=[(4, 100), (5, 130)])
    assert cache.end_offset_for(2, 150) == (2, 100)


def test_end_offset_for_on_an_empty_cache_is_undefined():
    assert LeaderEpochCache().end_offset_for(0, 10) == UNDEFINED


# -- truncation ---------------------------------------------------------------------------------

@pytest.mark.parametrize("end, entries", [
    (30, [(1, 0), (3, 10), (6, 20)]),
    (21, [(1, 0), (3, 10), (6, 20)]),
    (20, [(1, 0), (3, 10)]),          # an entry starting at the new end goes
    (11, [(1, 0), (3, 10)]),
    (10, [(1, 0)]),
    (0, []),
])
def test_truncate_from_end(cache, end, entries):
    changed = cache.truncate_from_end(end)
    assert cache.entries == tuple(entries)
    assert changed == (len(entries) < 3)


@pytest.mark.parametrize("start, entries", [
    (0, [(1, 0), (3, 10), (6, 20)]),
    (4, [(1, 4), (3, 10), (6, 20)]),     # the covering entry's start moves up
    (10, [(3, 10), (6, 20)]),            # entries wholly below go
    (15, [(3, 15), (6, 20)]),
    (40, [(6, 40)]),                     # the latest epoch is kept, moved to the new start
])
def test_truncate_from_start(cache, start, entries):
    changed = cache.truncate_from_start(start)
    assert cache.entries == tuple(entries)
    assert changed == (start != 0)


def test_truncate_from_start_below_the_first_entry_changes_nothing():
    cache = LeaderEpochCache(entries=[(2, 5)])
    assert not cache.truncate_from_start(3)
    assert cache.entries == ((2, 5),)


def test_clear(cache):
    cache.clear()
    assert cache.entries == () and cache.latest_epoch == -1


# -- the file -----------------------------------------------------------------------------------

def test_every_change_is_written(tmp_path):
    path = tmp_path / LEADER_EPOCH_FILE
    cache = LeaderEpochCache(path)
    steps = [lambda: cache.assign(0, 0), lambda: cache.assign(2, 7), lambda: cache.assign(5, 9),
             lambda: cache.truncate_from_end(8), lambda: cache.truncate_from_start(3),
             lambda: cache.assign(2, 4), lambda: cache.clear()]
    for step in steps:
        step()
        assert LeaderEpochCache.load(path).entries == cache.entries
    cache.assign(3, 10)
    assert Checkpoint(path).read() == ["3 10"]


def test_a_missing_file_loads_empty(tmp_path):
    assert LeaderEpochCache.load(tmp_path / LEADER_EPOCH_FILE).entries == ()


@pytest.mark.parametrize("entries", [
    ["1 0", "1 5"], ["2 0", "1 5"], ["1 5", "2 5"], ["1 5", "2 3"],   # not increasing
    ["-1 0"], ["1 -3"], ["1"], ["1 2 3"], ["a b"], ["1  2"], [""],
])
def test_a_damaged_file_is_a_typed_error(tmp_path, entries):
    path = tmp_path / LEADER_EPOCH_FILE
    Checkpoint(path).write(entries)
    with pytest.raises(CorruptCheckpointError, match=LEADER_EPOCH_FILE):
        LeaderEpochCache.load(path)


# (a file of a newer version, "1\n1\n1 0\n", is refused: tests/unit/test_format_versions.py)
@pytest.mark.parametrize("content", [b"", b"0\n2\n1 0\n", b"v7\n1\n1 0\n", b"\xff\xfe",
                                     b"0\n1\n1 0"])
def test_a_torn_or_foreign_file_is_a_typed_error(tmp_path, content):
    path = tmp_path / LEADER_EPOCH_FILE
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError):
        LeaderEpochCache.load(path)


# -- rebuild and open ---------------------------------------------------------------------------

def test_rebuild_from_batch_headers(tmp_path):
    cache = LeaderEpochCache(tmp_path / LEADER_EPOCH_FILE, [(9, 0)])
    cache.rebuild([header(0, NO_LEADER_EPOCH, 3), header(3, 0, 2), header(5, 0), header(6, 2, 4),
                   header(10, 3), header(11, 3)])
    assert cache.entries == ((0, 3), (2, 6), (3, 10))
    assert LeaderEpochCache.load(tmp_path / LEADER_EPOCH_FILE).entries == cache.entries


def test_rebuild_describes_a_log_whose_epochs_go_backwards_as_kafka_does():
    # Not refused as in assign: the log holds these batches, the cache must describe it.
    cache = LeaderEpochCache()
    cache.rebuild([header(0, 1), header(5, 4), header(8, 2), header(9, 3)])
    assert cache.entries == ((1, 0), (2, 8), (3, 9))


def test_open_reads_a_good_file_without_walking_the_log(tmp_path):
    path = tmp_path / LEADER_EPOCH_FILE
    LeaderEpochCache(path, [(1, 0), (3, 10)]).assign(4, 20)

    def headers():
        raise AssertionError("a good file must not make the log be walked")

    assert LeaderEpochCache.open(path, 0, 30, headers).entries == ((1, 0), (3, 10), (4, 20))


@pytest.mark.parametrize("damage", [None, b"garbage", b"0\n2\n5 0\n3 9\n"])
def test_open_rebuilds_a_missing_or_damaged_file_from_the_log(tmp_path, damage):
    path = tmp_path / LEADER_EPOCH_FILE
    if damage is not None:
        path.write_bytes(damage)
    cache = LeaderEpochCache.open(path, 0, 12, lambda: [header(0, 1, 5), header(5, 4, 7)])
    assert cache.entries == ((1, 0), (4, 5))
    assert LeaderEpochCache.load(path).entries == cache.entries


def test_open_cuts_what_the_log_does_not_hold(tmp_path):
    # The cache is written before the log, so a crash can leave entries past the log end;
    # retention can have moved the log start past the first entries.
    path = tmp_path / LEADER_EPOCH_FILE
    Checkpoint(path).write(["1 0", "3 10", "4 20", "6 30"])
    cache = LeaderEpochCache.open(path, 12, 30, lambda: [])
    assert cache.entries == ((3, 12), (4, 20))
    assert LeaderEpochCache.load(path).entries == cache.entries


def test_open_rebuilds_from_a_real_log(tmp_path):
    with PartitionLog(tmp_path / "t-0") as log:
        log.append(batch_of([b"a", b"b"]))                 # no leader epoch: not cached
        for epoch, n in [(0, 3), (0, 1), (2, 2), (5, 1), (5, 4)]:
            log.append(batch_of([b"x"] * n), epoch)
        cache = LeaderEpochCache.open(
            tmp_path / "t-0" / LEADER_EPOCH_FILE, log.log_start_offset, log.log_end_offset,
            lambda: (h for segment in log.segments for _, h in segment.walk()))
    assert cache.entries == ((0, 2), (2, 6), (5, 8))
    assert cache.end_offset_for(2, log_end_offset=13) == (2, 8)


# -- properties ---------------------------------------------------------------------------------

# A log as a list of per-offset epochs from its start offset, changed by appends in epochs that
# never go back, truncations and retention, with the cache kept in step as a replica would.
operations = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(0, 3), st.integers(1, 4)),  # epoch bump, records
    st.tuples(st.just("truncate"), st.integers(0, 40)),
    st.tuples(st.just("retain"), st.integers(0, 40)),
), max_size=30)


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations)
def test_cache_agrees_with_the_log_it_follows(tmp_path_factory, ops):
    path = tmp_path_factory.mktemp("epochs") / LEADER_EPOCH_FILE
    cache = LeaderEpochCache(path)
    start, epochs, epoch = 0, [], 0  # epochs[i] is the epoch of offset start + i
    for op in ops:
        if op[0] == "append":
            epoch += op[1]
            cache.assign(epoch, start + len(epochs))
            epochs += [epoch] * op[2]
        elif op[0] == "truncate":
            end = max(op[1], start)
            del epochs[end - start:]
            cache.truncate_from_end(start + len(epochs))
        else:
            new_start = min(op[1], start + len(epochs) - 1)  # retention leaves a record
            if new_start > start:
                del epochs[:new_start - start]
                start = new_start
                cache.truncate_from_start(start)
    end = start + len(epochs)
    expected = [(e, start + i) for i, e in enumerate(epochs) if i == 0 or epochs[i - 1] != e]
    assert cache.entries == tuple(expected)
    assert LeaderEpochCache.load(path).entries == cache.entries
    for i, e in enumerate(epochs):
        assert cache.epoch_at(start + i) == e
    for e in set(epochs):
        last = start + max(i for i, x in enumerate(epochs) if x == e)
        answer = cache.end_offset_for(e, end)
        assert answer == (e, end if e == epochs[-1] else last + 1)
    if epochs:
        assert cache.end_offset_for(epochs[-1] + 1, end) == UNDEFINED
