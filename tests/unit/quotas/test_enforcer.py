"""Throttle times as Kafka computes them, with an injected clock."""

import asyncio

import pytest

from raylog.errors import InvalidConfigError
from raylog.quotas import DEFAULT, ClientQuotas, QuotaEntity, QuotaSettings
from raylog.quotas.enforcer import MAX_THROTTLE_S
from raylog.quotas.follow import follow_quotas


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def quotas_with(entries, window_num=3, window_size_s=1.0):
    clock = Clock()
    quotas = ClientQuotas(QuotaSettings(window_num, window_size_s), clock)
    quotas.replace(entries, version=1)
    return quotas, clock


def test_no_quota_no_delay():
    quotas, _ = quotas_with({})
    assert not quotas.active
    assert quotas.record("producer_byte_rate", None, "c", 10**9) == 0


def test_a_client_over_its_rate_is_delayed_by_kafkas_formula():
    quotas, _ = quotas_with({QuotaEntity(client_id="c"): {"producer_byte_rate": 100}})
    assert quotas.record("producer_byte_rate", None, "c", 150) == 0  # 150 over 2 s: 75/s
    delay = quotas.record("producer_byte_rate", None, "c", 150)  # 300 over 2 s: 150/s
    assert delay == pytest.approx((150 - 100) / 100 * 2.0)
    assert quotas.throttled_s["producer_byte_rate"] == pytest.approx(delay)


def test_a_sender_that_waits_its_delays_is_held_to_its_quota():
    quotas, clock = quotas_with({QuotaEntity(client_id=DEFAULT): {"producer_byte_rate": 1000}},
                                window_num=5, window_size_s=0.5)
    sent = 0
    while clock.now < 30:
        sent += 400
        clock.now += quotas.record("producer_byte_rate", None, "greedy", 400) + 0.001
    assert sent / clock.now == pytest.approx(1000, rel=0.1)


def test_delays_are_bounded():
    quotas, _ = quotas_with({QuotaEntity(client_id="c"): {"consumer_byte_rate": 1,
                                                          "request_percentage": 1}})
    assert quotas.record("consumer_byte_rate", None, "c", 10**9) == MAX_THROTTLE_S
    assert quotas.record("request_percentage", None, "c", 100) == pytest.approx(1.0)  # 1 sample


def test_a_burst_waits_until_the_window_forgot_it():
    """Byte rates are not bounded by the window: a client that sent 10 times its quota's
    worth of a window at once waits about 9 windows, not one (after which its next burst
    would go through at once)."""
    quotas, _ = quotas_with({QuotaEntity(client_id="c"): {"producer_byte_rate": 100}},
                            window_num=3, window_size_s=1.0)
    assert quotas.record("producer_byte_rate", None, "c", 2000) == pytest.approx(18.0)


def test_request_time_is_a_share_of_one_handler():
    quotas, clock = quotas_with({QuotaEntity(client_id="c"): {"request_percentage": 60}})
    # 0.05 s of handling every 0.1 s is 50%: within the quota
    for _ in range(100):
        assert quotas.record("request_percentage", None, "c", 0.05) == 0
        clock.now += 0.1
    assert quotas.record("request_percentage", None, "c", 2.0) > 0


def test_clients_sharing_an_entity_share_its_rate():
    quotas, _ = quotas_with({QuotaEntity(user="alice"): {"producer_byte_rate": 100}})
    assert quotas.record("producer_byte_rate", "alice", "a", 200) == 0
    assert quotas.record("producer_byte_rate", "alice", "b", 100) > 0  # 300 over 2 s
    assert quotas.record("producer_byte_rate", "bob", "a", 100) == 0  # not alice


def test_a_changed_quota_applies_to_the_rate_measured_so_far():
    quotas, _ = quotas_with({QuotaEntity(client_id="c"): {"producer_byte_rate": 1000}})
    assert quotas.record("producer_byte_rate", None, "c", 300) == 0
    quotas.replace({QuotaEntity(client_id="c"): {"producer_byte_rate": 100}}, version=2)
    assert quotas.record("producer_byte_rate", None, "c", 1) > 0
    quotas.replace({}, version=3)
    assert quotas.record("producer_byte_rate", None, "c", 10**6) == 0


def test_a_clients_quota_is_resolved_once_until_the_quotas_change(monkeypatch):
    from raylog.quotas import enforcer

    asked, resolve = [], enforcer.resolve

    def counted(*args):
        asked.append(args[1:])
        return resolve(*args)

    quotas, _ = quotas_with({QuotaEntity(client_id="c"): {"producer_byte_rate": 1000}})
    monkeypatch.setattr(enforcer, "resolve", counted)
    for _ in range(3):  # a client without a quota, on every request
        assert quotas.record("producer_byte_rate", None, "other", 10**6) == 0
    assert asked == [("producer_byte_rate", None, "other")]
    quotas.replace({QuotaEntity(client_id=DEFAULT): {"producer_byte_rate": 100}}, version=2)
    assert quotas.record("producer_byte_rate", None, "other", 10**6) > 0
    assert len(asked) == 2


def test_an_answer_is_held_back_by_its_largest_delay_and_counted_once(monkeypatch):
    from raylog.quotas import enforcer

    counted = []

    class Recorder:
        def inc(self, name, value, **tags):
            counted.append((name, value, tags))

    monkeypatch.setattr(enforcer, "recorder", Recorder)
    quotas, _ = quotas_with({QuotaEntity(client_id="c"): {"producer_byte_rate": 1000,
                                                          "request_percentage": 10}})
    values = {"producer_byte_rate": 100, "request_percentage": 1.0}  # 1 s of 2 s: 50 %
    delay = quotas.charge(None, "c", values)
    assert delay == pytest.approx(1.0)  # request time: (50 - 10) / 10 * 2 s, one sample
    assert counted == [("raylog_throttle_time_ms", 1000,
                        {"quota": "request_percentage", "client_id": "c"})]
    assert quotas.charge(None, "other", values) == 0 and len(counted) == 1


def test_settings_are_checked():
    for bad in ({"window_num": 1}, {"window_size_s": 0}, {"window_num": "11"}):
        with pytest.raises(InvalidConfigError):
            QuotaSettings(**bad)
    assert QuotaSettings.from_environ({"RAYLOG_QUOTA_WINDOW_NUM": "5",
                                       "RAYLOG_QUOTA_WINDOW_SIZE_SECONDS": "0.5"}) == \
        QuotaSettings(5, 0.5)
    with pytest.raises(InvalidConfigError, match="RAYLOG_QUOTA_WINDOW_NUM"):
        QuotaSettings.from_environ({"RAYLOG_QUOTA_WINDOW_NUM": "many"})


def test_a_follower_takes_each_new_version_and_survives_failures():
    quotas = ClientQuotas()
    answers = [RuntimeError("controller restarting"),
               {"version": 4, "quotas": [{"entity": {"client-id": "c"},
                                          "quotas": {"producer_byte_rate": 10}}]},
               {"version": 4, "quotas": []}]
    asked = []

    async def watch(version, wait_s):
        asked.append(version)
        if not answers:
            await asyncio.Event().wait()
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def run():
        task = asyncio.ensure_future(follow_quotas(watch, quotas, retry_s=0))
        while answers:
            await asyncio.sleep(0)
        await asyncio.sleep(0)
        task.cancel()

    asyncio.run(run())
    assert asked == [-1, -1, 4, 4]
    assert quotas.version == 4
    assert quotas.quota("producer_byte_rate", None, "c") == 10  # the same version: kept
