"""The admin client: topics and cluster state, through the controller."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from raylog.client.connection import RaylogCluster, cluster_or_default
from raylog.client.operations import RollTimeouts, roll, stop_brokers, wait_in_sync
from raylog.client.remote import ControllerClient, discard, resolve
from raylog.errors import (
    ClientClosedError,
    ControllerUnavailableError,
    InvalidArgumentError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTxnStateError,
    NoClusterError,
    RaylogError,
    ReassignmentInProgressError,
    RequestTimeoutError,
    UnknownGroupError,
    UnknownTopicError,
)
from raylog.metadata.topics import (
    canonical_config_name,
    check_partition,
    check_user_topic,
    described_configs,
    normalize_configs,
    reset_partitions,
    reset_spec,
    topic_names,
    topic_partitions,
    validate_topic_name,
)
from raylog.quotas.entity import DEFAULT, QuotaEntity, check_keys, check_quotas, from_wire
from raylog.types import NewTopic, PreparedTransaction, TopicPartition
from raylog.util.arguments import (
    INT32_MAX,
    check_bool,
    check_id,
    check_int,
    check_options,
    check_timeout,
    short_repr,
)
from raylog.util.backoff import backoff_s

CHANGE_RETRY_S = 60.0  # how long a change rides out a controller restart


def _broker_ids(what: str, brokers: Iterable[int]) -> list[int]:
    if isinstance(brokers, str | bytes) or not isinstance(brokers, Iterable):
        raise InvalidArgumentError(f"{what}: a list of broker ids, got {short_repr(brokers)}")
    return sorted({check_int(f"{what}: a broker id", b, 0, INT32_MAX) for b in brokers})


class Admin:
    """Creates, describes, alters and deletes topics; reports the cluster's state.

    Every call is one request to the controller; changes are durable when they return.
    Arguments are checked before the request: a bad one raises a typed error at once.

    >>> admin = Admin()
    >>> admin.create_topic("pageviews", partitions=6, replication_factor=1)
    >>> admin.list_topics()
    ['pageviews']
    """

    def __init__(self, *, cluster: RaylogCluster | None = None, **settings: Any) -> None:
        check_options("Admin", settings, ["cluster"])
        self._cluster = cluster_or_default(cluster)
        self._closed = False

    def _controller(self) -> ControllerClient:
        if self._closed:
            raise ClientClosedError("the admin client is closed")
        return self._cluster.controller

    def _change(self, change: Callable[[], Any],
                done: Callable[[RaylogError], bool] | None = None) -> Any:
        """A change, retried while the controller restarts. Every change here is safe to
        repeat; ``done`` recognises the error a repeat gets when the first try had worked."""
        self._controller()
        deadline = time.monotonic() + CHANGE_RETRY_S
        retried = False
        while True:
            try:
                return change()
            except ControllerUnavailableError:
                if time.monotonic() > deadline:
                    raise
                retried = True
                time.sleep(0.2)
            except RaylogError as e:
                if retried and done is not None and done(e):
                    return None
                raise

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1,
                     configs: dict[str, Any] | None = None) -> dict[str, Any]:
        """Create a topic; returns its description once every replica is serving.

        Raises InvalidTopicError, InvalidPartitionsError (beyond the cluster's limits, see
        raylog.metadata.limits), InvalidReplicationFactorError, InvalidConfigError or
        TopicExistsError, creating nothing."""
        check_user_topic(name)
        self._check_partitions(name, partitions)
        check_int("replication factor", replication_factor, 1, INT32_MAX,
                  InvalidReplicationFactorError)
        configs = normalize_configs(configs)
        topic_id = uuid.uuid4().hex
        return self._change(lambda: self._controller().create_topic(
            name, partitions, replication_factor, configs, topic_id))

    def create_topics(self, topics: Iterable[NewTopic | Mapping[str, Any]]
                      ) -> dict[str, dict[str, Any]]:
        """Create several topics (``NewTopic``s, or dicts of its fields); returns each one's
        description. Every topic is checked before any is created; a topic the cluster then
        refuses (one that exists) raises its error, leaving those created before it."""
        if isinstance(topics, str | bytes | Mapping) or not isinstance(topics, Iterable):
            raise InvalidArgumentError(f"create_topics() takes a list of NewTopic, got "
                                       f"{short_repr(topics)}")
        wanted = []
        for topic in list(topics):
            if isinstance(topic, Mapping):
                try:
                    topic = NewTopic(**topic)
                except TypeError as e:
                    raise InvalidArgumentError(f"create_topics(): {e}") from None
            if not isinstance(topic, NewTopic):
                raise InvalidArgumentError(f"create_topics() takes NewTopic or dict items, got "
                                           f"{short_repr(topic)}")
            check_user_topic(topic.name)
            self._check_partitions(topic.name, topic.num_partitions)
            check_int("replication factor", topic.replication_factor, 1, INT32_MAX,
                      InvalidReplicationFactorError)
            wanted.append(topic._replace(topic_configs=normalize_configs(topic.topic_configs)))
        names = [t.name for t in wanted]
        if len(set(names)) != len(names):
            raise InvalidArgumentError(f"create_topics() names a topic twice: {names}")
        return {t.name: self.create_topic(t.name, t.num_partitions, t.replication_factor,
                                          t.topic_configs) for t in wanted}

    def delete_records(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Kafka's DeleteRecords: for each partition, make the records below the offset
        (-1: the high watermark) unreadable; segments wholly below it are deleted. Returns
        each partition's new log start. Every partition and offset is checked before any is
        asked; an offset outside [log start, high watermark] raises OffsetOutOfRangeError."""
        if not isinstance(offsets, Mapping):
            raise InvalidArgumentError(f"delete_records() takes a dict of TopicPartition to "
                                       f"offset, got {short_repr(offsets)}")
        wanted = {}
        for tp, offset in offsets.items():
            [tp] = topic_partitions([tp], "delete_records()")
            check_partition(tp.topic, tp.partition, self._cluster.topic(tp.topic).num_partitions)
            wanted[tp] = check_int(f"the offset of {tp}", offset, -1)
        out = {}
        for tp, offset in wanted.items():
            out[tp] = self._on_leader(tp, lambda replica, o=offset: replica.delete_records(o))
        return out

    def _on_leader(self, tp: TopicPartition, call: Callable[[Any], Any]) -> Any:
        """``call(leader's client)``, again with fresh metadata while the leadership moves
        (or the leader does not answer), for CHANGE_RETRY_S in all."""
        deadline = time.monotonic() + CHANGE_RETRY_S
        refresh = False
        while True:
            ref = None
            try:
                meta = self._cluster.topic(tp.topic, refresh=refresh,
                                           timeout=max(deadline - time.monotonic(), 0.001))
                ref = call(meta.partitions[tp.partition].leader_client())
                return resolve(ref, timeout=max(deadline - time.monotonic(), 0.001))
            except RaylogError as e:
                if isinstance(e, RequestTimeoutError):
                    discard(ref)  # its late answer goes unread
                if not e.retriable or time.monotonic() >= deadline:
                    raise
                refresh = True
                time.sleep(0.2)

    def describe_configs(self, names: str | list[str] | None = None
                         ) -> dict[str, dict[str, dict[str, Any]]]:
        """Every config of each named topic (or of all), as Kafka's names them, with its
        value and whether it is the default: ``{topic: {"retention.ms": {"value": ...,
        "is_default": ...}}}``."""
        return {t["name"]: described_configs(t["configs"]) for t in self.describe_topics(names)}

    def _check_partitions(self, name: str, total: object) -> None:
        check_int("partitions", total, 1, INT32_MAX, InvalidPartitionsError)
        if self._cluster.limits is not None:
            self._cluster.limits.check_topic_size(name, total)

    def delete_topic(self, name: str) -> None:
        check_user_topic(name)
        self._change(lambda: self._controller().delete_topic(name),
                     done=lambda e: isinstance(e, UnknownTopicError))
        self._cluster.forget(name)

    def list_topics(self, include_internal: bool = False) -> list[str]:
        return self._controller().list_topics(check_bool("include_internal", include_internal))

    def describe_topic(self, name: str) -> dict[str, Any]:
        return self._controller().describe_topics([validate_topic_name(name)])[0]

    def describe_topics(self, names: str | list[str] | None = None) -> list[dict[str, Any]]:
        """Descriptions of the named topics (one name counts as one topic), or of all."""
        return self._controller().describe_topics(
            None if names is None else topic_names(names, allow_empty=True))

    def add_partitions(self, name: str, total: int) -> dict[str, Any]:
        """Grow a topic to ``total`` partitions (never shrinks)."""
        check_user_topic(name)
        self._check_partitions(name, total)
        out = self._change(lambda: self._controller().add_partitions(name, total),
                           done=lambda e: isinstance(e, InvalidPartitionsError) and
                           len(self.describe_topic(name)["partitions"]) == total)
        self._cluster.forget(name)
        return out

    def alter_configs(self, name: str, set_configs: dict[str, Any] | None = None,
                      delete_configs: list[str] | None = None) -> dict[str, Any]:
        """Set and delete (back to default) topic configs; replicas apply them at once.
        Deleting a config that is not set is refused (InvalidConfigError), as Kafka does."""
        validate_topic_name(name)
        if isinstance(delete_configs, str):
            delete_configs = [delete_configs]
        if delete_configs is not None and not isinstance(delete_configs, list | tuple):
            raise InvalidArgumentError(f"delete_configs must be a list of config names, got "
                                       f"{short_repr(delete_configs)}")
        updates = normalize_configs(set_configs)
        deletes = [canonical_config_name(n) for n in delete_configs or ()]

        def done(error: RaylogError) -> bool:
            # A repeat after a controller restart finds the deletions made already.
            configs = self.describe_topic(name)["configs"]
            return isinstance(error, InvalidConfigError) and \
                all(configs.get(k) == v for k, v in updates.items()) and \
                not any(k in configs for k in deletes)

        return self._change(lambda: self._controller().alter_configs(name, updates, deletes),
                            done=done)

    # -- client quotas (docs/quotas.md) ------------------------------------------------

    def alter_quotas(self, entity: QuotaEntity, set_quotas: Mapping[str, float] | None = None,
                     delete_quotas: Iterable[str] | None = None) -> None:
        """Set and delete quotas of ``entity`` (a user, a client id, or both; DEFAULT for
        the default one); brokers and Kafka listeners enforce them within a moment. Keys:
        producer_byte_rate, consumer_byte_rate (bytes/s), request_percentage. Bad input
        (an unknown key, a value that is not a positive number) raises InvalidQuotaError,
        changing nothing; deleting a quota that is not set is no error, as Kafka's.

        >>> Admin().alter_quotas(QuotaEntity(client_id="loader"),
        ...                      {"producer_byte_rate": 10 << 20})
        """
        if not isinstance(entity, QuotaEntity):
            raise InvalidArgumentError(f"entity must be a QuotaEntity, got "
                                       f"{short_repr(entity)}")
        if isinstance(delete_quotas, str):
            delete_quotas = [delete_quotas]
        updates = check_quotas(set_quotas or {})  # refused here, before any remote call
        deletes = list(delete_quotas or [])
        check_keys(deletes)
        self._controller().alter_quotas([{"entity": entity.to_dict(), "set": updates,
                                          "delete": deletes}])

    def describe_quotas(self, user: str | None = None, client_id: str | None = None,
                        strict: bool = False) -> dict[QuotaEntity, dict[str, float]]:
        """The quotas set, by entity: of ``user`` and of ``client_id`` when given (a name,
        or DEFAULT for the default's), only of entities naming nothing else with
        ``strict``."""
        components = [(kind, "default" if name == DEFAULT else "exact",
                       None if name == DEFAULT else name)
                      for kind, name in (("user", user), ("client-id", client_id))
                      if name is not None]
        return from_wire(self._controller().describe_quotas(components, strict))

    # -- consumer groups --------------------------------------------------------------------------

    def list_groups(self) -> list[dict[str, Any]]:
        """Every group with committed offsets or members: id, state, members, generation."""
        return self._controller().list_groups()

    def describe_group(self, group_id: str) -> dict[str, Any]:
        """Members and what they own, and per partition: committed offset, end offset, lag."""
        return self._controller().describe_group(
            check_id("group_id", group_id, InvalidArgumentError))

    def delete_group(self, group_id: str) -> None:
        """Forget a group and its committed offsets; it must have no active members."""
        check_id("group_id", group_id, InvalidArgumentError)
        self._change(lambda: self._controller().delete_group(group_id),
                     done=lambda e: isinstance(e, UnknownGroupError))

    def list_consumer_group_offsets(self, group_id: str,
                                    partitions: Iterable[TopicPartition] | None = None
                                    ) -> dict[TopicPartition, int]:
        """The group's committed offsets (the next offset to read), of ``partitions`` or of
        every partition it committed; a partition without one is left out."""
        check_id("group_id", group_id, InvalidArgumentError)
        if partitions is None:
            described = self.describe_group(group_id)["partitions"]
            return {TopicPartition(p["topic"], p["partition"]): p["committed"]
                    for p in described if p["committed"] is not None}
        wanted = [tuple(tp) for tp in topic_partitions(partitions, "list_consumer_group_offsets()")]
        found = self._controller().committed_offsets(group_id, wanted, require_stable=False)
        return {TopicPartition(*tp): om[0] for tp, om in found.items() if om}

    def reset_offsets(self, group_id: str, topic: str, to: str | int,
                      partitions: list[int] | None = None, *, dry_run: bool = False
                      ) -> dict[int, int]:
        """Set a stopped group's committed offsets of ``topic`` to ``"earliest"``,
        ``"latest"``, the first offset at or after a timestamp (``{"timestamp": ms}``) or an
        offset (an int). Returns partition -> new offset. With ``dry_run``, nothing changes:
        the answer says what would be set (Kafka's ``--dry-run``)."""
        check_id("group_id", group_id, InvalidArgumentError)
        validate_topic_name(topic)
        check_bool("dry_run", dry_run)
        spec = reset_spec(to)
        if partitions is not None:
            partitions = reset_partitions(partitions)
        if dry_run:
            return self._controller().reset_offsets(group_id, topic, spec, partitions, True)
        return self._change(lambda: self._controller().reset_offsets(group_id, topic, spec,
                                                                    partitions))

    # -- transactions (docs/transactions.md) -----------------------------------------------------

    def list_transactions(self, states: Iterable[str] | None = None, min_age_ms: int = 0
                          ) -> list[dict[str, Any]]:
        """The transactional ids the coordinator knows (Kafka's listTransactions): their
        state, producer, partitions and age; only those in ``states`` (``ONGOING``,
        ``PREPARE_COMMIT``, ...), and with ``min_age_ms`` > 0 only open transactions at
        least that old (hanging ones)."""
        wanted = None if states is None else [str(s).upper() for s in states]
        return self._controller().txn_list(wanted, check_int("min_age_ms", min_age_ms, 0))

    def describe_transaction(self, transactional_id: str) -> dict[str, Any]:
        """One transactional id (Kafka's describeTransactions): state, producer id and
        epoch, timeout, partitions, groups, start and age; TransactionalIdNotFoundError if
        the coordinator does not know it."""
        return self._controller().txn_describe(
            check_id("transactional_id", transactional_id, InvalidArgumentError))

    def abort_transaction(self, transactional_id: str) -> dict[str, Any]:
        """Abort an open transaction (a hanging one): its producer is fenced, and the abort
        markers are written to its partitions. Returns the id as described then
        (PREPARE_ABORT until the markers are written). InvalidTxnStateError if no
        transaction is open or its commit is decided."""
        check_id("transactional_id", transactional_id, InvalidArgumentError)
        def done(error: RaylogError) -> bool:
            # A repeat after a controller restart finds the abort made already.
            return isinstance(error, InvalidTxnStateError) and self.describe_transaction(
                transactional_id)["state"] in ("PREPARE_ABORT", "COMPLETE_ABORT")

        out = self._change(lambda: self._controller().txn_abort(transactional_id), done=done)
        return out if out is not None else self.describe_transaction(transactional_id)

    def commit_transactions(self, write_id: str, prepared: Iterable[PreparedTransaction],
                            timeout: float | None = CHANGE_RETRY_S) -> None:
        """Commit several prepared transactions (``Producer.prepare_transaction()``'s, of
        producers anywhere) all or none: returns once the coordinator's one decision naming
        them all is durable; the markers follow (docs/transactions.md, "Joint commits").
        Refused whole, with nothing committed, if one is not open at its producer id and
        epoch any more (ProducerFencedError, InvalidTxnStateError, ...). ``write_id`` names
        the commit: a retry with it (done here while the answer is retriable, for up to
        ``timeout`` s) is answered as the first, so an answer lost is never a second
        commit."""
        check_id("write_id", write_id, InvalidArgumentError)
        members = [tuple(p) for p in prepared]
        timeout = check_timeout("timeout", timeout)
        deadline = time.monotonic() + (CHANGE_RETRY_S if timeout is None else timeout)
        for attempt in itertools.count():
            try:
                self._controller().txn_commit_jointly(write_id, members)
                return
            except RaylogError as e:
                # A write of the decision in doubt is decided by the retry; a member busy
                # (its previous transaction completing) is free in a moment; a controller
                # still restarting after the client's own retries answers later.
                pause = backoff_s(attempt, 0.05, 1.0)
                if (not (e.retriable or isinstance(e, NoClusterError))
                        or time.monotonic() + pause >= deadline):
                    raise
                time.sleep(pause)

    # -- replication ------------------------------------------------------------------------------

    def describe_replicas(self, name: str) -> list[dict[str, Any]]:
        """What every live replica of topic ``name`` reports: broker, role, leader epoch,
        log start and end, high watermark (and a leader's view of its followers)."""
        return self._controller().describe_replicas(validate_topic_name(name))

    def elect_leaders(self, names: str | list[str] | None = None) -> dict[str, list[int]]:
        """Preferred-leader election: each partition whose first replica is alive and in
        sync is led by it again (after failovers moved leaderships). Returns the partitions
        that moved, per topic."""
        topics = None if names is None else topic_names(names)
        before = {t["name"]: [p["leader"] for p in t["partitions"]]
                  for t in self.describe_topics(topics)}
        self._change(lambda: self._controller().elect_leaders(topics))
        # From the states, not the answer: a repeat after a controller restart mid-call
        # finds nothing left to move, though the first attempt moved partitions.
        moved = {}
        for t in self.describe_topics(topics):
            changed = [p["partition"] for p in t["partitions"]
                       if p["leader"] == p["replicas"][0]
                       and before[t["name"]][p["partition"]] != p["leader"]]
            if changed:
                moved[t["name"]] = changed
        return moved

    def reassign_partitions(self, name: str, assignment: dict[int, list[int]]
                            ) -> dict[str, Any]:
        """Move partitions of ``name`` to other brokers while producers keep writing:
        ``{partition: [broker ids]}``, the first the preferred leader. New replicas copy the
        leader; once they are in sync, leadership moves if it must and the old replicas are
        removed. Returns at once; ``describe_topic`` shows the move (``target``) until done."""
        check_user_topic(name)
        if not isinstance(assignment, dict) or not assignment:
            raise InvalidArgumentError(f"assignment must be a non-empty dict of partition to "
                                       f"broker ids, got {short_repr(assignment)}")
        targets = {}
        for partition, brokers in assignment.items():
            check_int("partition", partition, 0, INT32_MAX)
            if not isinstance(brokers, list | tuple) or not brokers:
                raise InvalidArgumentError(f"partition {partition}: a non-empty list of broker "
                                           f"ids, got {short_repr(brokers)}")
            targets[partition] = [check_int("broker id", b, 0, INT32_MAX) for b in brokers]
        return self._change(lambda: self._controller().reassign_partitions(name, targets))

    # -- balancing -------------------------------------------------------------------------------

    def plan_balance(self, remove: Iterable[int] = ()) -> dict[str, Any]:
        """The controller's plan to even replicas, preferred leaders and bytes over the live
        brokers, emptying the brokers of ``remove`` (docs/balancing.md); nothing changes.
        ``{"moves": [{"topic", "partition", "replicas", "target", "bytes", ...}], "bytes",
        "before" and "after": {broker: {"replicas", "leaders", "bytes"}}, "skipped": [why]}``.
        UnknownBrokerError names brokers the cluster never had; ReassignmentInProgressError
        (retriable) while partitions are being moved.

        >>> plan = admin.plan_balance()
        >>> admin.execute_balance(plan)
        """
        return self._controller().balance_plan(_broker_ids("remove", remove))

    def execute_balance(self, plan: Mapping[str, Any] | None = None, *,
                        remove: Iterable[int] = (), wait: bool = True,
                        timeout_s: float | None = None, poll_s: float = 1.0,
                        progress: Callable[[dict[str, Any]], None] | None = None
                        ) -> dict[str, Any]:
        """Carry out ``plan`` (from :meth:`plan_balance`; None: a new plan emptying
        ``remove``): its new replicas copy their leaders within the throttle
        (``replication.throttled.rate``) while producers go on, the old ones go, and the
        preferred leaders are elected. StaleBalancePlanError, with nothing started, if the
        cluster changed since the plan was made. With ``wait``, returns once every move is
        done, calling ``progress`` with the controller's status (:meth:`balance_status`)
        every ``poll_s``; RequestTimeoutError after ``timeout_s`` (None: no limit; the moves
        go on). Returns the plan."""
        removed = _broker_ids("remove", remove)
        if plan is None:
            plan = self.plan_balance(removed)
        elif not isinstance(plan, Mapping) or not isinstance(plan.get("moves"), list):
            raise InvalidArgumentError(f"plan must be what plan_balance returned, got "
                                       f"{short_repr(plan)}")
        else:
            removed = _broker_ids("remove", plan.get("remove", removed))
        check_timeout("timeout_s", timeout_s)
        if not check_timeout("poll_s", poll_s):
            raise InvalidArgumentError(f"poll_s must be a number of seconds > 0, got "
                                       f"{short_repr(poll_s)}")
        check_bool("wait", wait)
        moves = [{k: m[k] for k in ("topic", "partition", "replicas", "target")}
                 for m in plan["moves"]]
        if moves:
            self._change(lambda: self._controller().balance_execute(moves, removed),
                         done=lambda e: isinstance(e, ReassignmentInProgressError))
        if wait and moves:
            self._wait_balanced({(m["topic"], m["partition"]) for m in moves}, timeout_s,
                                poll_s, progress)
        return dict(plan)

    def balance_status(self) -> dict[str, Any]:
        """The partitions being moved, with the bytes their new replicas hold and must hold,
        and those moved by a balance whose preferred leader is still to be elected."""
        return self._controller().balance_status()

    def _wait_balanced(self, moved: set[tuple[str, int]], timeout_s: float | None,
                       poll_s: float, progress: Callable[[dict[str, Any]], None] | None
                       ) -> None:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            status = self.balance_status()
            if progress is not None:
                progress(status)
            left = {(p["topic"], p["partition"])
                    for p in [*status["moving"], *status["leaders_pending"]]} & moved
            if not left:
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise RequestTimeoutError(f"the balance was not done within {timeout_s:g} s: "
                                          f"{len(left)} partitions still moving (they go on)")
            time.sleep(poll_s)

    def cluster_status(self) -> dict[str, Any]:
        return self._controller().cluster_status()

    # -- draining and restarting brokers (docs/operations.md) -------------------------------------

    def drain_broker(self, broker: int, force: bool = False, timeout_s: float = 60.0
                     ) -> dict[str, Any]:
        """Controlled shutdown of ``broker``, short of stopping it: the partitions it leads
        get other in-sync leaders (waiting up to ``timeout_s`` for their replicas to take
        them), then it leaves every ISR; it leads nothing until restarted or resumed.
        Refused before anything changes with UnknownBrokerError, or LastInSyncReplicaError
        where it is a partition's last live in-sync replica (unless ``force``);
        DrainTimeoutError if the replicas were slower than ``timeout_s`` (unless
        ``force``). Returns the partitions ``moved``, ``left_isr`` and ``still_leading``.

        >>> Admin().drain_broker(2)["moved"]
        ['pageviews-1', 'pageviews-4']
        """
        check_int("broker id", broker, 0, INT32_MAX)
        check_bool("force", force)
        timeout_s = _positive("timeout_s", timeout_s)
        # Safe to repeat: a drained broker's second drain changes nothing.
        return self._change(lambda: self._controller().drain_broker(broker, force, timeout_s))

    def stop_broker(self, broker: int) -> dict[str, Any]:
        """Stop a drained broker's actors; its node serves no broker until it leaves Ray
        (``ray stop`` there) or :meth:`resume_broker`. IllegalStateError if not drained."""
        return self._controller().stop_broker(check_int("broker id", broker, 0, INT32_MAX))

    def restart_broker(self, broker: int, timeout_s: float = 120.0) -> dict[str, Any]:
        """Restart a drained broker's actors on its node and wait (up to ``timeout_s``)
        until its new process is registered; it then catches up as a follower.
        IllegalStateError if not drained."""
        check_int("broker id", broker, 0, INT32_MAX)
        return self._controller().restart_broker(broker, _positive("timeout_s", timeout_s))

    def resume_broker(self, broker: int) -> dict[str, Any]:
        """Undo a drain (or a stop): the broker may lead and join ISRs again."""
        check_int("broker id", broker, 0, INT32_MAX)
        return self._change(lambda: self._controller().resume_broker(broker))

    def stop_brokers(self, brokers: Iterable[int], force: bool = False,
                     timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """Drain every broker of ``brokers`` (as :meth:`drain_broker`), then stop them all:
        what ``raylog cluster stop-node`` does before ``ray stop``. All or nothing: a
        refused drain resumes the brokers drained before it, stops none, and is raised.
        Returns each drain's answer, with ``stopped``."""
        chosen = [check_int("broker id", b, 0, INT32_MAX) for b in brokers]
        check_bool("force", force)
        return stop_brokers(self._controller(), chosen, force, _positive("timeout_s", timeout_s))

    def wait_in_sync(self, timeout_s: float = 300.0) -> None:
        """Wait until every partition has a live leader and all its replicas in the ISR on
        live brokers, and no broker is drained; RequestTimeoutError naming the rest."""
        wait_in_sync(self._controller(), _positive("timeout_s", timeout_s))

    def roll(self, brokers: Iterable[int] | None = None,
             timeouts: RollTimeouts | None = None,
             on_step: Callable[[str, int], None] | None = None) -> list[int]:
        """Rolling restart of ``brokers`` (default: every live broker), one at a time:
        drain, restart, wait until every partition is back in sync, preferred leaders back
        (raylog/client/operations.py). Refused before it begins with UnknownBrokerError
        or OfflinePartitionsError; stops at the first problem with RollStoppedError.
        Returns the brokers restarted, in order.

        >>> Admin().roll()
        [0, 1, 2]
        """
        chosen = None if brokers is None else [check_int("broker id", b, 0, INT32_MAX)
                                                for b in brokers]
        return roll(self._controller(), chosen, timeouts or RollTimeouts(), on_step=on_step)

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _positive(what: str, seconds: object) -> float:
    """A bounded wait: a finite number of seconds > 0."""
    if check_timeout(what, seconds) is None or seconds == 0:
        raise InvalidArgumentError(f"{what} must be a number of seconds > 0, got "
                                   f"{short_repr(seconds)}")
    return float(seconds)
