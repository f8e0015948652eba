"""A listener's authorizer, as its handlers ask it (``Context.allows``), and the audit of
its denials.

:class:`Access` holds the listener's :class:`~raylog.kafka.auth.acls.Authorizer` (kept up
to date from ``__raylog_acls`` by a follower, raylog/kafka/gateway/users.py) and how to
write that topic (CreateAcls/DeleteAcls, raylog/kafka/gateway/acls.py). A listener without
one (the default) allows everything, as Kafka's brokers without ``authorizer.class.name``.

Every denial is logged on the ``raylog.audit`` logger, at INFO: principal, host, operation
and resource, one line each (Kafka's ``kafka.authorizer.logger``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from raylog.kafka.auth.acls import CLUSTER, Authorizer, Operation, Resource, ResourceType

audit = logging.getLogger("raylog.audit")
Records = list[tuple[bytes, bytes | None]]


def host_of(peer: str) -> str:
    """The address of a connection's ``peer`` (``address:port``)."""
    return peer.rpartition(":")[0] or peer


@dataclasses.dataclass(frozen=True)
class Access:
    authorizer: Authorizer
    write: Callable[[Records], None] | None = None  # to __raylog_acls; None: not here

    def allows(self, connection: Any, operation: Operation, resource_type: ResourceType,
               name: str, log: bool = True) -> bool:
        host = host_of(connection.peer)
        resource = Resource(resource_type, name)
        if self.authorizer.authorize(connection.principal, host, operation, resource):
            return True
        if log:
            audit.info("DENIED principal=%s host=%s operation=%s resource=%s",
                       connection.principal, host, operation.name, resource)
        return False

    def allows_idempotent_write(self, connection: Any) -> bool:
        """InitProducerId without a transactional id: IDEMPOTENT_WRITE on the cluster, or,
        as Kafka 3's brokers accept, WRITE on any topic. A denial is audited."""
        host = host_of(connection.peer)
        if self.authorizer.authorize_any(connection.principal, host, Operation.WRITE,
                                         ResourceType.TOPIC):
            return True
        return self.allows(connection, Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER,
                           CLUSTER.name)
