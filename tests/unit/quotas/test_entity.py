"""Quota entities, their checks, and Kafka's order of resolution."""

import pytest

from raylog.errors import InvalidConfigError, InvalidQuotaError
from raylog.quotas import DEFAULT, QuotaEntity, check_quotas
from raylog.quotas.entity import candidates, from_wire, resolve, to_wire


def test_kafka_order_of_entities():
    assert [str(e) for e in candidates("alice", "app")] == [
        "user=alice,client-id=app", "user=alice,client-id=<default>", "user=alice",
        "user=<default>,client-id=app", "user=<default>,client-id=<default>",
        "user=<default>", "client-id=app", "client-id=<default>"]
    assert [str(e) for e in candidates(None, "app")] == ["client-id=app",
                                                         "client-id=<default>"]
    assert [str(e) for e in candidates(None, "")] == ["client-id=<default>"]


def test_the_most_specific_entity_wins_per_key_and_names_the_shared_rate():
    quotas = {
        QuotaEntity(client_id=DEFAULT): {"producer_byte_rate": 100, "consumer_byte_rate": 7},
        QuotaEntity(user="alice"): {"producer_byte_rate": 200},
        QuotaEntity(user="alice", client_id="app"): {"producer_byte_rate": 300},
    }
    assert resolve(quotas, "producer_byte_rate", "alice", "app") == (300, ("alice", "app"))
    # every client of alice but app shares alice's rate
    assert resolve(quotas, "producer_byte_rate", "alice", "other") == (200, ("alice", ""))
    # a key the specific entities do not set comes from further down, per client id
    assert resolve(quotas, "consumer_byte_rate", "alice", "app") == (7, ("", "app"))
    assert resolve(quotas, "producer_byte_rate", None, "x") == (100, ("", "x"))
    assert resolve(quotas, "request_percentage", "alice", "app") is None


def test_a_user_default_applies_to_each_user_on_its_own():
    quotas = {QuotaEntity(user=DEFAULT): {"producer_byte_rate": 5}}
    assert resolve(quotas, "producer_byte_rate", "bob", "c") == (5, ("bob", ""))
    assert resolve(quotas, "producer_byte_rate", None, "c") is None  # native: no user


def test_quota_values_are_checked():
    assert check_quotas({"producer_byte_rate": 1024.0, "request_percentage": 50}) == {
        "producer_byte_rate": 1024, "request_percentage": 50.0}
    for bad in ({"producer_byte_rate": -1}, {"consumer_byte_rate": 0},
                {"request_percentage": float("nan")}, {"producer_byte_rate": 1.5},
                {"producer_byte_rate": "fast"}, {"producer_byte_rate": True}):
        with pytest.raises(InvalidQuotaError, match="quota"):
            check_quotas(bad)
    with pytest.raises(InvalidQuotaError, match=r"unknown quota key 'producer_byte_rat'.*"
                                                r"producer_byte_rate"):
        check_quotas({"producer_byte_rat": 10})
    assert issubclass(InvalidQuotaError, InvalidConfigError)


def test_entities_are_checked_and_travel_as_kafkas():
    with pytest.raises(InvalidQuotaError, match="names a user, a client id"):
        QuotaEntity()
    with pytest.raises(InvalidQuotaError, match="client-id must be a non-empty string"):
        QuotaEntity(client_id="")
    with pytest.raises(InvalidQuotaError, match="unknown quota entity type 'ip'"):
        QuotaEntity.from_dict({"ip": "1.2.3.4"})
    entity = QuotaEntity(user="alice", client_id=DEFAULT)
    assert entity.to_dict() == {"user": "alice", "client-id": None}
    assert QuotaEntity.from_dict(entity.to_dict()) == entity
    quotas = {entity: {"producer_byte_rate": 10}, QuotaEntity(client_id="c"): {
        "request_percentage": 5.0}}
    assert from_wire(to_wire(quotas)) == quotas


def test_describe_filters_as_kafkas():
    from raylog.quotas.entity import matching

    alice, alice_app = QuotaEntity(user="alice"), QuotaEntity(user="alice", client_id="app")
    default_client, app = QuotaEntity(client_id=DEFAULT), QuotaEntity(client_id="app")
    quotas = {e: {"producer_byte_rate": 1} for e in (alice, alice_app, default_client, app)}
    assert set(matching(quotas, [])) == set(quotas)
    assert set(matching(quotas, [], strict=True)) == set()
    assert set(matching(quotas, [("user", "exact", "alice")])) == {alice, alice_app}
    assert set(matching(quotas, [("user", "exact", "alice")], strict=True)) == {alice}
    assert set(matching(quotas, [("client-id", "default", None)])) == {default_client}
    assert set(matching(quotas, [("client-id", "any", None)], strict=True)) == {
        default_client, app}
    with pytest.raises(InvalidQuotaError, match="unknown quota match type"):
        matching(quotas, [("user", "prefix", "a")])
    with pytest.raises(InvalidQuotaError, match="needs a name"):
        matching(quotas, [("user", "exact", None)])
