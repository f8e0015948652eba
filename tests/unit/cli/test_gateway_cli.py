"""``raylog gateway`` and the listener actors have Ray carry a produce's batches inline in
the call to the leader (not through the object store), unless the user set Ray's
threshold."""

from __future__ import annotations

import argparse

import pytest

from actors.launch import listener_runtime_env
from raylog.cli import gateway
from raylog.kafka.gateway import settings
from raylog.util.cluster_names import ACTOR_RUNTIME_ENV

SETTING = "RAY_max_direct_call_object_size"


def test_the_threshold_is_raised_unless_set():
    environ: dict[str, str] = {}
    settings.inline_appends(environ)
    assert environ == {SETTING: str(settings.INLINE_ARGUMENT_BYTES)}
    assert settings.INLINE_ARGUMENT_BYTES >= 1 << 20  # a librdkafka batch (1 MB) fits
    environ = {SETTING: "1000"}
    settings.inline_appends(environ)
    assert environ == {SETTING: "1000"}


class _Connected(Exception):
    pass


def test_it_is_set_before_the_command_connects_to_ray(monkeypatch):
    monkeypatch.delenv(SETTING, raising=False)
    seen = []

    def connect(args, out):
        import os

        seen.append(os.environ.get(SETTING))
        raise _Connected

    monkeypatch.setattr(gateway, "connect_or_embed", connect)
    with pytest.raises(_Connected):
        gateway.cmd_gateway(argparse.Namespace(idle_ms=None, request_max_bytes=None,
                                               auto_create_topics=False), None)
    assert seen == [str(settings.INLINE_ARGUMENT_BYTES)]


def test_the_listener_actors_get_it_in_their_environment(monkeypatch):
    """``raylog start --kafka-port``'s listener actors: the setting, beside the environment
    every raylog actor gets; a user's own value (in the starting process) is passed on."""
    monkeypatch.delenv(SETTING, raising=False)
    env = listener_runtime_env()["env_vars"]
    assert env == {**ACTOR_RUNTIME_ENV["env_vars"],
                   SETTING: str(settings.INLINE_ARGUMENT_BYTES)}
    monkeypatch.setenv(SETTING, "1000")
    assert listener_runtime_env()["env_vars"][SETTING] == "1000"
