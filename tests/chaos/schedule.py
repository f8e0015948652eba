"""The seeded schedule of faults of a chaos run. Plain Python: the same seed and length give
the same schedule, step for step, so a failing run can be replayed.

A schedule is one round of every kind of fault, in an order and with targets, holds and gaps
the seed draws, then more faults drawn by weight until the run's length is used up. Steps
come one after another, each healed before the next starts (a paused process resumed, a
removed node back); the cluster may still be recovering from one when the next begins.

A broker fault names its target by role, ``leader`` or ``follower`` of a partition of the
chaos topic, found when the step runs: a broker id would name a follower as often as a
leader, and leaders are where failover happens. A member fault names a member by index.
"""

from __future__ import annotations

import dataclasses
import random

# kind -> (what it does, weight once every kind had its turn)
FAULTS: dict[str, tuple[str, int]] = {
    "broker_kill": ("ray.kill a broker actor; Ray restarts it", 3),
    "broker_kill_final": ("ray.kill a broker actor without restart; the controller starts a "
                          "new one on its node", 2),
    "broker_sigkill": ("SIGKILL a broker's process; Ray restarts it", 3),
    "broker_pause": ("SIGSTOP a broker's process for the hold, then SIGCONT", 3),
    "controller_kill": ("ray.kill the controller; Ray restarts it", 2),
    "controller_sigkill": ("SIGKILL the controller's process; Ray restarts it", 2),
    "controller_pause": ("SIGSTOP the controller's process for the hold, then SIGCONT", 2),
    "controller_isr_kill": ("arm controller.isr_committed (exit-once) for the hold, or until "
                            "it fired, and make an ISR change (ray.kill a follower broker)", 2),
    "controller_pause_leader_kill": ("SIGSTOP the controller for the hold and, 1 s into it, "
                                     "ray.kill a leader's broker: the futures of every send "
                                     "must still resolve by their deadline", 2),
    "member_kill": ("ray.kill a group member's actor; Ray restarts it (a new member)", 2),
    "member_kill_final": ("ray.kill a group member's actor without restart; a new actor "
                          "takes its place", 1),
    "member_sigkill": ("SIGKILL a group member's process; Ray restarts it", 1),
    "node_remove": ("remove a broker's node (its raylet and processes) for the hold, then "
                    "add a node with its data directory back", 2),
    "offsets_leader_member_kill": ("ray.kill the leader of the group's __consumer_offsets "
                                   "partition and at once a member: commits in flight while "
                                   "their member is fenced", 2),
}

CONTROLLER_FAULTS = {"controller_kill", "controller_sigkill", "controller_pause"}
MEMBER_FAULTS = {k for k in FAULTS if k.startswith("member_")} | {"offsets_leader_member_kill"}
BROKER_FAULTS = set(FAULTS) - CONTROLLER_FAULTS - MEMBER_FAULTS  # each targets a broker
HOLDS_S = {  # (shortest, longest) hold of the faults that last
    # Longer than a broker session (9 s) plus a failover: a hung broker must be fenced and
    # its partitions failed over before it resumes (issue 22, item 7).
    "broker_pause": (16.0, 20.0),
    # Past the groups' 10 s session timeout at times (half of the holds); produce goes on
    # meanwhile (item 8).
    "controller_pause": (5.0, 15.0),
    "controller_isr_kill": (8.0, 15.0),  # long enough for the follower to rejoin the ISR
    # Longer than the producers' delivery timeout (20 s) plus the slack: a producer that
    # waits on the hung controller (say, for metadata) resolves its futures late.
    "controller_pause_leader_kill": (28.0, 32.0),
    "node_remove": (4.0, 15.0),
}
# Between two steps. Not shorter: the controller needs a moment to act on a broker's death
# before the next step may stop it. With 1-3 s seed 10 killed a follower 1.1 s before a
# 13.6 s controller pause, and partition 0 got no acknowledgement for 15.1 s (its ISR still
# held the dead follower): a stall the faults made, not the cluster (docs/chaos.md).
GAP_S = (2.0, 6.0)


@dataclasses.dataclass(frozen=True)
class Step:
    """One fault: ``at`` seconds after the faults began (at the earliest: a step starts
    once the one before it ended), ``kind`` (a key of FAULTS), its target, and how long it
    holds (pauses, removed nodes, armed fail points; 0 for kills)."""

    at: float
    kind: str
    role: str | None = None       # broker faults: "leader" or "follower" ...
    partition: int | None = None  # ... of this partition of the chaos topic
    member: int | None = None     # member faults: which member
    hold: float = 0.0

    def describe(self) -> str:
        if self.kind in MEMBER_FAULTS:
            target = f" member {self.member}"
        elif self.role is not None:
            target = f" the {self.role} of partition {self.partition}"
        else:
            target = ""
        hold = f" for {self.hold:.1f} s" if self.hold else ""
        return f"t+{self.at:.1f} s {self.kind}{target}{hold}"


def schedule(seed: int, seconds: float, partitions: int, members: int,
             kinds: list[str] | None = None) -> list[Step]:
    """The steps of a run with ``seed`` whose faults last ``seconds`` (at least one round
    of every kind in ``kinds``, default all), on a topic of ``partitions`` partitions read
    by a group of ``members`` members."""
    rng = random.Random(seed)
    chosen = sorted(FAULTS) if kinds is None else list(kinds)
    unknown = sorted(set(chosen) - set(FAULTS))
    if unknown:
        raise ValueError(f"unknown fault kinds {unknown}; known: {sorted(FAULTS)}")
    first_round = rng.sample(chosen, len(chosen))
    weights = [FAULTS[k][1] for k in chosen]
    steps: list[Step] = []
    t = 0.0
    while first_round or t < seconds:
        kind = first_round.pop(0) if first_round else rng.choices(chosen, weights)[0]
        step = _step(rng, kind, t, partitions, members)
        steps.append(step)
        t += step.hold + rng.uniform(*GAP_S)
    return steps


def _step(rng: random.Random, kind: str, at: float, partitions: int, members: int) -> Step:
    hold = round(rng.uniform(*HOLDS_S[kind]), 1) if kind in HOLDS_S else 0.0
    at = round(at, 1)
    if kind in MEMBER_FAULTS:
        return Step(at, kind, member=rng.randrange(members), hold=hold)
    if kind in BROKER_FAULTS:
        # A fail point in an ISR change wants a follower to leave and rejoin the ISR.
        role = {"controller_isr_kill": "follower", "controller_pause_leader_kill": "leader"
                }.get(kind) or rng.choice(["leader", "leader", "follower"])
        return Step(at, kind, role=role, partition=rng.randrange(partitions), hold=hold)
    return Step(at, kind, hold=hold)
