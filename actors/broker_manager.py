"""The controller's side of its brokers: which node serves which broker, a watch on each,
leadership and ISR changes when one goes or comes back, and telling brokers what they hold.

- **Registration** (:meth:`BrokerManager.register`, every reconcile round): every live Ray
  node with the broker resource gets a broker actor (actors/broker.py); its answer says which
  broker its data directory holds. raylog/metadata/brokers.py decides: a new directory gets
  the next broker id, written into it; a known one is served by that node from now on;
  another cluster's directory, or a broker id another live node serves (a copied disk), is
  refused, and that node is not asked again while it runs.
- **Watching**: one :class:`BrokerWatch` per registered broker (actors/supervision.py), and
  its session (raylog/metadata/sessions.py): a broker not heard from for
  ``broker_session_timeout_ms`` is fenced (taken down as if it had died) until it answers again.
- **A broker goes** (:meth:`on_down`): raylog/metadata/election.py decides, per partition it
  replicates, the new leader and ISR; each change is persisted, then every live replica of
  the partition is told.
- **A broker comes back** or is seen for the first time (:meth:`on_up`): if its incarnation is
  not the one the metadata log last saw, it lost its in-memory state (a restart), so it is
  first taken down as above; leaderless partitions may then get a leader; and the broker is
  told the full state of every replica it holds (it removes any other it finds).
- **A broker that stalled asks to be confirmed** (:meth:`confirm`): brought up if it had been
  fenced, told its full state, then confirmed; it serves nothing until then.
- **Telling brokers**: one sender per broker (actors/channels.py), so one slow broker never
  delays what the others are told; the controller's steps never wait for a broker's answer,
  and a client's request waits with a deadline, holding no lock.

Plain decisions live in raylog/metadata; this module does the Ray work around them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors import at
from actors.channels import BrokerChannel, Outcome, Words
from actors.supervision import BrokerWatch, Health
from raylog.errors import BrokerRestartedError, LeaderNotAvailableError
from raylog.metadata import election
from raylog.metadata import state as events
from raylog.metadata.access import MetadataAccess, Partition
from raylog.metadata.balance_settings import throttled_rate
from raylog.metadata.brokers import BrokerRegistry, Offer, Verdict
from raylog.metadata.identity import BrokerIdentity
from raylog.metadata.sessions import BrokerSessions, heartbeat_interval_s
from raylog.metadata.settings import ReplicationSettings
from raylog.metadata.state import PartitionState, TopicState
from raylog.replica.isr import NO_BROKER_EPOCH
from raylog.util.cluster_names import (
    ACTOR_RUNTIME_ENV,
    BROKER_RESOURCE,
    NAMESPACE,
    broker_actor_name,
)

logger = logging.getLogger(__name__)

IDENTIFY_TIMEOUT_S = 30.0   # a broker node's identify and adopt
APPLY_TIMEOUT_S = 120.0    # a broker taking its replicas' states (it may open many logs)
NODES_TIMEOUT_S = 30.0     # the GCS's list of nodes
SESSION_CHECK_S = 0.25     # how often sessions are checked


def broker_nodes() -> tuple[dict[str, float | None], set[str]]:
    """(the live nodes that carry the broker resource: node id -> memory (bytes) Ray gives
    their tasks and actors, None if it does not say; the nodes Ray reports dead)."""
    live, dead = {}, set()
    for n in ray.nodes():
        if not n.get("Alive"):
            dead.add(n["NodeID"])
        elif n.get("Resources", {}).get(BROKER_RESOURCE, 0) > 0:
            live[n["NodeID"]] = n["Resources"].get("memory")
    return live, dead


def _all_taken(answers: Any) -> bool:
    """Whether every answer of a (nested) gather of channel futures is True."""
    if isinstance(answers, list):
        return all(_all_taken(a) for a in answers)
    return bool(answers)


def unclean_allowed(topic: TopicState) -> bool:
    return bool(topic.configs.get("unclean_leader_election_enable", False))


# What an election decides for one partition, given the live brokers: a change, or None.
Decide = Callable[[TopicState, PartitionState, set[int]], election.Change | None]


class BrokerManager:
    """Brokers, their watches, sessions and senders, and their replicas' states, for the
    controller, over the metadata it reads and commits to (``access``: never the
    controller itself). Its event loop is the only user."""

    def __init__(self, access: MetadataAccess, settings: ReplicationSettings,
                 throttled_rate: int = 0) -> None:
        self.access = access
        self.settings = settings
        # The cluster's bytes a second for replicas being moved (0: unthrottled), which a
        # topic's replication.throttled.rate overrides (raylog/metadata/balance_settings.py).
        self.throttled_rate = throttled_rate
        state = access.state
        self.registry = BrokerRegistry(state.cluster_id, set(state.broker_ids))
        self.watches: dict[int, BrokerWatch] = {}
        self.down_since: dict[int, float] = {}  # broker -> when it went (monotonic s)
        self.sessions = BrokerSessions(settings.broker_session_timeout_s, SESSION_CHECK_S)
        self.channels: dict[int, BrokerChannel] = {}
        # Per broker, the replica hosts (actors/replica_hosts.py) serving its replicas that
        # its broker actor does not serve itself, as its answers to apply name them: the
        # metadata gives clients these handles. Forgotten when the broker goes down.
        self.routes: dict[int, dict[tuple[str, int], ray.actor.ActorHandle]] = {}
        self._sessions_task: asyncio.Task | None = None
        # Brokers being drained (actors/drains.py): not live for elections (they lead
        # nothing, join no ISR) until they come back as a new process, or are resumed.
        # Kept in Ray's GCS by actors/drains.py, which a restarted controller restores.
        self.draining: set[int] = set()

    def start_sessions(self) -> None:
        """Start checking sessions (once registration has heard from the live brokers)."""
        if self._sessions_task is None:
            self._sessions_task = asyncio.get_running_loop().create_task(
                self._check_sessions())

    async def _check_sessions(self) -> None:
        while True:
            await asyncio.sleep(SESSION_CHECK_S)
            stalled = self.sessions.stalled_s
            expired = self.sessions.expired()
            if self.sessions.stalled_s > stalled:
                logger.warning("the controller did not run for %.1f s: not counted against "
                               "the brokers' sessions", self.sessions.stalled_s - stalled)
            for broker in expired:
                watch = self.watches.get(broker)
                if watch is not None:
                    await watch.fence(self.settings.broker_session_timeout_s)

    # -- who is alive ------------------------------------------------------------------------

    def live(self) -> set[int]:
        return {b for b, w in self.watches.items() if w.alive}

    def serving(self) -> set[int]:
        """The live brokers that may lead, join ISRs and be given replicas: all but those
        being drained."""
        return self.live() - self.draining

    def handles(self) -> dict[int, ray.actor.ActorHandle]:
        return {b: w.handle for b, w in self.watches.items() if w.alive}

    def handle(self, broker: int) -> ray.actor.ActorHandle | None:
        watch = self.watches.get(broker)
        return watch.handle if watch is not None and watch.alive else None

    def leader(self, topic: str, partition: int) -> tuple[ray.actor.ActorHandle, int]:
        """(the actor serving the partition's leader replica: its broker's, or a replica host
        of that broker; its leader epoch); UnknownTopicError, UnknownPartitionError,
        LeaderNotAvailableError (retriable) when it has none alive."""
        p = self.access.state.topic(topic).partition(partition)
        handle = self.handle_for(p.leader, (topic, partition)) \
            if p.leader is not None else None
        if handle is None:
            raise LeaderNotAvailableError(f"{topic}-{partition} has no live leader right now")
        return handle, p.leader_epoch

    def handle_for(self, broker: int, tp: tuple[str, int]) -> ray.actor.ActorHandle | None:
        """The actor serving ``broker``'s replica of ``tp``: the replica host its broker
        named, else the broker actor (which passes requests on to its hosts)."""
        handle = self.handle(broker)
        if handle is None:
            return None
        return self.routes.get(broker, {}).get(tp, handle)

    def hosts(self, name: str, p: PartitionState) -> dict[int, ray.actor.ActorHandle]:
        """The replica hosts serving the partition's replicas on live brokers, where a
        broker's actor does not serve it itself (actors/replica_hosts.py)."""
        live = self.live()
        return {b: self.routes[b][name, p.partition] for b in p.replicas
                if b in live and (name, p.partition) in self.routes.get(b, {})}

    def broker_epochs(self) -> dict[int, int]:
        """The broker epoch of each live broker whose process is the one the metadata log
        last saw start. A broker whose new process is not recorded yet (it is being handled
        as back) has none, so nothing its leaders saw before counts for the ISR."""
        state = self.access.state
        return {b: state.broker_epochs[b] for b, w in self.watches.items()
                if w.alive and b in state.broker_epochs
                and state.incarnations.get(b) == w.incarnation}

    def node_memory(self) -> dict[int, float | None]:
        """Live brokers -> the memory Ray gives their node's tasks and actors."""
        memory, _ = broker_nodes()
        return {b: memory.get(self.watches[b].node_id) for b in self.live()}

    # -- registration --------------------------------------------------------------------------

    def _actor(self, node_id: str) -> ray.actor.ActorHandle:
        """The broker actor of ``node_id``: the running one (after a controller restart, every
        live node's), else a new one."""
        try:
            return ray.get_actor(broker_actor_name(node_id), namespace=NAMESPACE)
        except ValueError:
            pass
        # Imported here, not at the top: the broker's modules (its replicas, their logs, the
        # fetcher, tiered storage) weigh on every controller start, and a restarted
        # controller finds its brokers running (measured: docs/replication.md).
        from actors.broker import BrokerActor

        return BrokerActor.options(
            name=broker_actor_name(node_id), namespace=NAMESPACE, get_if_exists=True,
            lifetime="detached", max_restarts=-1, max_task_retries=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            runtime_env=ACTOR_RUNTIME_ENV,
        ).remote(node_id)

    async def register(self) -> None:
        """Ask every live broker node not yet serving (nor refused) which broker its data
        directory holds; decide; start watching the brokers that serve. All the brokers that
        answered are registered (and count as alive) before any of them is handled as back:
        after a controller or cluster restart, a broker taken down for having restarted
        hands its leaderships to the others registered in the same round."""
        nodes, dead = await asyncio.wait_for(asyncio.to_thread(broker_nodes), NODES_TIMEOUT_S)
        self.registry.nodes_gone(dead)
        unknown = [n for n in nodes if self.registry.to_ask(n)]
        if not unknown:
            return
        calls = {asyncio.ensure_future(self._actor(n).identify.remote()): n for n in unknown}
        done, slow = await asyncio.wait(calls, timeout=IDENTIFY_TIMEOUT_S)
        for call in slow:  # one slow node must not keep the others from serving
            logger.warning("the broker actor of node %s did not answer in %.0f s", calls[call],
                           IDENTIFY_TIMEOUT_S)
            call.cancel()
        served = []
        for call in done:
            node_id = calls[call]
            try:
                answer = call.result()
            except Exception as e:
                logger.warning("the broker actor of node %s failed: %r", node_id, e)
                continue
            if answer["error"] is not None:
                self._refuse(node_id, answer["error"])
                continue
            try:
                watch = await self._serve(node_id, answer)
            except Exception:  # one node's trouble must not keep the others from serving
                logger.exception("node %s could not be registered", node_id)
                continue
            if watch is not None:
                served.append(watch)
        for watch in served:
            await watch.guarded(self.on_up)

    async def _serve(self, node_id: str, answer: dict[str, Any]) -> BrokerWatch | None:
        """Decide about a node's offer; if it serves a broker, watch it (not yet handled as
        up: the caller does that)."""
        identity = BrokerIdentity(*answer["identity"]) if answer["identity"] else None
        offer = Offer(node_id, answer["host"], answer["data_dir"], identity)
        verdict, reason = self.registry.decide(offer)
        if verdict is Verdict.REFUSED:
            # A broker another live node serves may be this one's after all, once Ray has
            # declared that node dead: ask again. Any other reason stands.
            served = identity is not None and identity.broker_id in self.registry.brokers \
                and self.registry.brokers[identity.broker_id].alive
            self._refuse(node_id, reason, final=not served)
            return None
        access = self.access
        actor = self._actor(node_id)
        if verdict is Verdict.NEW:
            async with access.lock:
                broker_id = access.state.next_broker_id
                access.commit(events.broker_registered(broker_id))
            self.registry.add(broker_id)
            await asyncio.wait_for(actor.adopt.remote(broker_id, access.state.cluster_id),
                                   IDENTIFY_TIMEOUT_S)
        else:
            broker_id = identity.broker_id
        self.registry.serve(broker_id, offer)
        logger.info("node %s (%s) serves broker %d from %s", node_id, offer.host,
                    broker_id, offer.data_dir)
        old = self.watches.get(broker_id)
        if old is not None:
            old.stop()
        watch = self.watches[broker_id] = BrokerWatch(
            broker_id, actor, node_id, answer["incarnation"], self.on_down, self.on_up,
            self.on_failed, self._heard, heartbeat_interval_s(
                self.settings.broker_session_timeout_s),
            self.settings.broker_session_timeout_ms, answer.get("pid"))
        self.sessions.heard(broker_id)  # it just answered
        watch.start()
        return watch

    def _heard(self, watch: BrokerWatch) -> None:
        if self.watches.get(watch.broker_id) is watch and watch.alive:
            self.sessions.heard(watch.broker_id)

    def _refuse(self, node_id: str, reason: str, final: bool = True) -> None:
        if self.registry.refused.get(node_id) != reason:
            logger.error("refusing broker node %s: %s", node_id, reason)
        self.registry.refuse(node_id, reason, final)

    def missing_after_start(self) -> list[int]:
        """Brokers the metadata knows that no live node has presented: after the first
        registration round they are down (their leaderships must move)."""
        return sorted(b for b in self.access.state.broker_ids
                      if b not in self.watches and b not in self.down_since)

    # -- a broker goes, a broker comes back -------------------------------------------------------

    async def on_down(self, watch: BrokerWatch) -> None:
        broker = watch.broker_id
        self.sessions.forget(broker)
        self.routes.pop(broker, None)
        self.channel(broker).release()  # a client's request no longer waits for it
        if watch.health is Health.DEAD:
            self.registry.unserve(broker)
            self.watches.pop(broker, None)
            ray.kill(watch.handle, no_restart=True)  # frees its name for a new one
        await self.broker_down(broker)

    async def elect(self, partitions: Callable[[], Iterable[Partition]], decide: Decide, *,
                    without: int | None = None, skip: int | None = None, tell: bool = True
                    ) -> tuple[list[Partition], asyncio.Future | None]:
        """The one way leaderships, ISRs and replicas change: under the metadata lock, ask
        ``decide`` about each of ``partitions()`` (read under the lock) given the live
        brokers (but ``without``), and commit every change it decides, all in one commit (one
        fsync of the metadata log, however many partitions); then, with ``tell``, push the
        changed partitions to their live replicas (but ``skip``). Returns the partitions
        changed and the brokers being told (:meth:`push`'s future; None without ``tell``).
        An error of ``decide`` or ``partitions`` commits the changes decided before it, and
        pushes nothing."""
        changes: list[tuple[TopicState, PartitionState, election.Change]] = []
        async with self.access.lock:
            live = self.serving() - {without}
            decided: set[int] = set()
            try:
                for topic, p in partitions():
                    if id(p) in decided:
                        continue  # listed twice: its change is decided
                    change = decide(topic, p, live)
                    if change is not None:
                        changes.append((topic, p, change))
                        decided.add(id(p))
            finally:
                self.access.commit_changes(changes)
        changed = [(topic, p) for topic, p, _ in changes]
        return changed, (await self.push(changed, skip=skip) if tell else None)

    async def broker_down(self, broker: int) -> None:
        """Move the leaderships of ``broker`` and take it out of ISRs."""
        self.down_since.setdefault(broker, time.monotonic())
        changed, _ = await self.elect(
            lambda: self.access.replicas_on(broker),
            lambda t, p, live: election.broker_down(p, broker, live, unclean_allowed(t)),
            without=broker)
        if changed:
            logger.info("broker %d down: %d partitions changed leader or ISR", broker,
                        len(changed))

    async def on_up(self, watch: BrokerWatch) -> None:
        broker = watch.broker_id
        access = self.access
        if access.state.incarnations.get(broker) != watch.incarnation:
            if broker in access.state.incarnations:
                # It restarted: what it held in memory (its ISR places, its epochs) is gone.
                # Taken down before its new incarnation is recorded: a controller crash in
                # between replays into doing it again, never into skipping it.
                await self.broker_down(broker)
            async with access.lock:
                access.commit(events.broker_started(broker, watch.incarnation))
            self.draining.discard(broker)  # a new process: drained and restarted
        self.down_since.pop(broker, None)
        changed, _ = await self.elect(
            lambda: access.replicas_on(broker),
            lambda t, p, live: election.broker_up(p, broker, live, unclean_allowed(t)),
            tell=False)
        await self.push_full(broker)
        # Every other replica of its partitions hears of it too: a follower told its state
        # before this leader's broker was known (say, while brokers register one by one after
        # a controller restart) learns where to fetch from.
        await self.push({id(p): (t, p) for t, p in
                         [*changed, *access.replicas_on(broker)]}.values(), skip=broker)

    async def on_failed(self, watch: BrokerWatch, failed: dict) -> None:
        """Replicas this broker could not open (a damaged directory, a full disk, a directory
        another process of the broker still holds): for those partitions it is as if the
        broker were gone. The broker retries when told again, and a held directory by
        itself, until it opens (raylog/replica/lock_waits.py): it then rejoins the ISR as
        any follower that caught up."""
        broker = watch.broker_id

        def unopened() -> list[Partition]:
            found = []
            for name, number in failed:
                topic = self.access.state.topics.get(name)
                if topic is not None and number < len(topic.partitions):
                    found.append((topic, topic.partitions[number]))
            return found

        def decide(topic: TopicState, p: PartitionState, live: set[int]
                   ) -> election.Change | None:
            change = election.broker_down(p, broker, live, unclean_allowed(topic))
            if change is not None:
                logger.error("broker %d cannot serve it (%s): moving on without it", broker,
                             failed[(topic.name, p.partition)], **at(topic.name, p.partition))
            return change

        await self.elect(unopened, decide, without=broker)

    async def elect_leaderless(self) -> None:
        """Give a leader to every partition without one that has a live candidate (a broker
        came back before the partition's last ISR member was known)."""
        await self.elect(
            lambda: [(t, p) for t, p in self.access.partitions() if p.leader is None],
            lambda t, p, live: election.leaderless(p, live, unclean_allowed(t)))

    async def confirm(self, broker: int, incarnation: str) -> bool:
        """The broker ``broker`` (as ``incarnation``) stalled and asks whether it may serve:
        brought up if it had been fenced (its leaderships moved meanwhile), told the full
        state of its replicas (it becomes a follower where another leads now, and truncates),
        and then confirmed. False while the controller does not know it as that incarnation
        alive (it restarted, or is not registered yet): it asks again."""
        watch = self.watches.get(broker)
        if watch is None or not await watch.bring_up(incarnation):
            return False
        told = await self.delivered(await self.push_full(broker),
                                    f"the state of broker {broker}")
        return told and self.watches.get(broker) is watch and watch.alive \
            and watch.incarnation == incarnation

    # -- telling brokers --------------------------------------------------------------------------

    def state_of(self, topic: TopicState, p: PartitionState) -> dict[str, Any]:
        return {"topic": topic.name, "partition": p.partition, "topic_id": topic.topic_id,
                "configs": dict(topic.configs), "leader": p.leader,
                "leader_epoch": p.leader_epoch, "partition_epoch": p.partition_epoch,
                "replicas": list(p.replicas), "isr": list(p.isr),
                # while it moves, its new replicas copy at this rate (actors/fetcher.py)
                "throttled_rate": None if p.target is None
                else throttled_rate(topic.configs, self.throttled_rate)}

    async def push(self, partitions: Iterable[tuple[TopicState, PartitionState]],
                   skip: int | None = None) -> asyncio.Future:
        """Tell every live replica of these partitions (but on ``skip``) their state. Does
        not wait for the brokers: the future returned is done when every broker took it
        (or was found not alive); see :meth:`delivered`."""
        live = self.live() - {skip}
        by_broker: dict[int, set[tuple[str, int]]] = {}
        for topic, p in partitions:
            if not self.access.is_current(topic):
                continue  # deleted meanwhile
            for broker in p.replicas:
                if broker in live:
                    by_broker.setdefault(broker, set()).add((topic.name, p.partition))
        return asyncio.gather(*(self.channel(b).tell(tps) for b, tps in by_broker.items()))

    async def push_full(self, broker: int) -> asyncio.Future:
        """Tell ``broker`` the state of every replica it holds, and that it holds no other
        (without waiting, as :meth:`push`)."""
        return self.channel(broker).tell(full=True)

    async def stop_replicas(self, broker: int, replicas: list[tuple[str, int]], delete: bool
                            ) -> asyncio.Future:
        """Tell ``broker`` to stop serving ``replicas`` (with ``delete``: remove their files),
        as of the current metadata version (without waiting, as :meth:`push`)."""
        return self.channel(broker).stop_replicas(replicas, delete,
                                                  self.access.state.applied)

    async def remove_replicas(self, name: str, brokers: set[int], partitions: list[int]
                              ) -> asyncio.Future:
        """Tell live ``brokers`` to remove their replicas of these partitions of topic
        ``name`` (without waiting, as :meth:`push`); an offline one removes them when it is
        back (it is told everything it holds, and removes the rest)."""
        told = []
        for broker in sorted(brokers):
            if self.handle(broker) is None:
                logger.info("broker %d is offline: it removes %s when it is back", broker, name)
                continue
            told.append(await self.stop_replicas(broker, [(name, i) for i in partitions], True))
        return asyncio.gather(*told)

    async def delivered(self, told: asyncio.Future, what: str,
                        timeout_s: float = APPLY_TIMEOUT_S) -> bool:
        """Wait (up to ``timeout_s``) until what ``told`` carries was taken; whether it was
        by every live broker it was meant for. For requests of clients, which should not
        return before the brokers know; never raises."""
        try:
            answers = await asyncio.wait_for(told, timeout_s)
        except TimeoutError:
            logger.warning("brokers did not take %s within %.0f s", what, timeout_s)
            return False
        return _all_taken(answers)

    def channel(self, broker: int) -> BrokerChannel:
        channel = self.channels.get(broker)
        if channel is None:
            channel = self.channels[broker] = BrokerChannel(broker, self._send)
        return channel

    def _states(self, broker: int, words: Words) -> list[dict[str, Any]]:
        """The current state of the replicas on ``broker`` that ``words`` name (all of them,
        for a full push)."""
        if words.full:
            return [self.state_of(t, p) for t, p in self.access.replicas_on(broker)]
        states = []
        for name, number in sorted(words.partitions):
            topic = self.access.state.topics.get(name)
            if topic is None or number >= len(topic.partitions):
                continue  # deleted meanwhile: its replicas are stopped separately
            p = topic.partitions[number]
            if broker in p.replicas:  # else moved away meanwhile: stopped separately
                states.append(self.state_of(topic, p))
        return states

    async def _send(self, broker: int, words: Words) -> Outcome:
        """One call of ``broker``'s channel: the stops, then the states, as of now."""
        watch = self.watches.get(broker)
        if watch is None or not watch.alive:
            return Outcome.DROPPED  # not alive: it is told everything when it is back
        handle = watch.handle
        routes = self.routes.setdefault(broker, {})
        try:
            for stop in words.stops:
                for tp in stop.replicas:
                    routes.pop(tuple(tp), None)
                await asyncio.wait_for(handle.stop_replicas.remote(
                    list(stop.replicas), stop.delete, stop.version), APPLY_TIMEOUT_S)
            if not words.partitions and not words.full:
                return Outcome.DELIVERED
            states = self._states(broker, words)
            # Addressed to the process the watch knows: one Ray restarted meanwhile refuses.
            # Its broker epoch is known once the metadata log recorded that process's start
            # (on_up): until then the process takes none (its followers are never admitted).
            state = self.access.state
            epoch = state.broker_epochs.get(broker, NO_BROKER_EPOCH) \
                if state.incarnations.get(broker) == watch.incarnation else NO_BROKER_EPOCH
            answers = await asyncio.wait_for(handle.apply.remote(
                broker, state.cluster_id, states, self.handles(), words.full, state.applied,
                epoch, watch.incarnation), APPLY_TIMEOUT_S)
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnschedulableError,
                TimeoutError) as e:
            # Its watch will say whether it is gone; while it is alive, the call is made again.
            logger.warning("could not tell broker %d (%r)", broker, e)
            return Outcome.FAILED
        except Exception as e:
            # Imported here: raylog.client's package loads the whole client (producer,
            # consumer, admin), which a controller's start need not wait for.
            from raylog.client.remote import unwrap

            if isinstance(unwrap(e), BrokerRestartedError):
                # Its watch takes the old process down, then tells the new one everything.
                logger.info("broker %d restarted before it was told: %s", broker, unwrap(e))
                return Outcome.DROPPED
            # The broker failed to take it (a bug): the next word retries.
            logger.exception("broker %d failed to take the state of its replicas", broker)
            return Outcome.DROPPED
        if words.full:
            routes.clear()
        for s in states:
            answer = answers.get(f"{s['topic']}-{s['partition']}", {})
            if answer.get("host") is not None:
                routes[s["topic"], s["partition"]] = answer["host"]
            else:
                routes.pop((s["topic"], s["partition"]), None)
        failed = {k: v["error"] for k, v in answers.items()
                  if "error" in v and not v.get("locked")}
        if failed:
            logger.error("broker %d could not serve %s", broker, failed)
        locked = sorted(k for k, v in answers.items() if v.get("locked"))
        if locked:
            # Another process of the broker (one being replaced) still holds their
            # directories: the broker opens them once it is gone (raylog/replica/
            # lock_waits.py); meanwhile they count as failed (on_failed).
            logger.warning("broker %d waits to open %s: another process of its own holds "
                           "them", broker, locked)
        return Outcome.DELIVERED
