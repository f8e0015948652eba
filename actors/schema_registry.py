"""The schema registry actor: the one writer of ``_schemas``.

One detached actor named ``raylog-schema-registry`` in namespace ``raylog``, on the head
node, restarted by Ray after a crash, started by the controller when a client
(``raylog/schemas/client.py``) or the Java connector first asks. It holds a
:class:`raylog.schemas.registry.Registry` over :class:`TopicLog`, raylog's own Producer and
Consumer on the single partition of the compacted topic ``_schemas``: it replays the topic
when it (re)starts, and every change is written with ``acks="all"`` and read back before it
is answered. Its methods run one at a time (a synchronous actor), so the registry's ids are
handed out by a single writer; every REST server and command line of the cluster goes
through it (see docs/schemas.md).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import ray

from actors import log_what_matters
from raylog.errors import RaylogError
from raylog.schemas.errors import RegistryStoreError
from raylog.schemas.registry import Registry
from raylog.schemas.state import SCHEMAS_TOPIC, Record
from raylog.types import TopicPartition
from raylog.util.cluster_names import ACTOR_RUNTIME_ENV, HEAD_RESOURCE, NAMESPACE, REGISTRY_NAME
from raylog.util.interop import java_error

logger = logging.getLogger(__name__)

READ_TIMEOUT_S = 30.0  # a replay that cannot reach the records it needs fails then
SCHEMAS_TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": 64 << 20}


class TopicLog:
    """The registry's log on ``_schemas`` partition 0 (a RegistryLog)."""

    def __init__(self) -> None:
        from raylog.client.connection import default_cluster
        from raylog.client.consumer import Consumer
        from raylog.client.producer import Producer

        # Replicated as __consumer_offsets is: min(3, live brokers) replicas,
        # min.insync.replicas 2 when there are 3.
        default_cluster().controller.ensure_internal_topic(SCHEMAS_TOPIC, 1,
                                                           SCHEMAS_TOPIC_CONFIGS)
        self.partition = TopicPartition(SCHEMAS_TOPIC, 0)
        self.producer = Producer(acks="all", linger_ms=0)  # idempotent, as acks="all" is
        # The leader: it knows the high watermark first, so a write reads back soonest.
        self.consumer = Consumer(auto_offset_reset="earliest", enable_auto_commit=False,
                                 fetch_from_nearest=False)
        self.consumer.assign([self.partition])
        self.consumer.seek_to_beginning(self.partition)

    def append(self, records: list[Record]) -> int:
        futures = [self.producer.send(SCHEMAS_TOPIC, value, key=key, partition=0)
                   for key, value in records]
        self.producer.flush()
        return futures[-1].result().offset

    def read(self, start: int, until: int | None) -> Iterator[tuple[int, bytes, bytes | None]]:
        consumer, tp = self.consumer, self.partition
        if consumer.position(tp) != start:
            consumer.seek(tp, start)
        end = consumer.end_offsets([tp])[tp] if until is None else until + 1
        deadline = time.monotonic() + READ_TIMEOUT_S
        while consumer.position(tp) < end:
            if time.monotonic() > deadline:
                raise RegistryStoreError(f"{SCHEMAS_TOPIC} gave no records up to offset {end} "
                                         f"within {READ_TIMEOUT_S} s")
            for record in consumer.poll(timeout_ms=200):
                yield record.offset, record.key, record.value

    def close(self) -> None:
        self.producer.close()
        self.consumer.close()


@ray.remote(num_cpus=0)
class SchemaRegistryActor:
    """Holds the Registry, built (by replaying ``_schemas``) on the first call; a call that
    finds the log unusable drops it, so the next call replays again."""

    def __init__(self) -> None:
        log_what_matters()
        self._registry: Registry | None = None
        self._log: TopicLog | None = None

    def _loaded(self) -> Registry:
        if self._registry is None:
            started = time.monotonic()
            try:
                self._log = self._log or TopicLog()
                self._registry = Registry(self._log)
            except RaylogError as e:
                self._drop()
                raise RegistryStoreError(f"the schema registry cannot load {SCHEMAS_TOPIC} "
                                         f"yet: {e}") from e
            state = self._registry.state
            logger.info("schema registry loaded %d records of %s in %.2f s: %d subjects, "
                        "max id %d", state.next_offset, SCHEMAS_TOPIC,
                        time.monotonic() - started, len(state.subjects), state.max_id)
        return self._registry

    def _drop(self) -> None:
        if self._log is not None:
            with contextlib.suppress(Exception):  # the log is being given up anyway
                self._log.close()
        self._log = self._registry = None

    def _do(self, call: Callable[[Registry], Any]) -> Any:
        """``call(registry)`` on the loaded registry."""
        registry = self._loaded()
        try:
            return call(registry)
        except RegistryStoreError:
            self._drop()  # what the log holds is unknown now: replay on the next call
            raise

    def ready(self) -> dict[str, Any]:
        state = self._loaded().state
        return {"subjects": len(state.subjects), "max_id": state.max_id,
                "records": state.next_offset}

    def register(self, subject: str, schema: str, schema_type: str | None = None,
                 references: list | None = None, normalize: bool = False) -> dict[str, Any]:
        return self._do(lambda r: r.register(subject, schema, schema_type, references, normalize))

    def lookup(self, subject: str, schema: str, schema_type: str | None = None,
               references: list | None = None, deleted: bool = False,
               normalize: bool = False) -> dict[str, Any]:
        return self._do(lambda r: r.lookup(subject, schema, schema_type, references, deleted,
                                           normalize))

    def schema(self, schema_id: int) -> dict[str, Any]:
        return self._do(lambda r: r.schema(schema_id))

    def versions_of_id(self, schema_id: int, deleted: bool = False) -> list[dict[str, Any]]:
        return self._do(lambda r: r.versions_of_id(schema_id, deleted))

    def subjects(self, deleted: bool = False, prefix: str = "") -> list[str]:
        return self._do(lambda r: r.subjects(deleted, prefix))

    def versions(self, subject: str, deleted: bool = False) -> list[int]:
        return self._do(lambda r: r.versions(subject, deleted))

    def version(self, subject: str, spec: object, deleted: bool = False) -> dict[str, Any]:
        return self._do(lambda r: r.version(subject, spec, deleted))

    def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        return self._do(lambda r: r.delete_subject(subject, permanent))

    def delete_version(self, subject: str, spec: object, permanent: bool = False) -> int:
        return self._do(lambda r: r.delete_version(subject, spec, permanent))

    def check(self, subject: str, schema: str, spec: object | None = None,
              schema_type: str | None = None, references: list | None = None) -> list[str]:
        return self._do(lambda r: r.check(subject, schema, spec, schema_type, references))

    def config(self, subject: str | None = None, default_to_global: bool = False) -> str:
        return self._do(lambda r: r.config(subject, default_to_global))

    def set_config(self, subject: str | None, level: object) -> str:
        return self._do(lambda r: r.set_config(subject, level))

    def delete_config(self, subject: str | None = None) -> str:
        return self._do(lambda r: r.delete_config(subject))

    # -- the Java connector (raylog/util/interop.py: JSON out, raylog errors as Java reads them) --

    def java_schema(self, schema_id: int) -> str:
        """``{"id", "schema"}`` of a global id as JSON: the writer schema of the values that
        carry it (the connector's ``valueFormat`` ``avro``)."""
        return self._java(lambda: {"id": schema_id, **self._do(lambda r: r.schema(schema_id))})

    def java_version(self, subject: str, version: str) -> str:
        """:meth:`version` as JSON (``version`` is ``latest`` or a number): the reader
        schema of a read."""
        return self._java(lambda: self._do(lambda r: r.version(subject, version)))

    @staticmethod
    def _java(answer: Callable[[], Any]) -> str:
        try:
            return json.dumps(answer())
        except RaylogError as e:
            raise java_error(e) from e


def registry_handle() -> ray.actor.ActorHandle:
    """The cluster's registry actor, created (detached, on the head node) if missing."""
    return SchemaRegistryActor.options(
        name=REGISTRY_NAME, namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
        max_restarts=-1, max_task_retries=0, resources={HEAD_RESOURCE: 0.001},
        runtime_env=ACTOR_RUNTIME_ENV).remote()
