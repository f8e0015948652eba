"""``raylog gateway`` has Ray carry a produce's batches inline in the call to the leader
(not through the object store), unless the user set Ray's threshold."""

from __future__ import annotations

import argparse

import pytest

from raylog.cli import gateway

SETTING = "RAY_max_direct_call_object_size"


def test_the_threshold_is_raised_unless_set():
    environ: dict[str, str] = {}
    gateway.inline_appends(environ)
    assert environ == {SETTING: str(gateway.INLINE_ARGUMENT_BYTES)}
    assert gateway.INLINE_ARGUMENT_BYTES >= 1 << 20  # a librdkafka batch (1 MB) fits
    environ = {SETTING: "1000"}
    gateway.inline_appends(environ)
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
    assert seen == [str(gateway.INLINE_ARGUMENT_BYTES)]
