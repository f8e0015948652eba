"""Who a quota applies to, which quotas there are, and which quota a client gets.

An entity names a user, a client id, or both (Kafka's ``--entity-type users`` and
``clients``); either part may be :data:`DEFAULT`, the default of every user or client id
that has no quota of its own (Kafka's ``--entity-default``). A client with user U (its
principal's name on a Kafka listener; native raylog clients have none) and client id C
gets, for each quota key on its own, the first of these entities that sets it (Kafka's
order, most specific first)::

    user=U, client-id=C          user=<default>, client-id=C        client-id=C
    user=U, client-id=<default>  user=<default>, client-id=<default> client-id=<default>
    user=U                       user=<default>

Clients the chosen entity does not tell apart share one rate: a quota of ``user=U`` holds
all of U's client ids together; one of ``client-id=<default>`` holds each client id to it
on its own (:func:`resolve` says which rate).

Quotas (:data:`QUOTA_KEYS`): ``producer_byte_rate`` and ``consumer_byte_rate`` (bytes per
second, whole numbers) and ``request_percentage`` (the share of one request handler's time,
in percent, as Kafka's). :func:`check_quotas` refuses anything else with InvalidQuotaError.

Plain Python.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

from raylog.errors import InvalidQuotaError
from raylog.util.arguments import MAX_ID_LENGTH, short_repr, unknown_name

DEFAULT = "<default>"  # the default user or client id (Kafka's entity name null)
USER = "user"
CLIENT_ID = "client-id"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)
_WHOLE = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE)
MAX_BYTE_RATE = 2**63 - 1  # Kafka's long


@dataclasses.dataclass(frozen=True)
class QuotaEntity:
    """``user`` and ``client_id``: a name, :data:`DEFAULT`, or None (not part of it).

    >>> QuotaEntity(client_id="loader")
    QuotaEntity(user=None, client_id='loader')
    """

    user: str | None = None
    client_id: str | None = None

    def __post_init__(self) -> None:
        if self.user is None and self.client_id is None:
            raise InvalidQuotaError("a quota entity names a user, a client id or both "
                                    "(or their defaults)")
        for kind, name in ((USER, self.user), (CLIENT_ID, self.client_id)):
            if name is not None and (not isinstance(name, str) or not name
                                     or len(name) > MAX_ID_LENGTH):
                raise InvalidQuotaError(f"a quota's {kind} must be a non-empty string of at "
                                        f"most {MAX_ID_LENGTH} characters, got "
                                        f"{short_repr(name)}")

    def to_dict(self) -> dict[str, str | None]:
        """As Kafka's entity: the parts it has, a default as None."""
        out: dict[str, str | None] = {}
        if self.user is not None:
            out[USER] = None if self.user == DEFAULT else self.user
        if self.client_id is not None:
            out[CLIENT_ID] = None if self.client_id == DEFAULT else self.client_id
        return out

    @classmethod
    def from_dict(cls, parts: Mapping[str, str | None]) -> QuotaEntity:
        """From Kafka's entity (``{"user": "alice", "client-id": None}``: None the
        default); InvalidQuotaError for another entity type."""
        unknown = [k for k in parts if k not in (USER, CLIENT_ID)]
        if unknown:
            raise InvalidQuotaError(unknown_name("quota entity type", unknown[0],
                                                 (USER, CLIENT_ID)))
        return cls(**{field: DEFAULT if parts[key] is None else parts[key]
                      for key, field in ((USER, "user"), (CLIENT_ID, "client_id"))
                      if key in parts})

    def sort_key(self) -> tuple[str, str]:
        return self.user or "", self.client_id or ""

    def __str__(self) -> str:
        return ",".join(f"{k}={DEFAULT if v is None else v}"
                        for k, v in self.to_dict().items())


def check_quotas(quotas: Mapping[str, Any]) -> dict[str, float]:
    """``quotas`` checked: known keys, positive finite values, byte rates whole. The values
    as stored (int byte rates, float percentages); InvalidQuotaError naming the first bad
    one."""
    if not isinstance(quotas, Mapping):
        raise InvalidQuotaError(f"quotas must be a mapping of quota key to value, got "
                                f"{short_repr(quotas)}")
    out: dict[str, float] = {}
    for key, value in quotas.items():
        out[key] = check_quota(key, value)
    return out


def check_quota(key: object, value: object) -> float:
    check_keys([key])
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or value <= 0:
        raise InvalidQuotaError(f"quota {key} must be a number > 0, got {short_repr(value)}")
    if key in _WHOLE:
        if value != int(value) or value > MAX_BYTE_RATE:
            raise InvalidQuotaError(f"quota {key} is bytes per second, a whole number of at "
                                    f"most {MAX_BYTE_RATE}, got {short_repr(value)}")
        return int(value)
    return float(value)


def check_keys(keys: Iterable[object]) -> None:
    for key in keys:
        if key not in QUOTA_KEYS:
            raise InvalidQuotaError(unknown_name("quota key", key, QUOTA_KEYS))


def candidates(user: str | None, client_id: str) -> list[QuotaEntity]:
    """The entities that may hold a quota of a client, in the order they are looked at
    (the module docstring's)."""
    # (an empty client id, which Kafka clients may send, has only the default's quotas)
    named = [client_id] if client_id else []
    found = []
    if user:
        for u in (user, DEFAULT):
            found += [QuotaEntity(u, c) for c in (*named, DEFAULT)] + [QuotaEntity(u)]
    return found + [QuotaEntity(client_id=c) for c in (*named, DEFAULT)]


def resolve(quotas: Mapping[QuotaEntity, Mapping[str, float]], key: str, user: str | None,
            client_id: str) -> tuple[float, tuple[str, str]] | None:
    """The ``key`` quota of a client (user ``user``, None for none, and ``client_id``)
    and the rate it is measured against: (bound, (user, client id) naming the rate: a
    part the entity does not tell apart is ""). None when no entity sets it."""
    for entity in candidates(user, client_id):
        bound = quotas.get(entity, {}).get(key)
        if bound is not None:
            return bound, ("" if entity.user is None else user or "",
                           "" if entity.client_id is None else client_id)
    return None


def to_wire(quotas: Mapping[QuotaEntity, Mapping[str, float]]) -> list[dict[str, Any]]:
    """Quotas as plain data (the controller's answers, its metadata log):
    ``[{"entity": {"user": "alice"}, "quotas": {"producer_byte_rate": 1048576}}, ...]``,
    in entity order."""
    return [{"entity": entity.to_dict(), "quotas": dict(values)}
            for entity, values in sorted(quotas.items(), key=lambda e: e[0].sort_key())]


def from_wire(entries: Iterable[Mapping[str, Any]]) -> dict[QuotaEntity, dict[str, float]]:
    return {QuotaEntity.from_dict(e["entity"]): dict(e["quotas"]) for e in entries}


def check_change(entry: Mapping[str, Any]) -> tuple[QuotaEntity, dict[str, float], list[str]]:
    """One change of quotas, ``{"entity": {"client-id": "a"}, "set": {key: value},
    "delete": [key]}`` (an entity as Kafka's: None is the default), checked: (entity,
    values to set, keys to delete); InvalidQuotaError for an unknown key or entity type, a
    value that is not a positive number, a key both set and deleted."""
    if not isinstance(entry, Mapping) or set(entry) - {"entity", "set", "delete"} \
            or "entity" not in entry:
        raise InvalidQuotaError(f"a quota change is {{'entity', 'set', 'delete'}}, got "
                                f"{short_repr(entry)}")
    entity = QuotaEntity.from_dict(entry["entity"])
    updates = check_quotas(entry.get("set") or {})
    deletes = list(entry.get("delete") or [])
    check_keys(deletes)
    both = sorted(set(updates) & set(deletes))
    if both:
        raise InvalidQuotaError(f"cannot both set and delete {', '.join(both)} of {entity}")
    return entity, updates, deletes


MATCH_TYPES = ("exact", "default", "any")  # Kafka's match_type 0, 1, 2


def matching(quotas: Mapping[QuotaEntity, Mapping[str, float]],
             components: Iterable[tuple[str, str, str | None]],
             strict: bool = False) -> dict[QuotaEntity, dict[str, float]]:
    """The quotas whose entity matches every component, as Kafka's DescribeClientQuotas:
    ``(entity type, match type, name)`` where the match type is "exact" (that name),
    "default" (the type's default) or "any" (any name or the default, but the type must be
    in the entity). ``strict``: the entity has no other type. No components and not strict:
    every quota."""
    wanted = []
    for entity_type, match_type, name in components:
        if entity_type not in (USER, CLIENT_ID):
            raise InvalidQuotaError(unknown_name("quota entity type", entity_type,
                                                 (USER, CLIENT_ID)))
        if match_type not in MATCH_TYPES:
            raise InvalidQuotaError(unknown_name("quota match type", match_type, MATCH_TYPES))
        if match_type == "exact" and not name:
            raise InvalidQuotaError(f"an exact match of {entity_type} needs a name")
        wanted.append((entity_type, match_type, name))
    if len({t for t, _, _ in wanted}) < len(wanted):
        raise InvalidQuotaError("each entity type may be matched once")
    out = {}
    for entity, values in quotas.items():
        parts = {USER: entity.user, CLIENT_ID: entity.client_id}
        ok = all(parts[t] is not None and (m == "any" or parts[t] == (DEFAULT if m == "default"
                                                                        else n))
                 for t, m, n in wanted)
        if ok and strict:
            ok = {t for t, v in parts.items() if v is not None} == {t for t, _, _ in wanted}
        if ok:
            out[entity] = dict(values)
    return out
