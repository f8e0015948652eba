"""Kafka's ACLs: the bindings, their records, and the authorizer that decides by them.

A binding (:class:`AclBinding`) says that a principal (``User:alice``, or ``User:*`` for
everyone) from a host (``*`` or an address) is allowed or denied an operation on resources
of one type (TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID) named by a pattern: LITERAL (the name
itself; ``*`` matches every name) or PREFIXED (every name starting with it).

:class:`Authorizer` answers "may this principal, from this host, do this operation on this
resource?" with Kafka's rules:

- a super user may do everything;
- a DENY binding that matches beats any ALLOW;
- an ALLOW binding that matches allows; ALL stands for every operation, and an allowed
  READ, WRITE, DELETE or ALTER implies DESCRIBE, an allowed ALTER_CONFIGS implies
  DESCRIBE_CONFIGS (a DENY of DESCRIBE does not deny READ);
- nothing matching: denied, unless the resource has no binding at all and
  ``allow_if_no_acl`` is set (Kafka's ``allow.everyone.if.no.acl.found``; off by default).

Records of the compacted topic ``__raylog_acls``: one per binding, its key the binding's
JSON (so adding a binding twice writes one, and a tombstone of that key removes it), its
value the same JSON. Plain Python, no I/O; the authorizer locks, so it is read from any
thread while a follower applies records.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import threading
from collections.abc import Iterable

from raylog.errors import CorruptRecordError

ACLS_TOPIC = "__raylog_acls"
ACLS_TOPIC_CONFIGS = {"cleanup.policy": "compact"}
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource's name, as Kafka's


class ResourceType(enum.IntEnum):
    """Kafka's codes (ResourceType in the Acl APIs)."""
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5


class PatternType(enum.IntEnum):
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class Permission(enum.IntEnum):
    ANY = 1
    DENY = 2
    ALLOW = 3


# an ALLOW of any of these operations allows the key's too
_IMPLIED_BY = {
    Operation.DESCRIBE: {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER},
    Operation.DESCRIBE_CONFIGS: {Operation.ALTER_CONFIGS},
}


@dataclasses.dataclass(frozen=True)
class Resource:
    type: ResourceType
    name: str

    def __str__(self) -> str:
        return f"{self.type.name}:{self.name}"


CLUSTER = Resource(ResourceType.CLUSTER, CLUSTER_NAME)


@dataclasses.dataclass(frozen=True)
class AclBinding:
    principal: str
    host: str
    resource_type: ResourceType
    resource_name: str
    pattern: PatternType
    operation: Operation
    permission: Permission

    def __post_init__(self) -> None:
        for name, kind in (("resource_type", ResourceType), ("pattern", PatternType),
                           ("operation", Operation), ("permission", Permission)):
            object.__setattr__(self, name, kind(getattr(self, name)))
        if self.pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise ValueError(f"a binding's pattern is LITERAL or PREFIXED, not "
                             f"{self.pattern.name}")
        for name, value in (("resource_type", self.resource_type),
                            ("operation", self.operation), ("permission", self.permission)):
            if value.name == "ANY":
                raise ValueError(f"a binding's {name} must not be ANY")
        if ":" not in self.principal:
            raise ValueError(f"principal {self.principal!r} is not type:name")
        if not self.resource_name:
            raise ValueError("a binding's resource name must not be empty")

    def matches_resource(self, resource: Resource) -> bool:
        if self.resource_type != resource.type:
            return False
        if self.pattern == PatternType.PREFIXED:
            return resource.name.startswith(self.resource_name)
        return self.resource_name in (WILDCARD, resource.name)

    def matches(self, principal: str, host: str, resource: Resource) -> bool:
        return (self.principal in (WILDCARD_PRINCIPAL, principal)
                and self.host in (WILDCARD, host) and self.matches_resource(resource))

    def grants(self, operation: Operation) -> bool:
        """Whether this binding, an ALLOW, covers ``operation`` (ALL; implied ones)."""
        return (self.operation in (Operation.ALL, operation)
                or self.operation in _IMPLIED_BY.get(operation, ()))

    def denies(self, operation: Operation) -> bool:
        return self.operation in (Operation.ALL, operation)

    def to_json(self) -> dict:
        return {"principal": self.principal, "host": self.host,
                "resource_type": self.resource_type.name, "resource_name": self.resource_name,
                "pattern": self.pattern.name, "operation": self.operation.name,
                "permission": self.permission.name}

    @classmethod
    def from_json(cls, fields: dict) -> AclBinding:
        return cls(fields["principal"], fields["host"],
                   ResourceType[fields["resource_type"]], fields["resource_name"],
                   PatternType[fields["pattern"]], Operation[fields["operation"]],
                   Permission[fields["permission"]])

    def __str__(self) -> str:
        return (f"{self.permission.name} {self.principal} from {self.host} "
                f"{self.operation.name} on {self.resource_type.name}:{self.pattern.name}:"
                f"{self.resource_name}")


def record_key(binding: AclBinding) -> bytes:
    return json.dumps(binding.to_json(), sort_keys=True).encode()


def encode(binding: AclBinding) -> tuple[bytes, bytes]:
    """The (key, value) of the record holding ``binding``."""
    key = record_key(binding)
    return key, key


def tombstone(binding: AclBinding) -> tuple[bytes, None]:
    return record_key(binding), None


def decode(key: bytes, value: bytes | None) -> tuple[AclBinding, bool]:
    """(binding, present?) of a record; CorruptRecordError if it is not one of ours."""
    try:
        binding = AclBinding.from_json(json.loads(bytes(key)))
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptRecordError(f"not an ACL record: {e}") from e
    return binding, value is not None


@dataclasses.dataclass(frozen=True)
class AclFilter:
    """Which bindings DescribeAcls/DeleteAcls mean: None (or ANY) in a field matches every
    value; pattern MATCH matches the bindings that would apply to the named resource."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and b.resource_type != self.resource_type:
            return False
        if self.pattern == PatternType.MATCH:
            if self.resource_name is not None and not b.matches_resource(
                    Resource(b.resource_type, self.resource_name)):
                return False
        else:
            if self.pattern != PatternType.ANY and b.pattern != self.pattern:
                return False
            if self.resource_name is not None and b.resource_name != self.resource_name:
                return False
        return ((self.principal is None or b.principal == self.principal)
                and (self.host is None or b.host == self.host)
                and (self.operation == Operation.ANY or b.operation == self.operation)
                and (self.permission == Permission.ANY or b.permission == self.permission))


class Authorizer:
    """The bindings in force and the decisions by them. Thread-safe (one lock)."""

    def __init__(self, super_users: Iterable[str] = (), allow_if_no_acl: bool = False,
                 bindings: Iterable[AclBinding] = ()) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._lock = threading.Lock()
        self._bindings: set[AclBinding] = set(bindings)

    def add(self, binding: AclBinding) -> None:
        with self._lock:
            self._bindings.add(binding)

    def remove(self, binding: AclBinding) -> None:
        with self._lock:
            self._bindings.discard(binding)

    def apply(self, key: bytes, value: bytes | None) -> None:
        """Apply one record of ``__raylog_acls``."""
        binding, present = decode(key, value)
        (self.add if present else self.remove)(binding)

    def bindings(self, acl_filter: AclFilter | None = None) -> list[AclBinding]:
        with self._lock:
            found = list(self._bindings)
        if acl_filter is not None:
            found = [b for b in found if acl_filter.matches(b)]
        return sorted(found, key=record_key)

    def has_acls(self) -> bool:
        with self._lock:
            return bool(self._bindings)

    def authorize(self, principal: object, host: str, operation: Operation,
                  resource: Resource) -> bool:
        """Whether ``principal`` (a Principal or ``type:name``) from ``host`` may do
        ``operation`` on ``resource``."""
        who = str(principal)
        if who in self.super_users:
            return True
        with self._lock:
            matching = [b for b in self._bindings if b.matches_resource(resource)]
        if not matching:
            return self.allow_if_no_acl
        mine = [b for b in matching if b.matches(who, host, resource)]
        if any(b.permission == Permission.DENY and b.denies(operation) for b in mine):
            return False
        return any(b.permission == Permission.ALLOW and b.grants(operation) for b in mine)

    def authorize_any(self, principal: object, host: str, operation: Operation,
                      resource_type: ResourceType) -> bool:
        """Whether some ALLOW lets ``principal`` do ``operation`` on some resource of
        ``resource_type`` (Kafka 3's idempotent producer check: WRITE on any topic). A
        super user may."""
        who = str(principal)
        if who in self.super_users:
            return True
        with self._lock:
            candidates = [b for b in self._bindings if b.resource_type == resource_type
                          and b.principal in (WILDCARD_PRINCIPAL, who)
                          and b.host in (WILDCARD, host)]
        denied = [d for d in candidates if d.permission == Permission.DENY
                  and d.denies(operation)]
        if any(d.pattern == PatternType.LITERAL and d.resource_name == WILDCARD
               for d in denied):
            return False  # denied on every resource of the type
        # an ALLOW counts unless a DENY of the same pattern takes it back (simpler than
        # Kafka's authorizeByResourceType, which also weighs prefixed DENYs covering it)
        taken_back = {(d.pattern, d.resource_name) for d in denied}
        return any(b.permission == Permission.ALLOW and b.grants(operation)
                   and (b.pattern, b.resource_name) not in taken_back for b in candidates)
