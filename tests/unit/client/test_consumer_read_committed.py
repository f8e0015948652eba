"""A read_committed consumer drops the batches of the aborted transactions its fetches list
(by producer id and offset range) and the markers, and its position moves past them; a
read_uncommitted one shows every data record. Over the fake cluster of
tests/unit/fake_remote.py, no Ray."""

from __future__ import annotations

import pytest

import raylog.client.consumer as consumer_module
from raylog.client.consumer import Consumer
from raylog.errors import InvalidConfigError
from raylog.storage.txn_index import AbortedTxn
from raylog.types import LAST_STABLE, LATEST, TopicPartition
from tests.unit import fake_remote
from tests.unit.fake_remote import FakeController, _Method
from tests.unit.logutil import batch_of
from tests.unit.txnutil import ABORT, COMMIT, append_marker, txn_batch

TP = TopicPartition("t", 0)


@pytest.fixture
def controller(monkeypatch) -> FakeController:
    """t-0: a plain record, producer 7's aborted transaction interleaved with producer 8's
    committed one, then producer 9's aborted transaction at the end of the log."""
    fake_remote.install(monkeypatch, consumer_module)
    controller = FakeController()
    controller.add_topic("t", 1)
    p = controller.topics["t"][0]
    p.append(batch_of([b"plain"]))                   # 0
    p.append(txn_batch([b"x1", b"x2"], 7))            # 1-2
    p.append(txn_batch([b"c1"], 8))                   # 3
    p.append(txn_batch([b"x3"], 7, base_sequence=2))  # 4
    aborted_at = append_marker(p, ABORT, 7)           # 5
    append_marker(p, COMMIT, 8)                       # 6
    p.append(txn_batch([b"c2"], 8, base_sequence=1))  # 7
    append_marker(p, COMMIT, 8)                       # 8
    p.append(txn_batch([b"z"], 9))                    # 9
    last = append_marker(p, ABORT, 9)                 # 10
    p.aborted = [AbortedTxn(7, 1, aborted_at, 1), AbortedTxn(9, 9, last, 9)]
    return controller


def read_all(controller: FakeController, isolation: str, want: int) -> tuple[list, int]:
    consumer = Consumer(cluster=fake_remote.fake_cluster(controller),
                        auto_offset_reset="earliest", isolation_level=isolation)
    consumer.assign([TP])
    got = []
    for _ in range(50):
        got += consumer.poll(timeout_ms=100)
        if len(got) >= want and consumer.position(TP) == 11:
            break
    position = consumer.position(TP)
    consumer.close()
    return [(r.offset, r.value) for r in got], position


def test_read_committed_drops_aborted_transactions_and_moves_past_them(controller):
    got, position = read_all(controller, "read_committed", 3)
    assert got == [(0, b"plain"), (3, b"c1"), (7, b"c2")]
    assert position == 11  # past the aborted batch and the marker that end the log


def test_read_uncommitted_shows_every_data_record(controller):
    got, position = read_all(controller, "read_uncommitted", 7)
    assert [v for _, v in got] == [b"plain", b"x1", b"x2", b"c1", b"x3", b"c2", b"z"]
    assert position == 11


def test_isolation_level_is_checked_and_chooses_what_latest_means(controller):
    with pytest.raises(InvalidConfigError, match="isolation_level"):
        Consumer(cluster=fake_remote.fake_cluster(controller), isolation_level="committed")
    asked = []
    broker = controller.brokers[controller.topics["t"][0].leader]

    def list_offset(topic, partition, leader_epoch, spec):
        asked.append(spec)
        return broker._list_offset(topic, partition, leader_epoch, spec)
    broker.list_offset = _Method(broker, list_offset)
    for isolation, latest in (("read_committed", LAST_STABLE), ("read_uncommitted", LATEST)):
        consumer = Consumer(cluster=fake_remote.fake_cluster(controller),
                            isolation_level=isolation)
        consumer.assign([TP])
        assert consumer.end_offsets([TP]) == {TP: 11}
        consumer.seek_to_end(TP)
        assert consumer.position(TP) == 11
        consumer.assign([TopicPartition("t", 0)])
        consumer.close()
        assert asked[-2:] == [latest, latest]
