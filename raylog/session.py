"""``raylog.init``: the library's entry point, a layer above the clients.

It connects this process to a Ray cluster (starting an embedded local one if asked) and to
raylog's controller, starting the controller if the cluster has none (``actors/launch.py``):
the clients never start actors, they find them by name. Importing this module also makes
``raylog.init`` how a client given no cluster connects (``Producer()`` before any
``init``), as the ``raylog`` package does when it hands out its names.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from raylog.client import connection
from raylog.client.connection import RaylogCluster
from raylog.util.arguments import check_bool

if TYPE_CHECKING:
    from raylog.kafka.gateway.security import ListenerSecurity


def init(address: str | None = None, *, start_local: bool = True, create: bool = True,
         data_dir: str | os.PathLike | None = None) -> RaylogCluster:
    """Connect to raylog on a Ray cluster and make it the default for new clients.

    ``address``: a Ray address (default: ``$RAY_ADDRESS``; ``"auto"``: the cluster Ray
    finds on this machine; ``"local"``: always a new one). No other cluster is ever joined.
    With ``start_local`` and no address, starts an embedded single-node cluster whose node
    is a broker; ``data_dir`` then sets where it keeps data. With ``create``, starts the
    controller if the cluster has none. Raises NoClusterError otherwise.

    >>> cluster = raylog.init()
    >>> producer = raylog.Producer(cluster=cluster)
    """
    check_bool("create", create)
    if create:
        from actors.launch import start_controller as controller
    else:
        controller = connection.find_controller
    return connection.connect(address, start_local=start_local, data_dir=data_dir,
                              controller=controller)


connection.connect_default_with(init)


def start_kafka_listeners(port: int, auto_create_topics: bool = False, *,
                          security: ListenerSecurity | None = None,
                          max_connections_per_ip: int | None = None
                          ) -> dict[str, tuple[str, int]]:
    """A Kafka listener on every broker node of the connected cluster (``raylog start
    --kafka-port``), each advertising its node as the Kafka broker with its raylog broker's
    id; node id -> (host, port) of each. ``security`` (a ListenerSecurity, default
    PLAINTEXT; its files must be at the same paths on every broker node) is checked again on
    each node. Call after :func:`init`."""
    from actors.launch import start_kafka_listeners as start

    return start(port, {"auto_create_topics_enable": auto_create_topics,
                        "max_connections_per_ip": max_connections_per_ip},
                 security.to_dict() if security is not None else None)
