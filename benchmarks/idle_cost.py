"""What idle clients cost: CPU seconds per minute of an idle producer, of idle consumers
polling in a loop, and of a group of three idle members (issue 23, item 3: waits that wake
on events instead of timers).

Run from the repository root (``PYTHONPATH`` picks the code measured, also in the actors)::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/idle_cost.py [--seconds 30] [--json PATH]

Setup: ``raylog.init(address="local", data_dir=<temporary directory>)``, an embedded
one-node cluster. Every client lives in a Ray actor of its own (a worker process,
``num_cpus=0``), so that its process's CPU time (the sum over its threads of
``/proc/<pid>/task/<tid>/schedstat``, in nanoseconds) is its own and Ray's worker threads';
an actor holding no client (``baseline``) gives what a Ray worker process costs by itself.
Nothing is produced during the windows.

Window 1 (``--seconds``): ``producer`` sent one record, flushed, and stays open;
``consumer`` has the 3 partitions of an empty topic assigned and polls in a loop
(``poll(timeout_ms=1000)``, default ``fetch_max_wait_ms=500``: each partition keeps a long
poll at its leader); ``unassigned`` is a group member polling in a loop that owns nothing
(the group's one partition is another member's, ``owner``). Window 2 (as long): three
members of one group over a 3-partition topic, each polling in a loop in its actor, while the
window 1 actors are gone. The controller's process is measured in both windows and in a
window with no client at all (``controller_alone``): its share of the group is window 2 minus
that. Figures are CPU seconds per minute of each process, as measured (the baseline is
reported, not subtracted).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import ray

import raylog
from raylog.client import Admin, Consumer, Producer
from raylog.types import TopicPartition


def cpu_s(pid: int) -> float:
    """CPU seconds the process's threads ran so far (the kernel's schedstat: nanoseconds,
    where ``/proc/<pid>/stat`` counts 10 ms ticks)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
    return total / 1e9


@ray.remote(num_cpus=0, max_restarts=0)
class Client:
    """One client in a worker process of its own: ``kind`` says which."""

    def __init__(self, kind: str, topic: str | None = None, group: str | None = None) -> None:
        raylog.init()
        self.kind = kind
        self.client: Any = None
        self.polls = 0
        self._stop = threading.Event()
        if kind == "producer":
            self.client = Producer()
            self.client.send(topic, b"x").result(timeout=60)
            self.client.flush()
        elif kind == "consumer":
            self.client = Consumer()
            self.client.assign([TopicPartition(topic, p) for p in range(3)])
        elif kind == "member":
            self.client = Consumer(group_id=group, auto_offset_reset="latest")
            self.client.subscribe([topic])
        if kind in ("consumer", "member"):
            threading.Thread(target=self._poll_forever, daemon=True, name="raylog-poll-loop"
                             ).start()

    def _poll_forever(self) -> None:
        while not self._stop.is_set():
            self.client.poll(timeout_ms=1000)
            self.polls += 1

    def pid(self) -> int:
        return os.getpid()

    def threads(self) -> dict[str, float]:
        """CPU seconds so far of the client's own threads (raylog's, and the poll loop)."""
        out: dict[str, float] = {}
        for thread in threading.enumerate():
            if not thread.name.startswith("raylog") or thread.native_id is None:
                continue
            try:
                with open(f"/proc/self/task/{thread.native_id}/schedstat") as f:
                    seconds = int(f.read().split()[0]) / 1e9
            except FileNotFoundError:  # ended meanwhile
                continue
            name = thread.name.split("-group")[0].rstrip("-")
            out[name] = out.get(name, 0.0) + seconds
        return out

    def owned(self) -> int:
        return len(self.client.assignment())

    def close(self) -> int:
        self._stop.set()
        time.sleep(1.1)  # the poll under way ends (its timeout): nothing polls while closing
        if self.client is not None:
            self.client.close()
        return self.polls


def measure(pids: dict[str, int], seconds: float, actors: dict[str, Any] | None = None
            ) -> dict[str, Any]:
    """CPU seconds per minute of each process over ``seconds``; with ``actors``, also of
    each one's client threads (``threads``)."""
    actors = actors or {}
    before = {name: cpu_s(pid) for name, pid in pids.items()}
    threads_before = {name: ray.get(a.threads.remote()) for name, a in actors.items()}
    started = time.monotonic()
    time.sleep(seconds)
    threads_after = {name: ray.get(a.threads.remote()) for name, a in actors.items()}
    elapsed = time.monotonic() - started
    out: dict[str, Any] = {name: round((cpu_s(pid) - before[name]) * 60 / seconds, 4)
                           for name, pid in pids.items()}
    for name in actors:
        out[f"{name}_threads"] = {
            thread: round((cpu - threads_before[name].get(thread, 0.0)) * 60 / elapsed, 4)
            for thread, cpu in threads_after[name].items()}
    return out


def wait_until(condition: Any, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.2)


def run(seconds: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as root:
        raylog.init(address="local", data_dir=str(Path(root) / "data"))
        try:
            admin = Admin()
            for name, partitions in (("produced", 1), ("idle", 3), ("single", 1),
                                     ("grouped", 3)):
                admin.create_topic(name, partitions=partitions)
            controller = ray.get_actor("raylog-controller", namespace="raylog")
            controller_pid = ray.get(controller.__ray_call__.remote(lambda _: os.getpid()))
            time.sleep(3)  # the cluster settles after creating topics
            out: dict[str, Any] = {"seconds": seconds}
            out["controller_alone"] = measure({"controller": controller_pid},
                                              seconds)["controller"]

            baseline = Client.remote("baseline")
            producer = Client.remote("producer", "produced")
            consumer = Client.remote("consumer", "idle")
            owner = Client.remote("member", "single", "single-group")
            wait_until(lambda: ray.get(owner.owned.remote()) == 1, "the owner's partition")
            unassigned = Client.remote("member", "single", "single-group")
            actors = {"baseline": baseline, "producer": producer, "consumer": consumer,
                      "owner": owner, "unassigned": unassigned}
            pids = {name: ray.get(a.pid.remote()) for name, a in actors.items()}
            wait_until(lambda: ray.get(unassigned.owned.remote()) == 0 and
                       ray.get(owner.owned.remote()) == 1, "a stable single-group")
            time.sleep(2)
            out["window_1"] = measure({**pids, "controller": controller_pid}, seconds,
                                      {n: a for n, a in actors.items() if n != "baseline"})
            for actor in actors.values():
                ray.get(actor.close.remote())
                ray.kill(actor)

            members = [Client.remote("member", "grouped", "group-of-3") for _ in range(3)]
            wait_until(lambda: sorted(ray.get([m.owned.remote() for m in members])) ==
                       [1, 1, 1], "one partition per member")
            time.sleep(2)
            pids = {f"member_{i}": ray.get(m.pid.remote()) for i, m in enumerate(members)}
            window = measure({**pids, "controller": controller_pid}, seconds,
                             {f"member_{i}": m for i, m in enumerate(members)})
            window["members_total"] = round(sum(window[name] for name in pids), 3)
            window["controller_share"] = round(window["controller"] -
                                               out["controller_alone"], 3)
            out["window_2"] = window
            for member in members:
                ray.get(member.close.remote())
            return out
        finally:
            ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    result = run(args.seconds)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
