"""One chaos run: a seeded schedule of faults (schedule.py) on a cluster of its own
(cluster.py) while acks=all idempotent producers, a consumer and a consumer group work, then
the history check (tests/history.py). Run it as ``python -m tests.chaos`` (__main__.py).

1. Start the cluster: a head and three broker nodes; a topic of PARTITIONS partitions,
   replication factor 3, min.insync.replicas 2, every replica in sync.
2. Start the load: producers (tests/integration/workload.py: acks=all, idempotent, unique
   values, every future and when it resolved), a consumer reading every partition, and a
   group of MEMBERS members in Ray actors (group.py), whose committed offsets are watched.
3. Apply the schedule's faults, one after another, each healed before the next.
4. Heal everything; wait until every broker is back and every replica in sync (the cluster
   must recover: a wait that runs out is the anomaly ``stuck``); sends made from then on
   must succeed.
5. Stop the producers, read every partition whole, let the group catch up with the log
   (``stuck`` if it does not), stop the group, and check the history.

The report (a dict, written as report.json) has the seed, the schedule as it was applied
(each step's target, process, and what happened), counts, and the anomalies.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray

from raylog.groups.coordinator import GroupCoordinator
from raylog.metadata.topics import CONSUMER_OFFSETS_TOPIC
from tests import history
from tests.chaos.cluster import ChaosCluster, pid_of
from tests.chaos.group import Group
from tests.chaos.sampling import (
    Sampler,
    committed_offsets,
    end_offsets,
    in_sync_replicas,
    spans_below,
)
from tests.chaos.schedule import CONTROLLER_FAULTS, MEMBER_FAULTS, Step, schedule
from tests.chaos.watchdog import OverdueWatch
from tests.integration.conftest import wait_for
from tests.integration.workload import Workload

logger = logging.getLogger(__name__)

TOPIC = "chaos"
GROUP = "chaos-group"
PARTITIONS = 3
MIN_INSYNC = 2  # of 3 replicas
MEMBERS = 3
PRODUCERS = 2
SENDS_PER_SECOND = 150  # per producer: load enough to see, little enough for 2 shared cores
ISR_POINT = "controller.isr_committed"
RECOVERY_S = 240  # how long the cluster may take to be whole again after the last fault
# A partition may go this long without an acknowledgement: a broker session (Kafka's
# broker.session.timeout.ms, 9 s: a hung broker is fenced after it) plus a failover.
BROKER_SESSION_S = 9.0
FAILOVER_S = 6.0
STALL_LIMIT_S = BROKER_SESSION_S + FAILOVER_S


def replay_command(seed: int, minutes: float, kinds: list[str] | None = None) -> str:
    kinds_arg = f" --faults {','.join(kinds)}" if kinds else ""
    return f"PYTHONPATH=$PWD python -m tests.chaos --seed {seed} --minutes {minutes}{kinds_arg}"


@dataclasses.dataclass
class Outcome:
    """What one step did: when it began (s after the faults began), its target, and notes."""

    step: str
    began: float
    partitions: str = ""  # leader and ISR of each partition as it began
    target: str = ""
    note: str = ""
    error: str = ""


class Nemesis:
    """Applies steps to the cluster and the group; one thread (the run's)."""

    def __init__(self, cluster: ChaosCluster, group: Group, root: Path) -> None:
        self.cluster = cluster
        self.group = group
        self.root = root
        self._fired = 0
        # (partition, from, to): a partition with a broker in its ISR that died while the
        # controller hung cannot be served until the controller is back (the stall check
        # excuses it).
        self.excused: list[tuple[int, float, float]] = []

    def apply(self, step: Step, began: float) -> Outcome:
        out = Outcome(step.describe(), round(began, 1))
        try:
            out.partitions = "; ".join(
                f"p{i} leader {p['leader']} isr {p['isr']}"
                for i, p in enumerate(self.cluster.admin.describe_topic(TOPIC)["partitions"]))
            if step.kind in MEMBER_FAULTS:
                self._member(step, out)
            elif step.kind in CONTROLLER_FAULTS:
                self._controller(step, out)
            else:
                self._broker(step, out)
        except Exception as e:  # the fault could not be applied: say so, go on
            out.error = f"{type(e).__name__}: {e}"[:500]
            logger.warning("step %s failed: %s", step.describe(), traceback.format_exc())
        return out

    def _broker(self, step: Step, out: Outcome) -> None:
        cluster = self.cluster
        broker = cluster.broker_in_role(TOPIC, step.partition, step.role)
        if broker is None:
            out.note = f"no {step.role} of partition {step.partition} now: skipped"
            return
        out.target = f"broker {broker}"
        if step.kind == "node_remove":
            name = cluster.remove_broker_node(broker)
            time.sleep(step.hold)  # how long the machine stays away: the fault itself
            cluster.add_back(name)
            out.note = f"node of {name} removed, added back"
            return
        handle = cluster.broker_handle(broker)
        if step.kind == "broker_kill":
            ray.kill(handle, no_restart=False)
        elif step.kind == "broker_kill_final":
            ray.kill(handle, no_restart=True)
        elif step.kind == "broker_sigkill":
            pid = pid_of(handle)
            os.kill(pid, signal.SIGKILL)
            out.target += f" (pid {pid})"
        elif step.kind == "broker_pause":
            pid = pid_of(handle)
            out.target += f" (pid {pid})"
            cluster.pauses.pause(pid, step.hold)
        elif step.kind == "controller_pause_leader_kill":
            # Every partition whose ISR holds it waits: the controller, which takes a dead
            # broker out of ISRs and elects leaders, hangs.
            held = [i for i, p in enumerate(cluster.admin.describe_topic(TOPIC)["partitions"])
                    if broker in p["isr"]]
            pid = cluster.controller_pid()
            killed: list[float] = []

            def kill() -> None:
                killed.append(time.monotonic())
                ray.kill(handle, no_restart=False)

            timer = threading.Timer(1.0, kill)
            timer.start()
            try:
                cluster.pauses.pause(pid, step.hold)
            finally:
                timer.join()
            resumed = time.monotonic()
            self.excused += [(p, killed[0], resumed) for p in held]
            out.target += f", controller pid {pid}"
            out.note = f"partitions {held} wait for the controller (the killed broker is in " \
                       f"their ISR)"
        elif step.kind == "controller_isr_kill":
            self._fired += 1
            marker = self.root / f"isr-fired-{self._fired}"
            cluster.arm(ISR_POINT, f"exit-once:{marker}")
            try:
                ray.kill(handle, no_restart=False)  # it leaves the ISR, then rejoins
                # The point stays armed this long, or until it fired: exit-once acts once.
                until = time.monotonic() + step.hold
                while not marker.exists() and time.monotonic() < until:
                    time.sleep(0.1)
            finally:
                cluster.disarm()
            out.note = "the controller exited at the fail point" if marker.exists() else \
                "the fail point was not hit (no ISR change reached it)"
        else:
            raise ValueError(f"unknown broker fault {step.kind}")

    def _controller(self, step: Step, out: Outcome) -> None:
        cluster = self.cluster
        if step.kind == "controller_kill":
            ray.kill(cluster.controller_handle(), no_restart=False)
        elif step.kind == "controller_sigkill":
            pid = cluster.controller_pid()
            os.kill(pid, signal.SIGKILL)
            out.target = f"pid {pid}"
        elif step.kind == "controller_pause":
            pid = cluster.controller_pid()
            out.target = f"pid {pid}"
            cluster.pauses.pause(pid, step.hold)
        else:
            raise ValueError(f"unknown controller fault {step.kind}")

    def _member(self, step: Step, out: Outcome) -> None:
        member = self.group.members[step.member]
        if step.kind == "member_kill":
            ray.kill(member, no_restart=False)
        elif step.kind == "member_kill_final":
            ray.kill(member, no_restart=True)
            self.group.replace(step.member)
            out.note = "a new member actor took its place"
        elif step.kind == "member_sigkill":
            pid = pid_of(member)
            os.kill(pid, signal.SIGKILL)
            out.target = f"pid {pid}"
        elif step.kind == "offsets_leader_member_kill":
            partition = GroupCoordinator.partition_for(GROUP)
            broker = self.cluster.broker_in_role(CONSUMER_OFFSETS_TOPIC, partition, "leader")
            if broker is None:
                out.note = f"no leader of {CONSUMER_OFFSETS_TOPIC}-{partition} now: skipped"
                return
            ray.kill(self.cluster.broker_handle(broker), no_restart=False)
            ray.kill(member, no_restart=False)
            out.target = f"broker {broker} (leads {CONSUMER_OFFSETS_TOPIC}-{partition})"
        else:
            raise ValueError(f"unknown member fault {step.kind}")


def in_sync(cluster: ChaosCluster) -> bool:
    status = cluster.admin.cluster_status()
    if not all(b["alive"] for b in status["brokers"]):
        return False
    return all(p["leader"] is not None and sorted(p["isr"]) == sorted(p["replicas"])
               for t in cluster.admin.describe_topics() for p in t["partitions"])


def run(seed: int, minutes: float, root: Path, kinds: list[str] | None = None,
        say: Callable[[str], None] = print) -> dict[str, Any]:
    """One run; its report. Anomalies are in the report, not raised."""
    steps = schedule(seed, minutes * 60, PARTITIONS, MEMBERS, kinds)
    say(f"chaos seed {seed}: {len(steps)} steps")
    for step in steps:
        say(f"  {step.describe()}")
    report: dict[str, Any] = {"seed": seed, "minutes": minutes, "kinds": kinds,
                              "replay": replay_command(seed, minutes, kinds),
                              "planned": [s.describe() for s in steps], "applied": [],
                              "anomalies": [], "counts": {}}
    stuck: list[history.Anomaly] = []
    started = time.monotonic()
    cluster = ChaosCluster(root)
    report["ray_logs"] = cluster.nodes.cluster.head_node.get_logs_dir_path()
    try:
        admin = cluster.admin
        admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3,
                           configs={"min.insync.replicas": MIN_INSYNC})
        wait_for(lambda: in_sync(cluster), timeout=120, what="the topic in sync")
        cluster.check_failpoints_reach_every_process()
        group = Group(root, GROUP, TOPIC, MEMBERS, cluster.head_node_id)
        watch = committed_offsets(cluster.nodes.raylog.controller, GROUP, TOPIC, PARTITIONS)
        ends_seen, asking = end_offsets(TOPIC, PARTITIONS)
        isr_seen = in_sync_replicas(admin, TOPIC)
        nemesis = Nemesis(cluster, group, root)
        with Workload(TOPIC, PARTITIONS, producers=PRODUCERS,
                      sends_per_second=SENDS_PER_SECOND) as load:
            load.wait_acknowledged(300, timeout=120)
            wait_for(lambda: len({e.partition for e in group.history()[0]}) == PARTITIONS,
                     timeout=120, what="the group to own every partition")
            t0 = time.monotonic()
            report["setup_s"] = round(t0 - started, 1)
            overdue = OverdueWatch(load.sent, root, t0)
            for step in steps:
                delay = t0 + step.at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)  # the schedule's gap between faults
                load.check_threads()
                outcome = nemesis.apply(step, time.monotonic() - t0)
                say(f"  applied {outcome}")
                report["applied"].append(dataclasses.asdict(outcome))
            cluster.heal()
            report["faults_s"] = round(time.monotonic() - t0, 1)
            try:
                wait_for(lambda: in_sync(cluster), timeout=RECOVERY_S, interval=1,
                         what="every broker alive and every replica in sync")
                load.healthy(sends_after=200, timeout=RECOVERY_S)
            except AssertionError as e:
                stuck.append(history.Anomaly("stuck", f"after the faults: {e}"))
        ends_seen.stop()
        asking.close()
        isr_seen.stop()
        overdue.stop()
        report["overdue_stacks"] = overdue.dumps
        anomalies = load.finish(timeout=RECOVERY_S, origin=t0)
        anomalies += history.regressions("end_offset_regressed", "end offset",
                                         [(at - t0, p, o) for at, p, o in ends_seen.seen])
        # Fewer in-sync replicas than min.insync.replicas (say, a node back and catching up
        # when another broker was killed) refuse acks=all writes by design.
        below = spans_below(isr_seen.seen, MIN_INSYNC, time.monotonic())
        anomalies += history.stalls([s.record() for mine in load.sent for s in mine],
                                    STALL_LIMIT_S, origin=t0,
                                    excused=[*nemesis.excused, *below])
        report["counts"] = {**load.summary, "end_offset_samples": len(ends_seen.seen),
                            "end_offset_sample_errors": ends_seen.errors}
        report["below_min_insync"] = [f"partition {p}: t+{a - t0:.1f} to t+{b - t0:.1f} s"
                                      for p, a, b in below]
        ends = {p: 0 for p in range(PARTITIONS)}
        for r in load.final:
            ends[r.partition] = max(ends[r.partition], r.offset + 1)
        try:
            wait_for(lambda: all(watch.latest().get(p, 0) >= end for p, end in ends.items()),
                     timeout=RECOVERY_S, interval=1, what=f"the group to commit {ends}")
        except AssertionError as e:
            stuck.append(history.Anomaly("stuck", f"the group: {e}; committed "
                                                  f"{watch.latest()}"))
        group.stop()
        watch.stop()
        report["verify_s"] = round(time.monotonic() - t0 - report["faults_s"], 1)
        anomalies += stuck + group_anomalies(group, watch, load.final, t0, report)
    finally:
        cluster.stop()
    report["total_s"] = round(time.monotonic() - started, 1)
    report["anomalies"] = [dataclasses.asdict(a) for a in _unique(anomalies)]
    return report


def group_anomalies(group: Group, watch: Sampler, log: list[history.Read], t0: float,
                    report: dict[str, Any]) -> list[history.Anomaly]:
    """The group's anomalies, with times in seconds after the faults began (as the
    schedule's)."""
    events, processed, last_seen, failures = group.history()
    events = [dataclasses.replace(e, at=e.at - t0,
                                  since=None if e.since is None else e.since - t0)
              for e in events]
    processed = [dataclasses.replace(r, at=r.at - t0) for r in processed]
    last_seen = {m: at - t0 for m, at in last_seen.items()}
    committed = [(at - t0, p, o) for at, p, o in watch.seen]
    report["counts"].update({"group_members": len(last_seen), "group_processed": len(processed),
                             "group_rebalance_events": len(events),
                             "commit_samples": len(watch.seen),
                             "commit_sample_errors": watch.errors})
    found = [history.Anomaly("member_failed", f) for f in failures]
    found += history.check_group(events, processed, last_seen, committed=committed, log=log,
                                 final_committed=watch.latest())
    intervals, _ = history.ownership(events, last_seen)
    found += history.check([], [*history.interval_reads(processed, intervals), *log])
    return found


def _unique(anomalies: list[history.Anomaly]) -> list[history.Anomaly]:
    seen: set[history.Anomaly] = set()
    out = []
    for a in anomalies:
        if a not in seen:
            seen.add(a)
            out.append(a)
    return out
