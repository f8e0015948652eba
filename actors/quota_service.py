"""The controller's client quotas (docs/quotas.md): stored in its metadata log, watched by
every process that enforces them.

An object the controller holds (``controller.quotas``), serving ``alter_quotas``,
``describe_quotas`` and ``watch_quotas``, given the metadata only. A change is one event per
entity (``quotas_altered``, raylog/metadata/state.py), all of one call committed together
after every entry was checked: a bad entry changes nothing. Brokers' replica hosts and Kafka
listeners keep a long ``watch_quotas`` call open (raylog/quotas/follow.py), answered the
moment a change is committed, so enforcement is local and a change is in force everywhere
within one round trip. Its event loop is the only user.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from raylog.errors import InvalidQuotaError
from raylog.metadata import state as events
from raylog.metadata.access import MetadataAccess
from raylog.quotas.entity import QuotaEntity, check_change, matching, to_wire

MAX_WATCH_S = 60.0  # a watch waits at most this long


class QuotaService:
    """Quota RPCs of the controller over ``access`` (the metadata)."""

    def __init__(self, access: MetadataAccess) -> None:
        self.access = access
        self._changed = asyncio.Event()  # set, and replaced, at every change

    async def alter_quotas(self, entries: list[dict[str, Any]],
                           validate_only: bool = False) -> None:
        """Change quotas: each entry ``{"entity": {"user": "alice", "client-id": None},
        "set": {"producer_byte_rate": 1048576}, "delete": ["request_percentage"]}`` (an
        entity as Kafka's: None is the default). Every entry is checked first
        (InvalidQuotaError: an unknown key or entity type, a value that is not a positive
        number, a key both set and deleted, an entity twice); then all are committed
        together, unless ``validate_only``. Deleting a quota that is not set is no error."""
        changes: dict[QuotaEntity, tuple[dict[str, float], list[str]]] = {}
        for entry in entries:
            entity, updates, deletes = check_change(entry)
            if entity in changes:
                raise InvalidQuotaError(f"quota entity {entity} is named twice")
            changes[entity] = (updates, deletes)
        if validate_only:
            return
        async with self.access.lock:
            state = self.access.state
            altered = []
            for entity, (updates, deletes) in changes.items():
                current = state.quotas.get(entity, {})
                merged = {k: v for k, v in current.items() if k not in deletes} | updates
                if merged != current:
                    altered.append(events.quotas_altered(entity, merged))
            if not altered:
                return
            self.access.log.commit(state, altered)
        self._changed.set()
        self._changed = asyncio.Event()

    async def describe_quotas(self, components: list[tuple[str, str, str | None]] | None = None,
                              strict: bool = False) -> list[dict[str, Any]]:
        """The quotas whose entity matches ``components`` (Kafka's DescribeClientQuotas
        filter: ``(entity type, "exact" | "default" | "any", name)``; raylog/quotas/
        entity.py's ``matching``), as ``[{"entity": {...}, "quotas": {...}}]``."""
        return to_wire(matching(self.access.state.quotas, components or [], strict))

    async def watch_quotas(self, version: int, wait_s: float) -> dict[str, Any]:
        """Every quota and their version, at once when the version is not ``version``, else
        once they change or after ``wait_s`` (at most MAX_WATCH_S)."""
        state = self.access.state
        if state.quotas_version == version:
            changed = self._changed
            with contextlib.suppress(TimeoutError):  # nothing changed: answered as it is
                await asyncio.wait_for(changed.wait(), max(0.0, min(wait_s, MAX_WATCH_S)))
        return {"version": state.quotas_version, "quotas": to_wire(state.quotas)}
