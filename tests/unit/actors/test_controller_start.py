"""A restarted controller serves soon: it imports only what the controller runs, finds its
brokers' actors by name, and starts its first reconcile round at once.

Ray restarts the controller into a fresh process that imports actors/controller.py before it
can load its metadata; the broker's modules (replicas, logs, fetcher, tiered storage) and the
whole client are not needed for that, and are imported only where they are used.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from actors import broker_manager
from actors.broker_manager import BrokerManager
from actors.controller import RECONCILE_INTERVAL_S, ControllerActor
from raylog.util.cluster_names import NAMESPACE, broker_actor_name

ROOT = Path(__file__).resolve().parents[3]
NOT_FOR_A_CONTROLLER_START = ["actors.broker", "actors.serving", "actors.fetcher",
                              "actors.tiered", "actors.replica_hosts", "raylog.client"]


def test_importing_the_controller_imports_neither_the_broker_nor_the_client():
    script = ("import json, sys\n"
              "import actors.controller  # noqa: F401\n"
              "print(json.dumps(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    modules = set(json.loads(done.stdout.strip().splitlines()[-1]))
    loaded = [m for m in NOT_FOR_A_CONTROLLER_START
              if m in modules or any(name.startswith(m + ".") for name in modules)]
    assert loaded == [], f"importing the controller imported {loaded}"


def test_a_running_broker_actor_is_found_by_name(monkeypatch):
    running = object()
    asked = []

    def get_actor(name: str, namespace: str) -> object:
        asked.append((name, namespace))
        return running

    monkeypatch.setattr(broker_manager.ray, "get_actor", get_actor)
    manager = BrokerManager.__new__(BrokerManager)  # _actor reads nothing of its state
    assert manager._actor("node-1") is running
    assert asked == [(broker_actor_name("node-1"), NAMESPACE)]


class Stop(Exception):
    pass


class FakeBrokers:
    def start_sessions(self) -> None:
        pass


def test_the_first_reconcile_round_runs_without_waiting_an_interval(monkeypatch):
    happened: list[object] = []

    async def sleep(seconds: float) -> None:
        happened.append(("sleep", seconds))
        raise Stop

    controller = ControllerActor.__ray_actor_class__.__new__(ControllerActor.__ray_actor_class__)
    controller.brokers = FakeBrokers()
    controller._reconcile = lambda: happened.append("round")

    async def run() -> None:
        controller._first_round = asyncio.get_running_loop().create_future()
        controller._first_round.set_result(None)
        monkeypatch.setattr(asyncio, "sleep", sleep)
        await controller._reconcile_forever()

    with pytest.raises(Stop):
        asyncio.run(run())
    assert happened == ["round", ("sleep", RECONCILE_INTERVAL_S)]
