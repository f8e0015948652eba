"""``raylog demo`` runs to completion: on the session's cluster and on its own."""

from __future__ import annotations

import io

import pytest

from raylog.cli.demo import run_demo


def test_demo_on_a_running_cluster(ray_cluster):
    out = io.StringIO()
    assert run_demo(services=3, records_per_service=3000, partitions=6, out=out) == 0, \
        out.getvalue()
    assert "OK: every record arrived exactly once" in out.getvalue()


@pytest.fixture
def demo_embedded(scenarios) -> dict:
    """``raylog demo --embedded``, run early (tests/integration/command_scenario.py): its
    exit status, output and errors."""
    return scenarios.result("demo-embedded")


def test_demo_command_starts_its_own_embedded_cluster(demo_embedded):
    result = demo_embedded
    assert result["returncode"] == 0, result["stdout"] + result["stderr"]
    assert "on an embedded local cluster" in result["stdout"]
    assert "OK: every record arrived exactly once, in order within its partition" in \
        result["stdout"]
