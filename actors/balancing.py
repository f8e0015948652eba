"""The controller's partition balancer: plans (raylog/metadata/balance.py) made on the
metadata, the live brokers and the size of every replica; plans carried out as
reassignments (actors/partition_moves.py); preferred leaders elected once a plan's moves
are done; and, with ``RAYLOG_AUTO_BALANCE``, balances it starts itself when a broker joins
or one gone for good has had its replicas replaced (docs/balancing.md).

The replicas a plan adds copy their partition's leader within the throttle
(``replication.throttled.rate``: actors/fetcher.py), so producers go on meanwhile. A plan is
made on a settled cluster: none while partitions are being moved. Executing a plan checks
every move against the metadata first and starts none if one is stale.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from actors.broker_manager import BrokerManager
from actors.partition_moves import PartitionMoves
from raylog.errors import (
    InvalidArgumentError,
    RaylogError,
    ReassignmentInProgressError,
    StaleBalancePlanError,
)
from raylog.metadata import state as events
from raylog.metadata.access import MetadataAccess
from raylog.metadata.balance import check_brokers, plan_balance
from raylog.metadata.balance_settings import BalanceSettings
from raylog.metadata.limits import PartitionLimits
from raylog.metadata.topics import check_min_insync

logger = logging.getLogger(__name__)

SIZES_TIMEOUT_S = 10.0  # a broker's answer with the sizes of its replicas


class PartitionBalancer:
    """Plans and balances over ``access``, moved through ``moves``, told to ``brokers``.
    ``started`` waits for the controller's first round; ``limits`` (None: none) bound the
    replicas per broker. It remembers, in memory, the topics whose preferred leaders are to
    be elected once their moves are done, the brokers an operator emptied (an automatic
    balance leaves them empty), and what its automatic mode has seen. Its event loop is the
    only user; ``clock`` (monotonic seconds) times the automatic mode."""

    def __init__(self, access: MetadataAccess, brokers: BrokerManager, moves: PartitionMoves,
                 settings: BalanceSettings, started: Callable[[], Awaitable[None]],
                 limits: PartitionLimits | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.access = access
        self.brokers = brokers
        self.moves = moves
        self.settings = settings
        self.limits = limits
        self._started = started
        self._clock = clock
        self.leaders_pending: set[tuple[str, int]] = set()  # moved; preferred leader next
        self.emptied: set[int] = set()  # brokers an operator's plan emptied
        self._pending: set[int] = set()  # brokers whose arrival or leaving calls for a plan
        self._seen_empty: set[int] = set()
        self._holding: set[int] | None = None
        self._live: frozenset[int] = frozenset()
        self._live_since = clock()

    # -- the API ---------------------------------------------------------------------------------

    async def balance_plan(self, remove: list[int] | None = None) -> dict[str, Any]:
        """The plan that evens replicas, preferred leaders and bytes over the live brokers
        (but those of ``remove``, which it empties): its moves, each broker's load before and
        after, and the partitions it could not move. Changes nothing. Raises
        UnknownBrokerError for a broker the cluster never had, ReassignmentInProgressError
        while partitions are being moved."""
        await self._started()
        remove = check_brokers("brokers to empty", remove or [], self.access.state.broker_ids)
        self._check_settled()
        live = self.brokers.serving()  # a broker being drained is given nothing
        sizes = await self._sizes()
        # On a copy, in a thread: thousands of partitions take seconds to plan, which the
        # controller's event loop must not wait for.
        topics = list(self.access.state.snapshot().values())
        plan = await asyncio.to_thread(plan_balance, topics, live, sizes, remove=remove,
                                       max_replicas=self._max_replicas())
        return {**plan.to_dict(), "live": sorted(live), "remove": remove}

    async def balance_execute(self, moves: list[dict[str, Any]],
                              remove: list[int] | None = None) -> dict[str, Any]:
        """Start the ``moves`` of a plan (each ``{"topic", "partition", "replicas",
        "target"}`` as :meth:`balance_plan` gave them; ``remove``: the brokers it empties,
        which an automatic balance then leaves empty). Every move is checked first: a
        partition whose replicas are no longer those of the plan, or a target with a broker
        not alive, raises StaleBalancePlanError and none starts. Returns the partitions
        started; :meth:`balance_status` follows them."""
        await self._started()
        remove = check_brokers("brokers to empty", remove or [], self.access.state.broker_ids)
        async with self.access.lock:
            started = self._start(moves)
        self.emptied |= set(remove)
        await self.brokers.delivered(await self.moves.move_reassigned(), "a balance")
        return {"started": [{"topic": t, "partition": p} for t, p in started]}

    async def balance_status(self) -> dict[str, Any]:
        """The partitions being moved (by a balance, a reassignment or a replacement): their
        replicas, target and ISR, with the bytes their new replicas hold and must hold; and
        the partitions moved by a balance whose preferred leader is to be elected next."""
        await self._started()
        await self.elect_moved()
        # As they are now: a move may end while the brokers are asked for sizes.
        moving = [{"topic": t.name, "partition": p.partition, "replicas": list(p.replicas),
                   "target": list(p.target), "isr": list(p.isr)}
                  for t, p in self.access.partitions() if p.target is not None]
        sizes = await self._sizes() if moving else {}
        for move in moving:
            tp = (move["topic"], move["partition"])
            full = max((sizes.get((*tp, b), 0) for b in move["isr"]), default=0)
            added = [b for b in move["target"] if b not in move["isr"]]
            move["bytes_to_copy"] = full * len(added)
            move["bytes_copied"] = sum(min(full, sizes.get((*tp, b), 0)) for b in added)
        return {"moving": moving, "leaders_pending": [
            {"topic": t, "partition": p} for t, p in sorted(self.leaders_pending)]}

    # -- the controller's loop -------------------------------------------------------------------

    async def step(self) -> None:
        """A round of the controller's loop: elect the preferred leaders of finished
        balance moves; in automatic mode, balance when a broker joined or left for good."""
        await self.elect_moved()
        if self.settings.auto_balance:
            await self._auto()

    async def elect_moved(self) -> None:
        """Elect the preferred leader of every partition a balance moved that is done."""
        done = {(t, p) for t, p in self.leaders_pending
                if t not in self.access.state.topics
                or len(self.access.state.topics[t].partitions) <= p
                or self.access.state.topics[t].partitions[p].target is None}
        if not done:
            return
        self.leaders_pending -= done
        topics = sorted({t for t, _ in done if t in self.access.state.topics})
        if topics:
            moved = await self.moves.elect_leaders(topics)
            if moved:
                logger.info("balance done: preferred leaders elected in %s", moved)

    async def _auto(self) -> None:
        state = self.access.state
        live = frozenset(self.brokers.live())
        now = self._clock()
        if live != self._live:
            self._live, self._live_since = live, now
        holding = set(state.replicas_by_broker())
        for broker in sorted(live - holding - self._seen_empty - self.emptied):
            logger.info("broker %d joined holding no replica: a balance is due", broker)
            self._pending.add(broker)
        self._seen_empty = set(live - holding)
        for broker in sorted((self._holding or set()) - holding - live):
            logger.info("broker %d left for good (its replicas were replaced): a balance is "
                        "due", broker)
            self._pending.add(broker)
        self._holding = holding
        if not self._pending or now - self._live_since < self.settings.auto_balance_after_s \
                or any(p.target is not None for _, p in self.access.partitions()):
            return
        self._pending.clear()
        try:
            plan = await self.balance_plan(sorted(self.emptied & state.broker_ids))
            if plan["moves"]:
                await self.balance_execute(plan["moves"])
                logger.info("automatic balance started: %d moves, %d bytes to copy",
                            len(plan["moves"]), plan["bytes"])
        except RaylogError as e:  # the cluster changed meanwhile: the next change plans again
            logger.warning("automatic balance not started: %r", e)

    # -- helpers ---------------------------------------------------------------------------------

    def _check_settled(self) -> None:
        moving = [f"{t.name}-{p.partition}" for t, p in self.access.partitions()
                  if p.target is not None]
        if moving:
            raise ReassignmentInProgressError(
                f"{len(moving)} partitions are being moved ({', '.join(moving[:5])}"
                f"{', ...' if len(moving) > 5 else ''}): balance once they are done")

    def _start(self, moves: list[dict[str, Any]]) -> list[tuple[str, int]]:
        """Check every move, then commit their reassignments (lock held)."""
        self._check_settled()
        state, live = self.access.state, self.brokers.serving()
        checked = []
        for move in moves:
            try:
                name, number = move["topic"], move["partition"]
                replicas, target = list(move["replicas"]), list(move["target"])
            except (KeyError, TypeError) as e:
                raise InvalidArgumentError(f"a move is {{topic, partition, replicas, target}}, "
                                           f"got {move!r}") from e
            what = f"{name}-{number}"
            if name not in state.topics or not isinstance(number, int) \
                    or not 0 <= number < len(state.topics[name].partitions):
                raise StaleBalancePlanError(f"{what} no longer exists: make a new plan")
            topic = state.topics[name]
            p = topic.partitions[number]
            if p.replicas != replicas:
                raise StaleBalancePlanError(f"{what} is on brokers {p.replicas} now, not "
                                            f"{replicas} as the plan says: make a new plan")
            if not target or len(set(target)) != len(target) \
                    or not set(target) - set(replicas) <= live:
                raise StaleBalancePlanError(f"{what}: the target {target} needs distinct live "
                                            f"brokers (live: {sorted(live)}): make a new plan")
            check_min_insync(what, topic.configs, len(target), InvalidArgumentError)
            checked.append((name, number, target))
        for name, number, target in checked:
            self.access.commit(events.reassignment(name, number, target))
            self.leaders_pending.add((name, number))
            logger.info("balance: %s-%d to brokers %s", name, number, target)
        return [(name, number) for name, number, _ in checked]

    def _max_replicas(self) -> dict[int, int] | None:
        if self.limits is None:
            return None
        return {b: self.limits.replicas_allowed(memory)
                for b, memory in self.brokers.node_memory().items()}

    async def _sizes(self) -> dict[tuple[str, int, int], int]:
        """Bytes of every replica on a live broker, as it says (a broker that does not
        answer in time counts as holding nothing: its replicas weigh nothing in the plan)."""
        handles = self.brokers.handles()
        answers = await asyncio.gather(*(asyncio.wait_for(h.describe.remote(), SIZES_TIMEOUT_S)
                                         for h in handles.values()), return_exceptions=True)
        sizes = {}
        for broker, answer in zip(handles, answers, strict=True):
            if isinstance(answer, BaseException):
                logger.warning("broker %d did not say the sizes of its replicas: %r", broker,
                               answer)
                continue
            for replica in answer:
                sizes[replica["topic"], replica["partition"], broker] = replica["size_bytes"]
        return sizes
