"""A Ray Data read's plan over tiered views: cold pieces per remote segment below the local
log start, the hot rest in blocks, and every range hot without a view (no Ray)."""

from __future__ import annotations

from raylog.integrations.ray_data.cold import plan_read
from raylog.tiered.cold_plan import TieredView
from raylog.tiered.layout import COPY_FINISHED, RemoteSegment
from raylog.types import TopicPartition

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def segment(topic: str, base: int, end: int) -> RemoteSegment:
    return RemoteSegment(topic=topic, topic_id="id", partition=0, segment_id=f"s{base}",
                         base_offset=base, end_offset=end, max_timestamp=0, size_bytes=1,
                         leader_epoch=0, broker_id=0, state=COPY_FINISHED)


def test_cold_pieces_per_segment_and_hot_blocks():
    view = TieredView((segment("a", 0, 99), segment("a", 100, 199)), 0, 200, 450, "file:///s")
    plan = plan_read({A0: (50, 450), A1: (0, 30), B0: (5, 5)},
                     {A0: view, A1: None, B0: TieredView.local_only(0, 5)}, 100)
    assert [(p.segment.base_offset, p.start, p.end) for _, p in plan.cold] == \
        [(0, 50, 100), (100, 100, 200)]
    assert all(v is view for v, _ in plan.cold)
    assert plan.hot == [(A0, 200, 300), (A0, 300, 400), (A0, 400, 450), (A1, 0, 30)]


def test_a_range_entirely_cold_asks_no_broker():
    view = TieredView((segment("a", 0, 99),), 0, 100, 120, "file:///s")
    plan = plan_read({A0: (10, 90)}, {A0: view}, 1000)
    assert plan.hot == [] and [(p.start, p.end) for _, p in plan.cold] == [(10, 90)]
