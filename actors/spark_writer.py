"""The producer that Spark's raylog sink writes through: one actor per node, asked for by
the connector's writers on that node (ControllerActor.java_writer creates it).

A Spark task's DataWriter (Java) turns its rows into Arrow record batches of the sink's
columns (``topic``, ``key``, ``value``, ``partition``, ``headers``, as Spark's Kafka sink
takes them) and hands each, as Arrow IPC bytes, to :meth:`SparkWriter.java_write`: it
produces them with raylog's Producer (``send_batch``: murmur2 of the key, else sticky, or the
row's ``partition``), so records land where Kafka's clients would put them, and answers once
every record is acknowledged. Several writers share the actor; its threads share producers.

A transactional write (the sink's ``transactional.id`` option, docs/spark.md) gives each Spark
task its own transactional Producer here, ``<id>-<partition>``: :meth:`java_begin` fences any
earlier producer of that id (aborting what it left open) and begins; the task's batches go
through :meth:`java_write` into that transaction. A batch write's task ends with
:meth:`java_prepare`: its producer sends everything, names its transaction (id, producer id,
epoch) and is closed, the transaction left open; the driver, once every task succeeded,
commits them all in one joint commit (:meth:`java_commit_jointly`, from any gateway: all
or none), or aborts them all (:meth:`java_abort`, also from a gateway that does not hold
them).

The streaming sink with ``transactional.id`` begins and writes alike per micro-batch (its
tasks' transactions stay open here, and the driver commits each with :meth:`java_end`), with
the ids
``<id>-<query id>-<partition>``, and :meth:`java_begin` is given the batch: each task's
transaction also commits the record "this id wrote batch b" (a transactional offset commit,
:func:`batch_offsets`), and a task of a batch its id already committed writes nothing. A
query killed after some of a batch's commits is rerun from its checkpoint with the same
batch id and rows: the committed tasks skip, the others write (exactly once).
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time

import pyarrow as pa
import pyarrow.compute as pc
import ray

from actors import log_what_matters
from raylog.client.admin import Admin
from raylog.client.connection import connect
from raylog.client.producer import Producer, producer_config
from raylog.errors import (
    InvalidArgumentError,
    InvalidRecordError,
    RaylogError,
    TransactionAbortedError,
    UnstableOffsetCommitError,
)
from raylog.records.payload import HEADERS_TYPE
from raylog.types import PreparedTransaction, TopicPartition
from raylog.util import faults
from raylog.util.backoff import backoff_s
from raylog.util.interop import java_error

logger = logging.getLogger(__name__)

WRITER_CONCURRENCY = 16  # Spark tasks writing at once through one node's gateway
WRITE_TIMEOUT_S = 300.0  # beyond every producer's delivery timeout


@ray.remote(num_cpus=0, max_concurrency=WRITER_CONCURRENCY)
class SparkWriter:
    """Producers for Spark writers, one per distinct producer settings."""

    def __init__(self) -> None:
        log_what_matters()
        self._cluster = connect()  # the cluster this actor runs in
        self._producers: dict[str, Producer] = {}
        self._transactions: dict[str, Producer] = {}  # by transactional id, begun
        self._lock = threading.Lock()

    def _producer(self, settings: str) -> Producer:
        parsed = json.loads(settings) if settings else {}
        transactional_id = parsed.get("transactional_id")
        if transactional_id is not None:
            return self._open(transactional_id)
        with self._lock:
            producer = self._producers.get(settings)
            if producer is None:
                parsed = json.loads(settings) if settings else {}
                producer_config(parsed)  # InvalidConfigError for a bad setting
                producer = Producer(cluster=self._cluster, **parsed)
                self._producers[settings] = producer
            return producer

    def _open(self, transactional_id: str) -> Producer:
        """The producer of the open transaction of ``transactional_id`` held here."""
        with self._lock:
            producer = self._transactions.get(transactional_id)
        if producer is None:
            raise TransactionAbortedError(
                f"no transaction of {transactional_id!r} is open in this writer gateway "
                f"(it restarted, or the transaction ended): the task must begin again")
        return producer

    def java_write(self, topic: str, settings: str, batch: bytes) -> str:
        """Produce the rows of ``batch`` (an Arrow IPC stream) to the topic of each row's
        ``topic`` column, ``topic`` where it has none (the sink's ``topic`` option, which
        the connector puts in every row's place when set); returns JSON
        ``{"records": n}`` once all are acknowledged."""
        try:
            producer = self._producer(settings)
            table = pa.ipc.open_stream(batch).read_all()
            written = 0
            for name, rows in by_topic(table, topic):
                for part in by_partition_column(rows):
                    future = producer.send_batch(name, part)
                    written += sum(count for _, _, count in future.result(WRITE_TIMEOUT_S))
            return json.dumps({"records": written})
        except RaylogError as e:
            raise java_error(e) from e
        except (ValueError, pa.ArrowException) as e:
            raise java_error(InvalidRecordError(f"rows the sink cannot write: {e}")) from e

    def java_begin(self, settings: str, batch: str = "") -> str:
        """Begin the transaction of the ``transactional_id`` in ``settings`` (JSON producer
        settings) with a new producer: init_transactions fences an earlier producer of the id
        (here or anywhere) and aborts what it left open. Returns ``{}``.

        ``batch`` (the streaming sink's, JSON ``{"topic": t, "batch": b}``) makes it a
        micro-batch's transaction: if the id already committed batch ``b`` (an earlier run
        of the query, killed after this task's commit and before the batch's end), nothing
        begins and the answer is ``{"committed": true}`` (the task writes nothing); else the
        record "batch ``b`` is written" joins the transaction (see :func:`batch_offsets`),
        so it commits with the rows, or not at all."""
        try:
            parsed = json.loads(settings)
            transactional_id = parsed["transactional_id"]
            producer_config(parsed)
            self._drop(transactional_id)
            producer = Producer(cluster=self._cluster, **parsed)
            try:
                producer.init_transactions(WRITE_TIMEOUT_S)
                if batch:
                    record = json.loads(batch)
                    topic, number = record["topic"], record["batch"]
                    if self._batch_committed(transactional_id, topic, number):
                        producer.close()
                        return json.dumps({"committed": True})
                producer.begin_transaction()
                if batch:
                    producer.send_offsets_to_transaction(
                        batch_offsets(topic, number), transactional_id, WRITE_TIMEOUT_S)
            except RaylogError:
                producer.close()
                raise
            with self._lock:
                self._transactions[transactional_id] = producer
            return "{}"
        except RaylogError as e:
            raise java_error(e) from e

    def _batch_committed(self, transactional_id: str, topic: str, batch: int) -> bool:
        """Whether ``transactional_id``'s committed batch record is at ``batch`` or past it.
        Asked after init_transactions, so no transaction of the id is still completing; an
        offset still pending (UnstableOffsetCommitError) is asked again."""
        deadline = time.monotonic() + WRITE_TIMEOUT_S
        for attempt in itertools.count():
            try:
                found = self._cluster.controller.committed_offsets(
                    transactional_id, [(topic, 0)], require_stable=True)
                break
            except UnstableOffsetCommitError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(backoff_s(attempt, 0.05, 1.0))
        entry = found.get((topic, 0))
        return entry is not None and entry[0] > batch

    def java_end(self, transactional_id: str, outcome: str) -> str:
        """Commit (``outcome`` "commit") or abort ("abort") the open transaction of
        ``transactional_id`` held here, and close its producer. A commit of a transaction
        this gateway does not hold fails (TransactionAbortedError: it was lost with a
        restarted gateway, and the coordinator aborts it); an abort of one not held fences
        the id, which aborts whatever it left open. Returns ``{}``."""
        try:
            with self._lock:
                producer = self._transactions.pop(transactional_id, None)
            if outcome == "commit":
                if producer is None:
                    raise TransactionAbortedError(
                        f"the transaction of {transactional_id!r} is not open in this writer "
                        f"gateway any more: it cannot commit")
                try:
                    producer.commit_transaction(WRITE_TIMEOUT_S)
                finally:
                    producer.close()
                # (a fault test kills the gateway here: committed, not yet answered)
                faults.point("spark_writer.committed")
            elif producer is not None:
                try:
                    producer.abort_transaction(WRITE_TIMEOUT_S)
                finally:
                    producer.close()
            else:
                self._fence(transactional_id)
            return "{}"
        except RaylogError as e:
            raise java_error(e) from e

    def java_prepare(self, transactional_id: str) -> str:
        """The task's part of a joint commit: the open transaction of ``transactional_id``
        held here sends everything and stops (Producer.prepare_transaction), and its
        producer is closed and forgotten, the transaction left open at the coordinator for
        the driver's :meth:`java_commit_jointly` (or abort, or its timeout). Returns JSON
        ``{"producer_id": p, "producer_epoch": e}``, or ``{}`` if the coordinator holds
        nothing of it. One that fails stays held here, for the task's abort."""
        try:
            producer = self._open(transactional_id)
            prepared = producer.prepare_transaction(WRITE_TIMEOUT_S)
            with self._lock:
                self._transactions.pop(transactional_id, None)
            producer.close()
            if prepared is None:
                return "{}"
            return json.dumps({"producer_id": prepared.producer_id,
                               "producer_epoch": prepared.producer_epoch})
        except RaylogError as e:
            raise java_error(e) from e

    def java_commit_jointly(self, write_id: str, members: str) -> str:
        """Commit the prepared transactions of ``members`` (JSON ``[[transactional id,
        producer id, producer epoch], ...]``) all or none, as the commit named
        ``write_id`` (Admin.commit_transactions: retried while the answer is retriable).
        Returns ``{}`` once decided."""
        try:
            prepared = [PreparedTransaction(*m) for m in json.loads(members)]
            Admin(cluster=self._cluster).commit_transactions(write_id, prepared,
                                                             WRITE_TIMEOUT_S)
            # (a fault test kills the gateway here: committed, not yet answered)
            faults.point("spark_writer.committed_jointly")
            return "{}"
        except RaylogError as e:
            raise java_error(e) from e
        except (ValueError, TypeError) as e:
            raise java_error(InvalidArgumentError(
                f"not a list of [transactional id, producer id, epoch]: {e}")) from e

    def java_abort(self, transactional_ids: str) -> str:
        """Abort the transactions of a JSON list of transactional ids, wherever they are
        open (java_end's abort, one by one). Returns ``{}``."""
        for transactional_id in json.loads(transactional_ids):
            self.java_end(transactional_id, "abort")
        return "{}"

    def _fence(self, transactional_id: str) -> None:
        """Register the id once more: the coordinator aborts the transaction an earlier
        producer of it left open (and fences that producer)."""
        producer = Producer(cluster=self._cluster, transactional_id=transactional_id)
        try:
            producer.init_transactions(WRITE_TIMEOUT_S)
        finally:
            producer.close()

    def _drop(self, transactional_id: str) -> None:
        with self._lock:
            producer = self._transactions.pop(transactional_id, None)
        if producer is not None:
            producer.close()  # the new producer's init_transactions aborts what it left open

    def close(self) -> None:
        with self._lock:
            for producer in [*self._producers.values(), *self._transactions.values()]:
                producer.close()
            self._producers.clear()
            self._transactions.clear()


def batch_offsets(topic: str, batch: int) -> dict[TopicPartition, tuple[int, str]]:
    """The streaming sink's record that micro-batch ``batch`` is written, committed in the
    task's transaction: group = the task's transactional id, partition 0 of ``topic`` (the
    task's first row's topic: a topic that exists, as offsets need), offset ``batch + 1``.
    A rerun of the batch finds it (``_batch_committed``)."""
    return {TopicPartition(topic, 0): (batch + 1, json.dumps({"batch": batch}))}


def by_topic(table: pa.Table, default: str) -> list[tuple[str, pa.Table]]:
    """The rows of ``table`` per destination topic: the ``topic`` column where set, else
    ``default`` ("" meaning none: a row without a topic is refused)."""
    if "topic" not in table.column_names:
        groups = [(default, table)]
    else:
        topics = table.column("topic")
        if topics.null_count:
            topics = pc.fill_null(topics, default)
        rest = table.drop_columns(["topic"])
        names = pc.unique(topics).to_pylist()
        groups = [(name, rest) if len(names) == 1 else
                  (name, rest.filter(pc.equal(topics, name))) for name in names]
    for name, _ in groups:
        if not name:
            raise InvalidRecordError("a row has no topic: set the 'topic' option or give "
                                     "every row a 'topic'")
    return [(name, _sink_columns(rows)) for name, rows in groups]


def by_partition_column(table: pa.Table) -> list[pa.Table]:
    """Rows with a ``partition`` go there; rows whose ``partition`` is null are partitioned
    by key (as Spark's Kafka sink leaves them to the producer's partitioner)."""
    if "partition" not in table.column_names:
        return [table]
    column = table.column("partition")
    if column.null_count == 0:
        return [table]
    unset = pc.is_null(column)
    parts = [table.filter(pc.invert(unset)), table.filter(unset).drop_columns(["partition"])]
    return [p for p in parts if p.num_rows]


def _sink_columns(table: pa.Table) -> pa.Table:
    """Headers as the producer takes them (Java writes header keys as nullable)."""
    if "headers" in table.column_names and table.column("headers").type != HEADERS_TYPE:
        index = table.column_names.index("headers")
        try:
            table = table.set_column(index, "headers", table.column("headers").cast(HEADERS_TYPE))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise InvalidRecordError(f"headers must be array<struct<key: string, value: "
                                     f"binary>> with no null keys: {e}") from e
    return table
