import pytest

from raylog.errors import CorruptRecordError
from raylog.kafka.auth.acls import (
    CLUSTER,
    AclBinding,
    AclFilter,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    Resource,
    ResourceType,
    decode,
    encode,
    tombstone,
)
from raylog.kafka.auth.principal import Principal

T, G, L, P = ResourceType.TOPIC, ResourceType.GROUP, PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
ALICE = "User:alice"


def acl(principal=ALICE, name="orders", op=Operation.READ, perm=ALLOW, type_=T, pattern=L,
        host="*"):
    return AclBinding(principal, host, type_, name, pattern, op, perm)


def topic(name="orders"):
    return Resource(T, name)


def test_no_acl_is_deny_by_default_and_allowed_with_the_setting():
    assert not Authorizer().authorize(ALICE, "1.2.3.4", Operation.READ, topic())
    assert Authorizer(allow_if_no_acl=True).authorize(ALICE, "h", Operation.READ, topic())


def test_allow_if_no_acl_does_not_apply_once_the_resource_has_one():
    auth = Authorizer(allow_if_no_acl=True, bindings=[acl(principal="User:bob")])
    assert not auth.authorize(ALICE, "h", Operation.READ, topic())
    assert auth.authorize(ALICE, "h", Operation.READ, topic("other"))


def test_super_users_may_do_everything():
    auth = Authorizer(super_users=["User:admin"],
                      bindings=[acl(principal="User:admin", op=Operation.ALL, perm=DENY)])
    assert auth.authorize(Principal.user("admin"), "h", Operation.DELETE, topic())
    assert auth.authorize("User:admin", "h", Operation.ALTER, CLUSTER)


def test_allow_matches_principal_operation_and_resource_only():
    auth = Authorizer(bindings=[acl()])
    assert auth.authorize(ALICE, "h", Operation.READ, topic())
    assert not auth.authorize("User:bob", "h", Operation.READ, topic())
    assert not auth.authorize(ALICE, "h", Operation.WRITE, topic())
    assert not auth.authorize(ALICE, "h", Operation.READ, topic("ordersx"))
    assert not auth.authorize(ALICE, "h", Operation.READ, Resource(G, "orders"))


def test_deny_beats_allow():
    auth = Authorizer(bindings=[acl(op=Operation.ALL), acl(op=Operation.WRITE, perm=DENY)])
    assert auth.authorize(ALICE, "h", Operation.READ, topic())
    assert not auth.authorize(ALICE, "h", Operation.WRITE, topic())


def test_wildcard_principal_deny_beats_a_named_allow():
    auth = Authorizer(bindings=[acl(), acl(principal="User:*", perm=DENY)])
    assert not auth.authorize(ALICE, "h", Operation.READ, topic())


def test_wildcard_principal_and_literal_star_resource():
    auth = Authorizer(bindings=[acl(principal="User:*", name="*")])
    assert auth.authorize("User:anyone", "h", Operation.READ, topic("x"))
    assert not auth.authorize("User:anyone", "h", Operation.READ, Resource(G, "x"))


def test_prefixed_pattern():
    auth = Authorizer(bindings=[acl(name="pay.", pattern=P, op=Operation.WRITE)])
    assert auth.authorize(ALICE, "h", Operation.WRITE, topic("pay.eu"))
    assert not auth.authorize(ALICE, "h", Operation.WRITE, topic("payments"))
    # a literal "*" is a wildcard; a prefixed "*" only matches names starting with "*"
    star = Authorizer(bindings=[acl(name="*", pattern=P)])
    assert not star.authorize(ALICE, "h", Operation.READ, topic("x"))


def test_host_must_match():
    auth = Authorizer(bindings=[acl(host="10.0.0.1")])
    assert auth.authorize(ALICE, "10.0.0.1", Operation.READ, topic())
    assert not auth.authorize(ALICE, "10.0.0.2", Operation.READ, topic())


@pytest.mark.parametrize("op", [Operation.READ, Operation.WRITE, Operation.DELETE,
                                Operation.ALTER])
def test_describe_is_implied(op):
    assert Authorizer(bindings=[acl(op=op)]).authorize(ALICE, "h", Operation.DESCRIBE, topic())


def test_describe_configs_implied_by_alter_configs_only():
    auth = Authorizer(bindings=[acl(op=Operation.ALTER_CONFIGS)])
    assert auth.authorize(ALICE, "h", Operation.DESCRIBE_CONFIGS, topic())
    assert not auth.authorize(ALICE, "h", Operation.DESCRIBE, topic())
    create = Authorizer(bindings=[acl(op=Operation.CREATE)])
    assert not create.authorize(ALICE, "h", Operation.DESCRIBE, topic())


def test_a_denied_describe_does_not_deny_read():
    auth = Authorizer(bindings=[acl(), acl(op=Operation.DESCRIBE, perm=DENY)])
    assert auth.authorize(ALICE, "h", Operation.READ, topic())
    assert not auth.authorize(ALICE, "h", Operation.DESCRIBE, topic())


def test_deny_all_denies_every_operation():
    auth = Authorizer(bindings=[acl(op=Operation.ALL), acl(op=Operation.ALL, perm=DENY,
                                                          name="or", pattern=P)])
    for op in (Operation.READ, Operation.DESCRIBE, Operation.ALTER_CONFIGS):
        assert not auth.authorize(ALICE, "h", op, topic())


def test_authorize_any_for_the_idempotent_producer():
    auth = Authorizer(bindings=[acl(op=Operation.WRITE)])
    assert auth.authorize_any(ALICE, "h", Operation.WRITE, T)
    assert not auth.authorize_any("User:bob", "h", Operation.WRITE, T)
    assert not auth.authorize_any(ALICE, "h", Operation.WRITE, G)
    taken_back = Authorizer(bindings=[acl(op=Operation.WRITE), acl(op=Operation.WRITE,
                                                                   perm=DENY)])
    assert not taken_back.authorize_any(ALICE, "h", Operation.WRITE, T)
    everywhere = Authorizer(bindings=[acl(op=Operation.WRITE),
                                      acl(name="*", op=Operation.ALL, perm=DENY)])
    assert not everywhere.authorize_any(ALICE, "h", Operation.WRITE, T)
    assert Authorizer(super_users=[ALICE]).authorize_any(ALICE, "h", Operation.WRITE, T)


def test_records_round_trip_and_tombstones_remove():
    binding = acl(name="pay.", pattern=P, op=Operation.WRITE, perm=DENY)
    auth = Authorizer()
    auth.apply(*encode(binding))
    auth.apply(*encode(binding))  # the same binding twice is one
    assert auth.bindings() == [binding]
    assert decode(*encode(binding)) == (binding, True)
    auth.apply(*tombstone(binding))
    assert auth.bindings() == [] and not auth.has_acls()


def test_a_foreign_record_is_corrupt():
    with pytest.raises(CorruptRecordError):
        decode(b"SCRAM-SHA-256:alice", b"{}")


def test_binding_rejects_any_and_match():
    with pytest.raises(ValueError):
        acl(op=Operation.ANY)
    with pytest.raises(ValueError):
        acl(pattern=PatternType.MATCH)
    with pytest.raises(ValueError):
        acl(principal="alice")


def test_filters():
    a, b = acl(), acl(name="pay.", pattern=P, type_=T, principal="User:bob", perm=DENY)
    auth = Authorizer(bindings=[a, b])
    assert auth.bindings(AclFilter()) == auth.bindings()
    assert auth.bindings(AclFilter(principal="User:bob")) == [b]
    assert auth.bindings(AclFilter(permission=ALLOW)) == [a]
    assert auth.bindings(AclFilter(resource_name="pay.eu", pattern=PatternType.MATCH)) == [b]
    assert auth.bindings(AclFilter(resource_name="pay.", pattern=L)) == []
