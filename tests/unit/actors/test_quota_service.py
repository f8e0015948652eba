"""The controller's quotas: checked, committed together, kept across a restart, watched."""

import asyncio

import pytest

from actors.quota_service import QuotaService
from raylog.errors import InvalidQuotaError
from raylog.metadata import state as events
from raylog.metadata.access import MemoryLog, MetadataAccess
from raylog.metadata.store import MetadataStore
from raylog.quotas import DEFAULT, QuotaEntity


def service(log=None) -> QuotaService:
    log = log or MemoryLog()
    access = MetadataAccess(log)
    if access.state.cluster_id is None:
        access.commit(events.cluster_created("c"))
    return QuotaService(access)


def test_set_merge_delete_and_describe():
    async def run():
        quotas = service()
        await quotas.alter_quotas([
            {"entity": {"client-id": "app"}, "set": {"producer_byte_rate": 1000}},
            {"entity": {"user": "alice", "client-id": None},
             "set": {"consumer_byte_rate": 5, "request_percentage": 20}}])
        await quotas.alter_quotas([{"entity": {"client-id": "app"},
                                    "set": {"consumer_byte_rate": 7}}])
        await quotas.alter_quotas([{"entity": {"user": "alice", "client-id": None},
                                    "delete": ["request_percentage", "producer_byte_rate"]}])
        assert await quotas.describe_quotas() == [
            {"entity": {"client-id": "app"},
             "quotas": {"producer_byte_rate": 1000, "consumer_byte_rate": 7}},
            {"entity": {"user": "alice", "client-id": None},
             "quotas": {"consumer_byte_rate": 5}}]
        assert await quotas.describe_quotas([("user", "exact", "alice")], strict=True) == []
        await quotas.alter_quotas([{"entity": {"client-id": "app"},
                                    "delete": ["producer_byte_rate", "consumer_byte_rate"]}])
        assert [e["entity"] for e in await quotas.describe_quotas()] == [
            {"user": "alice", "client-id": None}]
        assert quotas.access.state.quotas == {
            QuotaEntity("alice", DEFAULT): {"consumer_byte_rate": 5}}

    asyncio.run(run())


@pytest.mark.parametrize("entries, message", [
    ([{"entity": {"client-id": "a"}, "set": {"producer_byte_rate": -5}}], "must be a number > 0"),
    ([{"entity": {"client-id": "a"}, "set": {"producer_byte_rates": 5}}], "unknown quota key"),
    ([{"entity": {"client-id": "a"}, "delete": ["bogus"]}], "unknown quota key"),
    ([{"entity": {"ip": "1.2.3.4"}, "set": {"producer_byte_rate": 5}}], "entity type 'ip'"),
    ([{"entity": {}, "set": {"producer_byte_rate": 5}}], "names a user, a client id"),
    ([{"entity": {"client-id": "a"}, "set": {"producer_byte_rate": 5},
       "delete": ["producer_byte_rate"]}], "both set and delete"),
    ([{"entity": {"client-id": "a"}, "set": {"producer_byte_rate": 5}},
      {"entity": {"client-id": "a"}, "set": {"consumer_byte_rate": 5}}], "named twice"),
])
def test_a_bad_entry_changes_nothing(entries, message):
    async def run():
        quotas = service()
        good = {"entity": {"client-id": "ok"}, "set": {"producer_byte_rate": 1}}
        with pytest.raises(InvalidQuotaError, match=message):
            await quotas.alter_quotas([good, *entries])
        assert quotas.access.state.quotas == {}
        assert quotas.access.state.quotas_version == 0

    asyncio.run(run())


def test_quotas_survive_a_restart_and_snapshots(tmp_path):
    async def run():
        quotas = service(MetadataStore(tmp_path / "meta"))
        await quotas.alter_quotas([{"entity": {"user": None},
                                    "set": {"producer_byte_rate": 10}}])
        return quotas.access.state.quotas_version

    version = asyncio.run(run())
    again = MetadataAccess(MetadataStore(tmp_path / "meta")).state
    assert again.quotas == {QuotaEntity(user=DEFAULT): {"producer_byte_rate": 10}}
    assert again.quotas_version == version > 0
    data = events.MetadataState.from_data(again.to_data())
    assert (data.quotas, data.quotas_version) == (again.quotas, version)


def test_a_watch_answers_at_once_or_at_the_change():
    async def run():
        quotas = service()
        first = await quotas.watch_quotas(-1, 10)
        assert first == {"version": 0, "quotas": []}
        assert (await quotas.watch_quotas(0, 0.01))["version"] == 0  # nothing new: waited
        waiting = asyncio.ensure_future(quotas.watch_quotas(0, 30))
        await asyncio.sleep(0)
        assert not waiting.done()
        await quotas.alter_quotas([{"entity": {"client-id": "c"},
                                    "set": {"request_percentage": 50}}])
        answer = await asyncio.wait_for(waiting, 5)
        assert answer["version"] > 0
        assert answer["quotas"] == [{"entity": {"client-id": "c"},
                                     "quotas": {"request_percentage": 50.0}}]
        # a change to nothing new wakes nobody and commits nothing
        version = quotas.access.state.applied
        await quotas.alter_quotas([{"entity": {"client-id": "c"},
                                    "set": {"request_percentage": 50}}])
        assert quotas.access.state.applied == version

    asyncio.run(run())
