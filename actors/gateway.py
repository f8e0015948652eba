"""The Kafka listener actor: one per broker node, serving Kafka's protocol there.

A detached async actor named ``listener_actor_name(node id)`` (raylog/kafka/gateway/
cluster.py) in namespace ``raylog``, pinned to its node, restarted by Ray after a crash.
It is a thin shell around :class:`~raylog.kafka.gateway.listener.KafkaListener`: it
connects to the cluster as a client does, listens on every interface at its port (0: a
free one) on its first ``address()`` call (so a restart listens again as soon as anyone
asks), and answers with the node's address, which Metadata advertises as the Kafka broker
with the id of the raylog broker this node serves (``NodeListeners``). Requests for a
partition thus come to the node of its leader. Started by ``actors/launch.py``
(``raylog start --kafka-port``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import ray

logger = logging.getLogger(__name__)


@ray.remote(num_cpus=0)
class KafkaListenerActor:
    def __init__(self, port: int, settings: dict[str, Any],
                 security: dict[str, Any] | None = None) -> None:
        self.port = port
        self.settings = settings
        self.security = security or {}
        self.listener: Any = None
        self.users: Any = None  # the credential Follower of a SASL listener
        self.acls: Any = None  # the ACL Follower of a listener with an authorizer
        self._starting: asyncio.Task | None = None

    async def address(self) -> tuple[str, int]:
        """(host, port) Kafka clients reach this node's listener at; starts it if needed."""
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start())
        return await asyncio.shield(self._starting)

    async def _start(self) -> tuple[str, int]:
        from raylog.client.connection import connect
        from raylog.kafka.gateway.cluster import ClusterBackend, NodeListeners
        from raylog.kafka.gateway.listener import KafkaListener
        from raylog.kafka.gateway.quotas import ListenerQuotas
        from raylog.kafka.gateway.security import ListenerSecurity
        from raylog.kafka.gateway.settings import GatewaySettings
        from raylog.kafka.gateway.users import credential_follower, start_access

        # checked on this node: the files are this node's
        security = ListenerSecurity(**self.security)
        settings = GatewaySettings(**self.settings)
        cluster = await asyncio.to_thread(connect)
        backend = await asyncio.to_thread(ClusterBackend.connect, cluster,
                                          NodeListeners(cluster.controller))
        credentials = write_users = None
        if security.uses_sasl:
            self.users = credential_follower(cluster)
            credentials = await asyncio.to_thread(self.users.start)
            write_users = self.users.topic.write
        self.acls, access = await asyncio.to_thread(start_access, cluster, security)
        self.listener = KafkaListener(backend, settings, host="0.0.0.0", port=self.port,
                                      security=security, credentials=credentials,
                                      write_users=write_users, access=access,
                                      quotas=ListenerQuotas())
        _, port = await self.listener.start()
        host = ray.util.get_node_ip_address()
        logger.info("Kafka listener of node %s on %s:%d", ray.get_runtime_context().get_node_id(),
                    host, port)
        return host, port

    async def stats(self) -> dict[str, int]:
        listener = self.listener
        if listener is None:
            return {}
        return {"connections": listener.connections, "accepted": listener.accepted,
                "answered": listener.answered, "refused": listener.refused,
                "authentication_failures": listener.authentication_failures,
                "throttled": listener.throttled}
