"""The mirror: keeps the target's remote topics in step with the source's topics.

:class:`Mirror` runs in a driver process of the target cluster. Every
``refresh_interval_ms`` it lists the source's topics (over Flight) and, for each one the
filter wants, creates ``<alias>.<topic>`` on the target or brings its partition count and
configs in line, and starts a :class:`.copier.PartitionCopier` thread per partition not
copied yet. Every ``checkpoint_interval_ms`` it writes offset syncs and the source groups'
translated offsets to the checkpoint topic (:mod:`.checkpoints`). A topic deleted on the
source, or deleted and created again, is reported and its copy kept as it is.
"""

from __future__ import annotations

import dataclasses
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from raylog.client.admin import Admin
from raylog.client.connection import RaylogCluster
from raylog.errors import RaylogError, SourceAuthenticationError, TopicExistsError
from raylog.mirror.checkpoints import CheckpointStore
from raylog.mirror.copier import CopyOptions, PartitionCopier, PartitionLink
from raylog.mirror.flight_client import SourceClient
from raylog.mirror.naming import (
    TopicFilter,
    config_changes,
    copied_configs,
    remote_topic,
    source_topic,
)
from raylog.mirror.retry import Backoff, Retrying
from raylog.mirror.status import MirrorStatus
from raylog.mirror.target import resume_at
from raylog.mirror.translation import group_key, group_value, sync_key, sync_value


@dataclasses.dataclass(frozen=True)
class MirrorConfig:
    alias: str
    target_alias: str | None = None
    topics: Sequence[str] = ()            # allow patterns (none: every topic)
    exclude: Sequence[str] = ()           # deny patterns
    groups: Sequence[str] = ()            # groups to checkpoint (none: every group)
    once: bool = False                    # copy up to the source's end at start, then stop
    replication_factor: int | None = None  # of new remote topics (None: the source's, at
                                          # most the target's live brokers)
    checkpoint_interval_ms: int = 5_000
    refresh_interval_ms: int = 5_000
    copy: CopyOptions = dataclasses.field(default_factory=CopyOptions)


class Mirror:
    """One mirror from a source endpoint into the target cluster this process is a driver
    of. :meth:`run` blocks until :meth:`stop` (or, with ``once``, until everything up to
    the source's end is copied) and returns an exit status: 0, or 1 if a partition's copy
    failed."""

    def __init__(self, source: SourceClient, cluster: RaylogCluster, config: MirrorConfig,
                 report: Callable[[str], None], status: MirrorStatus | None = None) -> None:
        self.source, self.cluster, self.config, self.report = source, cluster, config, report
        self.status = status or MirrorStatus()
        self.filter = TopicFilter(config.topics, config.exclude, config.alias,
                                  config.target_alias)
        self._groups = [re.compile(p) for p in config.groups]
        self.admin = Admin(cluster=cluster)
        self._stop = threading.Event()
        self._retrying = Retrying(Backoff(), report, config.copy.give_up_after_s,
                                  self._stop.is_set, sleep=self._stop.wait)
        self.links: dict[tuple[str, int], PartitionLink] = {}
        self.copiers: dict[tuple[str, int], tuple[PartitionCopier, threading.Thread]] = {}
        self._topic_ids: dict[str, str] = {}
        self._gone: set[str] = set()
        self._written: dict[bytes, bytes] = {}
        self._failed = False  # stopped by a failure that is not a partition's
        self._said: set[str] = set()  # remote topics reported with more partitions
        self._store = CheckpointStore(cluster, config.alias)

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self) -> int:
        config = self.config
        self._retrying.call("creating the checkpoint topic on the target", self._store.ensure)
        loaded = self._retrying.call("reading the checkpoints", self._store.load)
        for (topic, partition), points in loaded.syncs.items():
            self._link(topic, partition).syncs.merge(points)
        topics = self._retrying.call("listing the source's topics", self.source.topics)
        self._sync(topics)
        now = time.monotonic()
        next_checkpoint = now + config.checkpoint_interval_ms / 1000
        next_refresh = now + config.refresh_interval_ms / 1000
        try:
            while not self._stop.is_set():
                if config.once and all(not t.is_alive() for _, t in self.copiers.values()):
                    break
                now = time.monotonic()
                if now >= next_checkpoint:
                    self._checkpoint()
                    next_checkpoint = now + config.checkpoint_interval_ms / 1000
                if not config.once and now >= next_refresh:
                    self._refresh()
                    next_refresh = now + config.refresh_interval_ms / 1000
                self._stop.wait(min(next_checkpoint, next_refresh, now + 0.2) - now)
        finally:
            self._stop.set()
            for _, thread in self.copiers.values():
                thread.join()
            self._checkpoint()
            self._store.close()
        failed = [c for c, _ in self.copiers.values() if c.outcome.startswith("failed")]
        return 1 if failed or self._failed else 0

    @property
    def copy_seconds(self) -> float:
        """From the first copier's start to the last one's end: the copy itself, without
        joining the clusters or reading checkpoints."""
        copiers = [c for c, _ in self.copiers.values() if c.finished_at]
        if not copiers:
            return 0.0
        return max(c.finished_at for c in copiers) - min(c.started_at for c in copiers)

    # -- topics ----------------------------------------------------------------------------------

    def _refresh(self) -> None:
        try:
            self._sync(self.source.topics())
        except SourceAuthenticationError as e:
            self.report(f"listing the source's topics: {e}; stopping")
            self._failed = True
            self.stop()
        except RaylogError as e:
            self.report(f"listing the source's topics: {e}; trying again later")

    def _sync(self, topics: list[dict[str, Any]]) -> None:
        """Create or update the remote topics of the wanted source topics; copy each of
        their partitions; report topics that went away."""
        present = {t["name"] for t in topics}
        for name in sorted(set(self._topic_ids) - present - self._gone):
            self._gone.add(name)
            self.report(f"source topic {name} was deleted; its copy "
                        f"{remote_topic(self.config.alias, name)} keeps what was copied")
        try:
            existing = self._remote_topics()
        except RaylogError as e:
            self.report(f"describing the target's topics: {e}; trying again later")
            return
        for topic in topics:
            name = topic["name"]
            if name in self._gone or not self.filter.wants(name):
                continue
            known = self._topic_ids.setdefault(name, topic["topic_id"])
            if known != topic["topic_id"]:
                self._gone.add(name)
                self.report(f"source topic {name} was deleted and created again; its copy "
                            f"{remote_topic(self.config.alias, name)} keeps what was copied "
                            f"from the old one and the new one is not copied")
                continue
            ends: list[int] | None = None  # with ``once``: where each partition's copy ends
            try:
                self._retrying.call(f"preparing the copy of {name}",
                                    lambda t=topic: self._prepare(t, existing))
                if self.config.once:
                    ends = [end for _, end in self._retrying.call(
                        f"asking the source for {name}'s end",
                        lambda n=name: self.source.offsets(n))]
            except RaylogError as e:
                self.report(f"cannot copy {name}: {e}")
                continue
            new = [p for p in range(topic["partitions"]) if (name, p) not in self.copiers]
            if new:
                self.report(f"copying {name} into {remote_topic(self.config.alias, name)}: "
                            f"partitions {', '.join(map(str, new))}")
            for partition in new:
                if ends is None:
                    self._start(name, partition, None)
                elif partition < len(ends):  # else added since the list: not in this copy
                    self._start(name, partition, ends[partition])

    def _remote_topics(self) -> dict[str, dict[str, Any]]:
        """The target's topics of this alias, described (two requests for all of them)."""
        names = [n for n in self.admin.list_topics()
                 if source_topic(self.config.alias, n) is not None]
        return {t["name"]: t for t in self.admin.describe_topics(names)} if names else {}

    def _prepare(self, topic: dict[str, Any], existing: dict[str, dict[str, Any]]) -> None:
        """The remote topic exists with at least the source's partitions and its configs."""
        name = remote_topic(self.config.alias, topic["name"])
        configs = copied_configs(topic["configs"])
        described = existing.get(name)
        if described is None:
            try:
                self.admin.create_topic(name, topic["partitions"],
                                        self._replication_factor(topic), configs)
                self.report(f"created {name} with {topic['partitions']} partition(s)")
                return
            except TopicExistsError:
                described = self.admin.describe_topic(name)
        if len(described["partitions"]) < topic["partitions"]:
            self.admin.add_partitions(name, topic["partitions"])
            self.report(f"{name} now has {topic['partitions']} partitions, as its source has")
        elif len(described["partitions"]) > topic["partitions"] and name not in self._said:
            self._said.add(name)  # once: it stays so
            self.report(f"{name} has more partitions than its source "
                        f"({len(described['partitions'])} > {topic['partitions']})")
        updates, deletes = config_changes(topic["configs"], described["configs"])
        if updates or deletes:
            self.admin.alter_configs(name, updates, deletes)
            self.report(f"{name}: configs follow the source (set {sorted(updates)}, deleted "
                        f"{deletes})")

    def _replication_factor(self, topic: dict[str, Any]) -> int:
        if self.config.replication_factor is not None:
            return self.config.replication_factor
        live = sum(1 for b in self.admin.cluster_status()["brokers"] if b["alive"])
        return max(1, min(topic["replication_factor"], live))

    def _link(self, topic: str, partition: int) -> PartitionLink:
        key = (topic, partition)
        if key not in self.links:
            self.links[key] = PartitionLink(topic, remote_topic(self.config.alias, topic),
                                            partition)
        return self.links[key]

    def _start(self, topic: str, partition: int, end: int | None) -> None:
        copier = PartitionCopier(self.source, self.cluster, self._link(topic, partition),
                                 self.config.copy, self.status, self.report, self._stop, end)
        thread = threading.Thread(target=copier.run, name=f"raylog-mirror-{copier.name}",
                                  daemon=True)
        self.copiers[(topic, partition)] = (copier, thread)
        thread.start()

    # -- checkpoints -----------------------------------------------------------------------------

    def _translate(self, link: PartitionLink, source_offset: int) -> int | None:
        """Where a group at ``source_offset`` resumes on the target: from the syncs this
        mirror knows, else read from the target's batches (and kept)."""
        with link.lock:
            found = link.syncs.translate(source_offset)
        if found is not None:
            return found
        try:
            found = resume_at(self.cluster, link.target_topic, link.partition, source_offset,
                              self._retrying)
        except RaylogError as e:
            self.report(f"translating offset {source_offset} of {link.source_topic}-"
                        f"{link.partition}: {e}")
            return None
        if found is not None:
            with link.lock:
                link.syncs.learn(source_offset, found)
        return found

    def _checkpoint(self) -> None:
        """Write the syncs and group offsets that changed since the last checkpoint."""
        records = {}
        for (topic, partition), link in list(self.links.items()):
            with link.lock:
                if link.syncs.points:
                    records[sync_key(topic, partition)] = sync_value(link.syncs)
        try:
            groups = self.source.group_offsets(sorted(self._topic_ids))
        except RaylogError as e:
            self.report(f"reading the source's group offsets: {e}; trying again later")
            groups = {}
        for group_id, entries in sorted(groups.items()):
            if self._groups and not any(p.fullmatch(group_id) for p in self._groups):
                continue
            translated = {}
            for topic, partition, committed in entries:
                link = self.links.get((topic, partition))
                target = None if link is None else self._translate(link, committed)
                if target is not None:
                    translated[(topic, partition)] = (committed, target)
            if translated:
                records[group_key(group_id)] = group_value(group_id, translated)
        changed = [(k, v) for k, v in records.items() if self._written.get(k) != v]
        if not changed:
            return
        try:
            self._store.write(changed)
        except RaylogError as e:
            self.report(f"writing checkpoints: {e}; trying again later")
            return
        self._written.update(changed)
