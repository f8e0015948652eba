"""The controller's answers to the Spark connector (raylog/integrations/spark/java): JSON in
and out.

Java calls the controller's ``java_*`` methods by name (.../spark/Cluster.java); they
are served here, over the same parts the Python clients' calls are (topics, brokers), and
keep the gateways Spark's tasks go through, one per node of each kind: writers
(actors/spark_writer.py) and cold readers (actors/cold_reader.py, which Ray Data's reads use
too: the controller's ``cold_reader``).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.broker_manager import BrokerManager
from actors.topic_manager import TopicManager
from raylog.errors import InvalidArgumentError, RaylogError
from raylog.metadata.topics import log_config
from raylog.util.cluster_names import NAMESPACE, REGISTRY_NAME, broker_actor_name
from raylog.util.interop import error_json

GATEWAY_PING_S = 10.0


async def _answers(actor: ray.actor.ActorHandle) -> bool:
    """Whether ``actor`` is not dead: it answers, or is too busy to within GATEWAY_PING_S
    (a gateway serving many tasks is not replaced)."""
    try:
        await asyncio.wait_for(actor.__ray_ready__.remote(), GATEWAY_PING_S)
    except TimeoutError:
        return True
    except ray.exceptions.RayActorError:
        return False
    return True


class JavaApi:
    """What the Spark connector asks the controller. Holds the gateway actors it started
    (their handles keep them alive). Its event loop is the only user."""

    def __init__(self, topics: TopicManager, brokers: BrokerManager) -> None:
        self.topics = topics
        self.brokers = brokers
        # (kind, node id) -> the name and the handle of that node's gateway of that kind now
        self._gateways: dict[tuple[str, str], tuple[str, ray.actor.ActorHandle]] = {}
        self._gateways_lock = asyncio.Lock()  # one start at a time

    async def java_topics(self) -> str:
        """The user topics' names, as a JSON list (Spark's ``subscribePattern`` matches them)."""
        return json.dumps(await self.topics.list_topics())

    async def java_metadata(self, names: str) -> str:
        """The metadata of the topics named in the JSON list ``names``, as JSON a Java caller
        can use: per topic its partitions (leader, leader epoch, replicas, ISR), whether it
        is compacted (its offsets then have gaps), whether it is tiered (remote.storage.enable,
        which cannot be turned off: a topic that is not has no cold part to plan), how long
        the connector may use it from
        its cache (the Python clients' METADATA_MAX_AGE_S: one age for both), and per live
        broker among its replicas the name of the broker's actor, its node and host; per
        unknown topic ``{"error": ...}``."""
        # Imported here: raylog.client's package loads the whole client (producer,
        # consumer, admin), which a controller's start need not wait for.
        from raylog.client.connection import METADATA_MAX_AGE_S

        answer: dict[str, Any] = {}
        for name in json.loads(names):
            try:
                raw = (await self.topics.metadata([name]))[name]
            except RaylogError as e:
                answer[name] = {"error": error_json(e)}
                continue
            brokers = {}
            for broker, where in raw["brokers"].items():
                info = self.brokers.registry.brokers.get(broker)
                brokers[str(broker)] = {"actor": broker_actor_name(where["node_id"]),
                                        "node_id": where["node_id"],
                                        "host": info.host if info is not None else None}
            # Java reaches replicas through their brokers by name (a broker passes calls on
            # to its replica hosts): the hosts' handles stay out of the JSON.
            partitions = [{k: v for k, v in p.items() if k != "hosts"}
                          for p in raw["partitions"]]
            answer[name] = {"partitions": partitions, "brokers": brokers,
                            "compacted": log_config(raw["configs"]).compact,
                            "tiered": bool(raw["configs"].get("remote_storage_enable")),
                            "max_age_ms": round(METADATA_MAX_AGE_S * 1000)}
        return json.dumps(answer)

    async def java_schema_registry(self) -> str:
        """The name (in namespace ``raylog``) of the cluster's schema registry actor, started
        if there is none yet (it is detached: it outlives this call and this actor)."""
        from actors.schema_registry import registry_handle

        registry_handle()
        return REGISTRY_NAME

    async def java_writer(self, node_id: str) -> str:
        """The name (in namespace ``raylog``) of the actor through which Spark tasks on
        ``node_id`` write (actors/spark_writer.py), started if there is none yet or if the
        one there died (see :meth:`_gateway`)."""
        from actors.spark_writer import SparkWriter

        return await self._gateway("spark-writer", SparkWriter, node_id)

    async def java_cold_reader(self, node_id: str) -> str:
        """The name (in namespace ``raylog``) of the actor through which Spark tasks and Ray
        Data reads read cold pieces on ``node_id`` from the object store
        (actors/cold_reader.py), started if there is none yet or if the one there died (see
        :meth:`_gateway`)."""
        from actors.cold_reader import ColdReader

        return await self._gateway("cold-reader", ColdReader, node_id)

    async def _gateway(self, kind: str, actor_class: Any, node_id: str) -> str:
        """The name of ``node_id``'s gateway of ``kind``, an ``actor_class`` started on that
        node if there is none yet or if the one there died. It is the controller's child: a
        controller restart takes it down, and the next task that asks starts it again.

        A replacement gets a new name: Ray may answer a lookup of a dead actor's name with
        the dead actor for a while (its handle cache, ray-project/ray#44083), so a task
        asking again right after the gateway died would be given it again."""
        if not isinstance(node_id, str) or not node_id:
            raise InvalidArgumentError(f"node_id must be a Ray node id, got {node_id!r}")
        async with self._gateways_lock:
            if (kind, node_id) in self._gateways:
                name, gateway = self._gateways[kind, node_id]
                if await _answers(gateway):
                    return name
                name = f"{kind}:{node_id}:{uuid.uuid4().hex[:8]}"
            else:
                name = f"{kind}:{node_id}"
            # Keep the handle that created it: a handle from get_if_exists or get_actor is
            # weak, and the actor would be destroyed, mid-call, once the first one went.
            self._gateways[kind, node_id] = name, actor_class.options(  # lives as this does
                name=name, namespace=NAMESPACE, get_if_exists=True,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=True)).remote()
        return name
