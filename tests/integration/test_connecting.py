"""raylog joins only the cluster it is told to, and says in one line when it cannot.

A Ray head with token authentication on runs next to the session's cluster (its own port and
temporary directory, `ray start --block`, stopped with SIGTERM at the end). The `raylog`
command is run in fresh processes against it, with and without the token.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.integration.conftest import wait_for

RAYLOG = os.path.join(os.path.dirname(sys.executable), "raylog")
RAY = os.path.join(os.path.dirname(sys.executable), "ray")
TOKEN = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def token_cluster(tmp_path_factory):
    """The address of a one-node Ray cluster that wants TOKEN."""
    root = tmp_path_factory.mktemp("token-cluster")
    ray_dir = Path(tempfile.mkdtemp(prefix="rl-tok-"))  # short: Ray's socket paths are limited
    port = free_port()
    env = {**os.environ, "HOME": str(root), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN}
    env.pop("RAY_ADDRESS", None)
    head = subprocess.Popen(
        [RAY, "start", "--head", f"--port={port}", "--num-cpus=1", "--include-dashboard=false",
         f"--temp-dir={ray_dir}", "--block"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        address = f"127.0.0.1:{port}"

        def listening() -> bool:
            if head.poll() is not None:
                pytest.fail(f"ray start exited with status {head.returncode}")
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        wait_for(listening, timeout=90, what="the token cluster's GCS")
        yield address
    finally:
        head.send_signal(signal.SIGTERM)  # --block: Ray stops the processes it started
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        shutil.rmtree(ray_dir, ignore_errors=True)


def raylog(*argv: str, env_extra: dict[str, str] | None = None, home: Path
           ) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")}
    env.update({"HOME": str(home), **(env_extra or {})})
    return subprocess.run([RAYLOG, *argv], capture_output=True, text=True, env=env,
                          timeout=120)


def one_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr  # no traceback, none of Ray's retry warnings
    assert lines[0].startswith("raylog: error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize(("env_extra", "says"), [
    ({}, "requires token authentication"),
    ({"RAY_AUTH_MODE": "token"}, "no token was found"),
    ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "00" * 16}, "refused this process's token"),
])
def test_a_cluster_wanting_a_token_is_named_in_one_line(token_cluster, tmp_path, env_extra,
                                                        says):
    line = one_line(raylog("topics", "list", "--address", token_cluster, env_extra=env_extra,
                           home=tmp_path))
    assert says in line and token_cluster in line
    assert "RAY_AUTH_MODE=token" in line and "RAY_AUTH_TOKEN_PATH" in line


def test_with_the_token_the_cluster_is_joined(token_cluster, tmp_path):
    line = one_line(raylog("--address", token_cluster, "cluster", "status", home=tmp_path,
                           env_extra={"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN}))
    assert "runs no raylog controller" in line  # joined: it found no controller there


def test_commands_never_join_a_cluster_they_were_not_told_about(token_cluster, tmp_path):
    """A Ray cluster runs on this machine, but neither --address nor RAY_ADDRESS names it."""
    line = one_line(raylog("topics", "list", home=tmp_path))
    assert "no Ray cluster named" in line and "RAY_ADDRESS" in line
