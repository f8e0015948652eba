"""The chaos run's consumer group: members in Ray actors that write what they own and what
they process to files.

Each member actor (restarted by Ray when killed, as a new group member) runs a consumer in a
thread that polls, processes (writes down) what it got and commits it, and appends a JSON
line to its file for every poll, commit and rebalance-listener call, stamped with
``time.monotonic()``: every process of the run is on one machine, where that clock is one
clock. The lines are flushed as they are written, so a killed member leaves everything it
did up to its death; its last line is when it was last seen alive.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raylog import Consumer, TopicPartition
from raylog.errors import RaylogError
from tests import history


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)
class ChaosMember:
    """One group member (a new one each time Ray starts the actor), polling until stopped."""

    def __init__(self, group_id: str, topic: str, log_path: str) -> None:
        import raylog

        self._log = open(log_path, "a", buffering=1)  # noqa: SIM115 (open for the life)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._last_delivery = time.monotonic()  # when the last poll returned
        self._member = "?"
        self._cluster = raylog.init(start_local=False, create=False)
        self._thread = threading.Thread(target=self._run, args=(group_id, topic), daemon=True)
        self._thread.start()

    def _write(self, line: dict[str, Any], at: float | None = None) -> None:
        with self._lock:
            self._log.write(json.dumps({"t": time.monotonic() if at is None else at,
                                        "m": self._member, **line}) + "\n")

    # The rebalance listener: called by the consumer inside poll (and close).
    def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None:
        self._write({"assigned": [tp.partition for tp in partitions]})

    def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None:
        self._write({"revoked": [tp.partition for tp in partitions]})

    def on_partitions_lost(self, partitions: list[TopicPartition]) -> None:
        # Heard inside a poll, after the consumer dropped them: it last delivered records
        # (of any partition) when the poll before returned, and none of these since.
        self._write({"lost": [tp.partition for tp in partitions],
                     "since": self._last_delivery})

    def _run(self, group_id: str, topic: str) -> None:
        try:
            consumer = Consumer(cluster=self._cluster, group_id=group_id,
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                heartbeat_interval_ms=100, fetch_max_wait_ms=200)
            consumer.subscribe([topic], listener=self)
            self._member = consumer._membership.member_id
            self._write({"joined": True})
            with consumer:
                while not self._stop.is_set():
                    try:
                        records = consumer.poll(timeout_ms=200)
                    except RaylogError as e:  # it delivered nothing
                        self._write({"poll_error": repr(e)})
                        continue
                    # One time for both: a lost partition's ownership ends at its last
                    # delivery, which the records delivered must not come after.
                    self._last_delivery = now = time.monotonic()
                    self._write({"read": [[r.partition, r.offset, r.value.decode()]
                                          for r in records]}, at=now)
                    if records:
                        try:
                            consumer.commit()
                            self._write({"committed": True})
                        except RaylogError as e:  # fenced: the next owner reads them again
                            self._write({"commit_error": repr(e)})
        except Exception as e:  # reported in the member's file
            self._write({"failed": repr(e)})

    def stop(self) -> None:
        """Leave the group (the listener hears ``revoked``) and stop."""
        self._stop.set()
        self._thread.join(timeout=60)
        self._write({"stopped": True})


class Group:
    """The members of the chaos group (each ``members[i]`` an actor, replaced when a fault
    killed one for good) and the history they wrote."""

    def __init__(self, root: Path, group_id: str, topic: str, size: int, node_id: str) -> None:
        self.root = root
        self.group_id = group_id
        self.topic = topic
        self._node_id = node_id
        self._spawned = 0
        self.members = [self.spawn() for _ in range(size)]

    def spawn(self) -> ray.actor.ActorHandle:
        """A new member actor on the head node (removed nodes take brokers only), with a
        file of its own."""
        path = self.root / f"member-{self._spawned}.jsonl"
        self._spawned += 1
        return ChaosMember.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            self._node_id, soft=False)).remote(self.group_id, self.topic, str(path))

    def replace(self, index: int) -> None:
        self.members[index] = self.spawn()

    def stop(self) -> None:
        for member in self.members:
            with contextlib.suppress(Exception):  # a member killed at the very end
                ray.get(member.stop.remote(), timeout=90)
        for member in self.members:
            ray.kill(member, no_restart=True)

    def history(self) -> tuple[list[history.Owned], list[history.Processed],
                               dict[str, float], list[str]]:
        """What the members' files say: listener events, processed records, when each
        member was last seen alive, and the failures they wrote down."""
        events, processed, last_seen, failures = [], [], {}, []
        for path in sorted(self.root.glob("member-*.jsonl")):
            for text in path.read_text().splitlines():
                try:
                    line = json.loads(text)
                except json.JSONDecodeError:  # the last line of a member killed mid-write
                    continue
                member, at = line["m"], line["t"]
                last_seen[member] = max(at, last_seen.get(member, at))
                for kind in ("assigned", "revoked", "lost"):
                    events += [history.Owned(member, p, kind, at, line.get("since"))
                               for p in line.get(kind, ())]
                processed += [history.Processed(member, p, o, v.encode(), at)
                              for p, o, v in line.get("read", ())]
                if "failed" in line:
                    failures.append(f"{path.name} ({member}): {line['failed']}")
        return events, processed, last_seen, failures
