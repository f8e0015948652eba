"""The balancer's cluster settings and the topic's throttle config: bad values refused with
the name and the value."""

from __future__ import annotations

import pytest

from raylog.errors import InvalidConfigError
from raylog.metadata.balance_settings import (
    DEFAULT_THROTTLED_RATE,
    BalanceSettings,
)
from raylog.metadata.topics import normalize_configs


def test_defaults_and_values_from_the_environment():
    assert BalanceSettings.from_environ({}) == BalanceSettings()
    assert BalanceSettings().auto_balance is False
    assert BalanceSettings().replication_throttled_rate == DEFAULT_THROTTLED_RATE
    settings = BalanceSettings.from_environ({
        "RAYLOG_AUTO_BALANCE": "true", "RAYLOG_AUTO_BALANCE_AFTER_S": "2.5",
        "RAYLOG_REPLICATION_THROTTLED_RATE": "0"})
    assert settings == BalanceSettings(True, 2.5, 0)


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("RAYLOG_REPLICATION_THROTTLED_RATE", "-1", "RAYLOG_REPLICATION_THROTTLED_RATE.*-1"),
    ("RAYLOG_REPLICATION_THROTTLED_RATE", "fast", "RAYLOG_REPLICATION_THROTTLED_RATE.*fast"),
    ("RAYLOG_REPLICATION_THROTTLED_RATE", "1.5", "RAYLOG_REPLICATION_THROTTLED_RATE"),
    ("RAYLOG_AUTO_BALANCE", "maybe", "RAYLOG_AUTO_BALANCE must be true or false"),
    ("RAYLOG_AUTO_BALANCE_AFTER_S", "-3", "RAYLOG_AUTO_BALANCE_AFTER_S.*-3"),
    ("RAYLOG_AUTO_BALANCE_AFTER_S", "inf", "RAYLOG_AUTO_BALANCE_AFTER_S"),
])
def test_bad_settings_are_refused(variable, value, message):
    with pytest.raises(InvalidConfigError, match=message):
        BalanceSettings.from_environ({variable: value})


def test_the_topic_throttle_config():
    assert normalize_configs({"replication.throttled.rate": "1000"}) == \
        {"replication_throttled_rate": 1000}
    assert normalize_configs({"replication.throttled.rate": 0}) == \
        {"replication_throttled_rate": 0}
    for bad in (-1, "-5", 2.5, "fast"):
        with pytest.raises(InvalidConfigError, match=r"replication\.throttled\.rate"):
            normalize_configs({"replication.throttled.rate": bad})
