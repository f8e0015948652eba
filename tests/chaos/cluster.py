"""The chaos run's own Ray cluster, and what the faults act on (run.py's Nemesis applies them).

A head node (the controller's and the group members') and three broker nodes, made by
tests/integration/restart_scenario.Nodes with ``$RAYLOG_FAILPOINTS_FILE`` in every node's
environment. The first broker node serves its replicas from two processes (the broker actor
and a replica host, ``RAYLOG_BROKER_PROCESSES=2``), the others from one, so faults reach
both shapes. The run kills, pauses and removes its processes and nodes, so it has a cluster
of its own, in a process of its own (tests/chaos/__main__.py).

Paused processes are written to ``paused.json`` in the run's directory (processes.py):
:meth:`ChaosCluster.stop` resumes whatever is left, and the test that ran the process
resumes the rest if the process itself was killed. Nothing stays stopped.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import ray

from raylog import Admin
from raylog.metadata.hosts import PROCESSES_ENV
from raylog.util import faults
from raylog.util.cluster_names import NAMESPACE, broker_actor_name
from tests.chaos.processes import Pauses
from tests.integration.restart_scenario import Nodes

BROKERS = 3


class ChaosCluster:
    """The nodes, the processes to hurt, and the fail-point file of one run. Used by the
    run's one nemesis thread (and the main thread, which stops it)."""

    def __init__(self, root: Path, brokers: int = BROKERS) -> None:
        self.root = root
        self.failpoints_file = root / "failpoints"
        self.failpoints_file.write_text("")
        self.pauses = Pauses(root / "paused.json")
        self._removed: list[str] = []  # data directories whose node is gone
        self.nodes = Nodes(root, [f"b{i}" for i in range(brokers)],
                           env={faults.FILE_ENV: str(self.failpoints_file)},
                           broker_env={"b0": {PROCESSES_ENV: "2"}})
        self.admin = Admin()

    @property
    def head_node_id(self) -> str:
        return self.nodes.cluster.head_node.node_id

    # -- who is where ----------------------------------------------------------------------

    def partition(self, topic: str, partition: int) -> dict[str, Any]:
        return self.admin.describe_topic(topic)["partitions"][partition]

    def broker_in_role(self, topic: str, partition: int, role: str) -> int | None:
        """The broker leading (``leader``) or following (``follower``, the first in-sync
        one) a partition now; None if there is none."""
        state = self.partition(topic, partition)
        if role == "leader":
            return state["leader"]
        followers = [b for b in state["isr"] if b != state["leader"]] or \
            [b for b in state["replicas"] if b != state["leader"]]
        return followers[0] if followers else None

    def broker_handle(self, broker: int) -> ray.actor.ActorHandle:
        node = {b["broker_id"]: b for b in self.admin.cluster_status()["brokers"]}[broker]
        return ray.get_actor(broker_actor_name(node["node_id"]), namespace=NAMESPACE)

    def broker_pid(self, broker: int) -> int:
        return pid_of(self.broker_handle(broker))

    def controller_pid(self) -> int:
        return self.nodes.raylog.controller.ready()["pid"]

    def controller_handle(self) -> ray.actor.ActorHandle:
        return self.nodes.raylog.controller.handle

    def check_failpoints_reach_every_process(self) -> None:
        """The controller and every broker have this run's fail-point file in their
        environment, where raylog/util/faults.py finds it: an armed point would act there."""
        handles = {"the controller": self.controller_handle(),
                   **{f"broker {b}": self.broker_handle(b)
                      for b in sorted(self.nodes.raylog.controller.ready()["brokers"])}}
        for name, handle in handles.items():
            found = ray.get(handle.__ray_call__.remote(
                lambda _self, name=faults.FILE_ENV: os.environ.get(name)), timeout=60)
            if found != str(self.failpoints_file):
                raise RuntimeError(f"{name} reads fail points from {found!r}, not from "
                                   f"{self.failpoints_file}")

    # -- faults ----------------------------------------------------------------------------

    def remove_broker_node(self, broker: int) -> str:
        """Take away the node serving ``broker`` (a machine that died); its data directory's
        name, to :meth:`add_back` later."""
        name = self.nodes.dir_of(broker)
        self._removed.append(name)
        self.nodes.remove_broker(name)
        return name

    def add_back(self, name: str) -> None:
        """A new node with the data directory of a removed one."""
        self.nodes.add_broker(name)
        self._removed.remove(name)

    def arm(self, point: str, action: str) -> None:
        self.failpoints_file.write_text(f"{point} = {action}\n")

    def disarm(self) -> None:
        self.failpoints_file.write_text("")

    def heal(self) -> None:
        """Every process resumed, every removed node back, every fail point off."""
        self.pauses.resume_all()
        self.disarm()
        for name in list(self._removed):
            self.add_back(name)

    def stop(self) -> None:
        try:
            self.pauses.resume_all()
        finally:
            self.nodes.stop()


def pid_of(actor: ray.actor.ActorHandle, timeout: float = 60) -> int:
    """The process id of a live actor, as the actor says it."""
    return ray.get(actor.__ray_call__.remote(lambda _self: os.getpid()), timeout=timeout)
