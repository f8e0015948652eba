"""Topics as Ray Datasets, and Datasets written to topics.

Reading: the bounds are resolved to an offset range per partition (by its leader); each
range (cut into blocks of at most ``max_records_per_block``) is read by an in-sync replica
on the caller's node if there is one, else the leader: the broker actor holding it, on the
node that holds its segments, decodes the stored batches straight into
one Arrow table (LZ4 and Arrow IPC, no per-record Python) with the columns of Spark's Kafka
source, answered as Ray Data's block (a small one as an Arrow IPC stream in ``bytes``: a
small table's answer carried bytes of the broker's freed memory,
raylog.records.kafka_columns.analytics_block).
The blocks stay in that node's object store; the Dataset is built from their references, so
the driver never touches the data.

A leader that moves meanwhile (its broker died, say) is no reason to fail: retriable errors
of the lookups and the reads (a dead or replaced leader, a new leader that does not know yet
that the records asked for are committed: OffsetNotAvailableError, KIP-207) are retried with
fresh metadata, for up to ``timeout_ms`` (default READ_RETRY_S). Ranges stay as planned: a
new leader has every record below the old leader's high watermark.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import pyarrow as pa
import ray
from ray.exceptions import ActorUnschedulableError, RayActorError, RayTaskError

from raylog.client.connection import RaylogCluster, cluster_or_default
from raylog.client.remote import discard, unwrap
from raylog.client.remote import resolve as resolve_ref
from raylog.errors import InvalidArgumentError
from raylog.integrations.ray_data import cold
from raylog.integrations.ray_data.ranges import (
    EARLIEST,
    LATEST,
    Bound,
    Timestamp,
    check_range,
    resolve,
    spec_for,
)
from raylog.metadata.topics import topic_names, validate_topic_name
from raylog.mirror.retry import Backoff, Retrying
from raylog.records.kafka_columns import KAFKA_SCHEMA
from raylog.replica.partition import ISOLATION_LEVELS, READ_COMMITTED, READ_UNCOMMITTED
from raylog.types import LAST_STABLE, TopicPartition
from raylog.util.arguments import check_int, short_repr

logger = logging.getLogger(__name__)

DEFAULT_BLOCK_RECORDS = 1_000_000
WRITER_CPUS = 0.5  # per write_dataset worker
READ_RETRY_S = 60.0  # lookups and reads retry retriable failures this long, by default
RETRY_BACKOFF_S = (0.1, 1.0)  # first wait after a retriable failure, and the longest

T = TypeVar("T")


def read_retrying(what: str, attempt: Callable[[bool], T], timeout_s: float | None = None
                  ) -> T:
    """``attempt(refresh)`` until it works, waiting a little after each retriable failure (a
    leader moving, a new leader that cannot answer yet), for up to ``timeout_s`` (None:
    READ_RETRY_S), after which the last failure is raised. ``refresh`` is true from the
    second attempt on: the metadata that led to the failure is stale. Readers of planned
    ranges (Ray Data here, Spark's Python workers) use it."""
    retrying = Retrying(Backoff(*RETRY_BACKOFF_S), logger.info,
                        READ_RETRY_S if timeout_s is None else timeout_s)
    tries = 0

    def once() -> T:
        nonlocal tries
        tries += 1
        return attempt(tries > 1)

    return retrying.call(what, once)


def offset_ranges(topics: str | Iterable[str], start: Bound = EARLIEST, end: Bound = LATEST,
                  *, cluster: RaylogCluster | None = None, timeout_s: float | None = None,
                  isolation_level: str = READ_UNCOMMITTED
                  ) -> dict[TopicPartition, tuple[int, int]]:
    """Resolve read bounds to ``[start, end)`` per partition, checked against each partition.
    "latest" is the high watermark, or with ``isolation_level="read_committed"`` the last
    stable offset.

    Retriable failures (a leader moving, a new leader that cannot answer yet) are asked
    again with fresh metadata for up to ``timeout_s`` (None: READ_RETRY_S). Raises
    UnknownTopicError, OffsetOutOfRangeError (a bound before the log start or past the
    end), InvalidOffsetRangeError (end before start, malformed bound), RequestTimeoutError
    (the leaders did not answer within ``timeout_s``) or the last retriable error.
    """
    names = topic_names(topics)
    cluster = cluster_or_default(cluster)
    latest = _latest_spec(isolation_level)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    return read_retrying(f"looking up the offsets of {names}",
                         lambda refresh: _offset_ranges(names, start, end, cluster, refresh,
                                                        deadline, latest), timeout_s)


def _latest_spec(isolation_level: str) -> str:
    """What a leader is asked for as "latest" at this isolation level."""
    if isolation_level not in ISOLATION_LEVELS:
        raise InvalidArgumentError(f"isolation_level must be one of {ISOLATION_LEVELS}, got "
                                   f"{short_repr(isolation_level)}")
    return LAST_STABLE if isolation_level == READ_COMMITTED else LATEST


def _offset_ranges(names: list[str], start: Bound, end: Bound, cluster: RaylogCluster,
                   refresh: bool, deadline: float | None, latest_spec: str = LATEST
                   ) -> dict[TopicPartition, tuple[int, int]]:
    metas = {name: cluster.topic(name, refresh=refresh) for name in names}
    tps = [TopicPartition(name, p) for name, meta in metas.items()
           for p in range(meta.num_partitions)]
    specs = {tp: (spec_for(start, tp, EARLIEST, "start"), spec_for(end, tp, LATEST, "end"))
             for tp in tps}
    leaders = {tp: metas[tp.topic].partitions[tp.partition].leader_client() for tp in tps}
    # Every lookup is sent before any answer is awaited.
    bounds = {tp: (leaders[tp].list_offset(EARLIEST), leaders[tp].list_offset(latest_spec))
              for tp in tps}
    times = {tp: {spec.ms: leaders[tp].list_offset(spec.ms) for spec in specs[tp]
                  if isinstance(spec, Timestamp)} for tp in tps}

    def answer(ref: ray.ObjectRef) -> Any:
        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        return resolve_ref(ref, left)

    out = {}
    try:
        for tp in tps:
            earliest = answer(bounds[tp][0])[0]
            latest = answer(bounds[tp][1])[0]

            def by_time(ms: int, refs=times[tp]) -> int | None:
                found = answer(refs[ms])
                return None if found is None else found[0]

            first, last = (resolve(spec, earliest, latest, by_time) for spec in specs[tp])
            check_range(tp, first, last, earliest, latest)
            out[tp] = (first, last)
    except BaseException:
        for ref in [*(r for pair in bounds.values() for r in pair),
                    *(r for found in times.values() for r in found.values())]:
            discard(ref)  # answers not read: Ray must not report their errors as unhandled
        raise
    return out


def read_topic(topics: str | Iterable[str], start_offset: Bound = EARLIEST,
               end_offset: Bound = LATEST, *, cluster: RaylogCluster | None = None,
               timeout_ms: int | None = None, override_num_blocks: int | None = None,
               max_records_per_block: int = DEFAULT_BLOCK_RECORDS,
               value_format: str | None = None,
               value_schema: str | dict | None = None,
               isolation_level: str = READ_UNCOMMITTED) -> ray.data.Dataset:
    """Records of ``topics`` in ``[start_offset, end_offset)`` per partition as a Ray
    Dataset; parameters as ``ray.data.read_kafka`` names them.

    Bounds: ``"earliest"``, ``"latest"``, an offset, a ``datetime`` (the first record at or
    after it; without a timezone, UTC), ``raylog.integrations.ray_data.ranges.Timestamp(ms)``,
    or a map per partition (``{topic: {partition: ...}}``, ``{TopicPartition: ...}`` or
    ``{(topic, p): ...}``, with -2/-1 for earliest/latest as in Spark; a partition it omits
    reads from the earliest or to the latest). ``timeout_ms`` bounds the offset lookups
    (RequestTimeoutError past it) and how long lookups and reads retry when a leader moves
    (default READ_RETRY_S; past it the last retriable error is raised).
    ``override_num_blocks`` cuts the ranges into about that
    many blocks of equal size (at least one per partition with records); otherwise a block
    holds at most ``max_records_per_block`` records. Columns as Spark's Kafka source names them
    (KAFKA_SCHEMA). Consumers' rules apply: only records below the high watermark are
    visible; with ``isolation_level="read_committed"``, only committed transactions'
    records, below the last stable offset ("latest" is that offset), read from the leaders.

    ``value_format="avro"``: values in Confluent's wire format become typed columns of the
    reader schema (``value_schema``, else the latest of ``<topic>-value`` in the cluster's
    schema registry), each value's writer schema resolved against it; the Kafka columns
    follow, but for those a field of the value shadows (raylog/integrations/ray_data/avro.py).

    >>> ds = read_topic("pageviews", start_offset="earliest", end_offset="latest")
    >>> ds.count()
    """
    check_int("max_records_per_block", max_records_per_block, 1)
    if value_format not in (None, "avro"):
        raise InvalidArgumentError(f"value_format must be None or 'avro', got "
                                   f"{short_repr(value_format)}")
    if timeout_ms is not None:
        check_int("timeout_ms", timeout_ms, 0)
    if override_num_blocks is not None:
        check_int("override_num_blocks", override_num_blocks, 1)
    cluster = cluster_or_default(cluster)
    reader = None
    if value_format == "avro":  # before anything is read: the subject may have no version
        from raylog.integrations.ray_data.avro import reader_schema

        reader = reader_schema(topic_names(topics), value_schema)
    timeout_s = None if timeout_ms is None else timeout_ms / 1000
    ranges = offset_ranges(topics, start_offset, end_offset, cluster=cluster,
                           timeout_s=timeout_s, isolation_level=isolation_level)
    if override_num_blocks is not None:
        total = sum(last - first for first, last in ranges.values())
        max_records_per_block = max(math.ceil(total / override_num_blocks), 1)
    build = _kafka_dataset
    if reader is not None:
        from raylog.integrations.ray_data.avro import avro_dataset

        def build(refs: list[ray.ObjectRef]) -> ray.data.Dataset:
            return avro_dataset(refs, reader)

    return read_retrying(f"reading {topic_names(topics)}",
                         lambda refresh: _read_blocks(cluster, ranges, max_records_per_block,
                                                      build, refresh, isolation_level,
                                                      timeout_s),
                         timeout_s)


def _read_blocks(cluster: RaylogCluster, ranges: dict[TopicPartition, tuple[int, int]],
                 max_records_per_block: int,
                 build: Callable[[list[ray.ObjectRef]], ray.data.Dataset],
                 refresh: bool, isolation_level: str = READ_UNCOMMITTED,
                 timeout_s: float | None = None) -> ray.data.Dataset:
    """Plan the ranges against the partitions' tiered views (cold pieces of remote segments
    below the local log start, read from the object store by the cold-read gateways of the
    leaders' nodes: cold.py; the hot rest in blocks), ask for every block, each hot one
    from an in-sync replica on this node if there is one, else the leader (KIP-392;
    read_committed: the leader, whose last stable offset planned the ranges), each answered
    as a block (kafka_columns.analytics_block), and build the Dataset of those blocks. Ray
    Data waits for every block as it builds it: a block that failed fails this attempt with
    the raylog error it was, and the next attempt plans and asks for all of them again."""
    node_id = ray.get_runtime_context().get_node_id()
    views = cold.tiered_views(cluster, sorted(ranges), refresh, timeout_s)
    plan = cold.plan_read(ranges, views, max_records_per_block)
    metas = {tp.topic: cluster.topic(tp.topic, refresh=refresh) for tp, _, _ in plan.hot}
    committed = isolation_level == READ_COMMITTED
    refs = cold.cold_refs(cluster, plan.cold, isolation_level, timeout_s)
    refs += [(metas[tp.topic].partitions[tp.partition].leader_client() if committed
              else metas[tp.topic].partitions[tp.partition].nearest_client(node_id))
             .read_kafka_table(s, e, isolation_level, block=True) for tp, s, e in plan.hot]
    try:
        return build(refs)
    except (RayTaskError, RayActorError, ActorUnschedulableError) as e:
        for ref in refs:
            discard(ref)
        raise unwrap(e) from e


def _kafka_dataset(refs: list[ray.ObjectRef]) -> ray.data.Dataset:
    if not refs:
        return ray.data.from_arrow(KAFKA_SCHEMA.empty_table())
    return ray.data.from_arrow_refs(refs)


class _ProduceBlocks:
    """A Ray Data worker that produces the blocks it is given (one Producer per worker)."""

    def __init__(self, topic: str, settings: dict[str, Any]) -> None:
        from raylog.client.producer import Producer

        self.topic = topic
        self.producer = Producer(**settings)

    def __call__(self, block: pa.Table) -> pa.Table:
        batches = self.producer.send_batch(self.topic, block).result()
        return pa.table({"records": [sum(rows for _, _, rows in batches)]})

    def __del__(self) -> None:
        self.producer.close()  # every block's result() was read: no unseen failure remains


def check_write(topic: str, cluster: RaylogCluster | None,
                producer_settings: dict[str, Any] | None) -> dict[str, Any]:
    """Refuse a write to a bad or unknown topic, or with bad producer settings, before any
    work; return the settings for the writers' producers."""
    from raylog.client.producer import producer_config

    validate_topic_name(topic)
    settings = {} if producer_settings is None else producer_settings
    producer_config(settings)  # here, not in every worker
    cluster_or_default(cluster).topic(topic)
    return dict(settings)


def write_dataset(dataset: ray.data.Dataset, topic: str, *,
                  cluster: RaylogCluster | None = None,
                  producer_settings: dict[str, Any] | None = None,
                  concurrency: int = 1) -> int:
    """Produce every row of ``dataset`` to ``topic``; returns the number of records.

    Rows need a ``value`` column (binary or string) and may have ``key``, ``timestamp``,
    ``headers`` and ``partition``; they are partitioned as the producer would (by key, else
    spread batch by batch). Runs in ``concurrency`` Ray Data workers, each with a Producer.
    Raises InvalidRecordError before anything is written if there is no ``value`` column.
    """
    from raylog.client.tables import payload_table

    if not isinstance(dataset, ray.data.Dataset):
        raise InvalidArgumentError(f"expected a ray.data.Dataset, got {short_repr(dataset)}")
    settings = check_write(topic, cluster, producer_settings)
    # More workers than the cluster can run would wait forever for their CPUs.
    check_int("concurrency", concurrency, 1,
              max(1, int(ray.cluster_resources().get("CPU", 1) / WRITER_CPUS)))
    schema = dataset.schema()
    if schema is None:
        return 0  # no blocks, no columns: nothing to write
    payload_table(schema.base_schema.empty_table())  # refuses a table without value
    written = dataset.map_batches(
        _ProduceBlocks, fn_constructor_args=(topic, settings),
        batch_format="pyarrow", batch_size=None, concurrency=concurrency, num_cpus=WRITER_CPUS,
    )
    return sum(row["records"] for row in written.take_all())
