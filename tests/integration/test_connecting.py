"""raylog joins only the cluster it is told to, and says in one line when it cannot.

A Ray head with token authentication on runs beside the session's cluster, and the `raylog`
command runs in fresh processes against it, with and without the token: a scenario
(connecting_scenario.py, run early by scenarios.py) does both and writes down what each
command said; the tests here judge it.
"""

from __future__ import annotations

import pytest


@pytest.fixture
def token_cluster(scenarios) -> dict:
    """The token cluster's address, and what each command of the scenario's COMMANDS
    exited with and wrote."""
    return scenarios.result("token-cluster")


def one_line(result: dict) -> str:
    assert result["returncode"] == 1, result
    lines = result["stderr"].strip().splitlines()
    assert len(lines) == 1, result["stderr"]  # no traceback, none of Ray's retry warnings
    assert lines[0].startswith("raylog: error: "), result["stderr"]
    return lines[0]


@pytest.mark.parametrize(("command", "says"), [
    ("no-token-mode", "requires token authentication"),
    ("no-token", "no token was found"),
    ("wrong-token", "refused this process's token"),
])
def test_a_cluster_wanting_a_token_is_named_in_one_line(token_cluster, command, says):
    line = one_line(token_cluster["commands"][command])
    assert says in line and token_cluster["address"] in line
    assert "RAY_AUTH_MODE=token" in line and "RAY_AUTH_TOKEN_PATH" in line


def test_with_the_token_the_cluster_is_joined(token_cluster):
    line = one_line(token_cluster["commands"]["with-token"])
    assert "runs no raylog controller" in line  # joined: it found no controller there


def test_commands_never_join_a_cluster_they_were_not_told_about(token_cluster):
    """A Ray cluster runs on this machine, but neither --address nor RAY_ADDRESS names it."""
    line = one_line(token_cluster["commands"]["not-told"])
    assert "no Ray cluster named" in line and "RAY_ADDRESS" in line
