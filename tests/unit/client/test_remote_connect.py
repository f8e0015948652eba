"""raylog's own threads never connect a process to Ray behind its back (raylog/client/remote.py):
Ray's public ``ray.wait`` and ``ray.get`` would start or join a Ray instance in a process
that is not connected; the reaper's calls raise instead."""

from __future__ import annotations

import pytest
import ray

from raylog.client import remote


def test_the_reapers_calls_raise_instead_of_connecting_ray():
    assert not ray.is_initialized()
    assert remote._wait_connected is not ray.wait and remote._get_connected is not ray.get
    with pytest.raises(Exception, match="not been started"):
        remote._wait_connected([], num_returns=0, timeout=0)
    with pytest.raises(Exception, match="not been started"):
        remote._get_connected([], timeout=0)
    assert not ray.is_initialized()
