"""Tiered storage's topic configs (Kafka's names and rules) and the cluster's store setting."""

from __future__ import annotations

import pytest

from raylog.errors import InvalidConfigError
from raylog.metadata.topics import described_configs, log_config, normalize_configs
from raylog.storage.config import LogConfig
from raylog.tiered.settings import SETTINGS_ENV, URI_ENV, RemoteStorageSettings


def test_kafkas_spellings_and_string_values_are_taken():
    configs = normalize_configs({"remote.storage.enable": "true", "local.retention.ms": "1000",
                                 "local.retention.bytes": 4096, "retention.bytes": 1 << 20})
    config = log_config(configs)
    assert config.remote_storage_enable is True
    assert config.local_retention == (1000, 4096)
    shown = described_configs(configs)
    assert shown["remote.storage.enable"] == {"value": True, "is_default": False}
    assert shown["local.retention.ms"]["value"] == 1000


def test_the_local_tail_defaults_to_the_whole_logs_retention():
    assert LogConfig(retention_ms=5000, retention_bytes=None).local_retention == (5000, None)
    assert described_configs({})["local.retention.ms"]["value"] == -2


@pytest.mark.parametrize("configs, message", [
    ({"remote.storage.enable": "yes"}, "true or false"),
    ({"remote.storage.enable": 1}, "true or false"),
    ({"remote.storage.enable": True, "cleanup.policy": "compact"}, "compacted logs"),
    ({"local.retention.ms": 10_000, "retention.ms": 5000}, "must not be more than"),
    ({"local.retention.bytes": -1, "retention.bytes": 5000}, "must not be more than"),
    ({"local.retention.ms": -3}, ">= 0 or -1"),
    ({"local.retention.bytes": "lots"}, "an integer"),
])
def test_bad_tiered_configs_are_refused_naming_them(configs, message):
    with pytest.raises(InvalidConfigError, match=message):
        normalize_configs(configs)


def test_the_store_setting_comes_from_the_environment():
    assert not RemoteStorageSettings.from_environ({}).configured
    settings = RemoteStorageSettings.from_environ({
        URI_ENV: "s3://bucket/prefix",
        SETTINGS_ENV: '{"endpoint_override": "127.0.0.1:9000", "scheme": "http"}'})
    assert settings.to_dict() == {"uri": "s3://bucket/prefix", "settings": {
        "endpoint_override": "127.0.0.1:9000", "scheme": "http"}}


@pytest.mark.parametrize("environ, message", [
    ({URI_ENV: "no-scheme"}, "with a scheme"),
    ({URI_ENV: "file:///x", SETTINGS_ENV: '{"region": "r"}'}, "takes no settings"),
    ({URI_ENV: "s3://b", SETTINGS_ENV: '{"colour": "red"}'}, "unknown S3 settings"),
    ({URI_ENV: "s3://b", SETTINGS_ENV: "[1]"}, "JSON object"),
    ({SETTINGS_ENV: "{}"}, None),
    ({SETTINGS_ENV: '{"region": "r"}'}, "is not"),
])
def test_a_bad_store_setting_is_refused(environ, message):
    if message is None:
        RemoteStorageSettings.from_environ(environ)  # an empty object is no setting
        return
    with pytest.raises(InvalidConfigError, match=message):
        RemoteStorageSettings.from_environ(environ)


def test_tiering_needs_the_clusters_store_and_cannot_be_turned_off():
    from raylog.metadata.topics import check_remote_storage

    tiered = normalize_configs({"remote.storage.enable": True})
    check_remote_storage("t", tiered, store_configured=True)
    check_remote_storage("t", {}, store_configured=False)
    with pytest.raises(InvalidConfigError, match="RAYLOG_REMOTE_STORAGE_URI"):
        check_remote_storage("t", tiered, store_configured=False)
    with pytest.raises(InvalidConfigError, match="cannot be turned off"):
        check_remote_storage("t", {}, store_configured=True, before=tiered)
    check_remote_storage("t", tiered, store_configured=True, before={})  # turned on later
