"""The broker's background thread for storage work (actors/background.py): compaction,
flushes and deletions run off the event loop, while the loop goes on appending and reading."""

from __future__ import annotations

import asyncio

from actors.background import StorageWorker
from raylog.storage import LogConfig, PartitionLog
from raylog.storage.handoff import DELETED_SUFFIX
from tests.unit.logutil import FakeClock, all_records, batch_of

NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=2048, index_interval_bytes=256, retention_ms=None,
                   cleanup_policy="compact,delete", min_cleanable_dirty_ratio=0.0)


def newest(log: PartitionLog) -> dict[bytes, bytes]:
    return {r.key: r.value for r in all_records(log)}


def append(log: PartitionLog, key: bytes, value: bytes) -> None:
    log.append(batch_of([value], keys=[key], ts=NOW))


def test_passes_run_on_the_thread_while_the_loop_appends_and_reads(tmp_path):
    log = PartitionLog(tmp_path, CONFIG, clock=FakeClock(NOW))
    model: dict[bytes, bytes] = {}
    for i in range(200):
        key, value = b"k%d" % (i % 6), b"v%d" % i
        append(log, key, value)
        model[key] = value
    log.roll()
    size = log.size_bytes

    async def main() -> tuple[int, int]:
        worker = StorageWorker()
        passes = reads = 0
        for i in range(40):
            if worker.compact(log, log.log_end_offset):
                passes += 1
            assert newest(log) == model  # before, during or after a swap: the same values
            reads += 1
            key, value = b"k%d" % (i % 6), b"new%d" % i
            append(log, key, value)
            model[key] = value
            if i % 10 == 9:
                log.roll()
            await asyncio.sleep(0.01)
        await worker.idle()
        return passes, reads

    passes, reads = asyncio.run(main())
    assert passes >= 2 and reads == 40
    assert newest(log) == model
    assert log.size_bytes < size
    offsets = [r.offset for r in all_records(log)]
    assert offsets == sorted(set(offsets))
    log.close()
    assert newest(PartitionLog(tmp_path, CONFIG)) == model


def test_retired_segments_and_flushes_are_done_by_the_thread(tmp_path):
    clock = FakeClock(NOW)
    config = CONFIG.replace(cleanup_policy="delete", flush_ms=1000)
    log = PartitionLog(tmp_path, config, clock=clock)
    log.defer_deletions = True
    for i in range(60):
        append(log, b"k%d" % i, b"v%d" % i)
    start = log.segments[3].base_offset

    async def main() -> None:
        worker = StorageWorker()
        log.advance_log_start(start)
        assert list(tmp_path.glob(f"*.log{DELETED_SUFFIX}"))
        worker.delete_retired(log)
        clock.advance(1000)
        assert worker.flush(log)
        assert not worker.flush(log)  # one at a time
        await worker.idle()

    asyncio.run(main())
    assert not list(tmp_path.glob(f"*{DELETED_SUFFIX}"))
    assert log.recovery_point == log.log_end_offset == log.synced_end_offset
    assert [r.offset for r in all_records(log)] == list(range(start, 60))
