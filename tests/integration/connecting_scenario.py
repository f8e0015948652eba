"""The ``raylog`` command against a Ray cluster wanting a token, run as a scenario
(scenarios.py) so that it runs while the unit tests do: ``python -m
tests.integration.connecting_scenario token-cluster ROOT`` starts a one-node Ray head with
token authentication on (its own port and temporary directory, ``ray start --block``,
stopped with SIGTERM at the end), runs each command of :data:`COMMANDS` in a fresh process
with a home of its own, and prints each one's exit status and output as JSON
(test_connecting.py judges them).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.integration.conftest import wait_for

RAYLOG = os.path.join(os.path.dirname(sys.executable), "raylog")
RAY = os.path.join(os.path.dirname(sys.executable), "ray")
TOKEN = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
ADDRESS = "{address}"  # in a command's arguments: the token cluster's address
TOKEN_ENV = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN}
# name -> (the command's arguments, what it adds to the environment)
COMMANDS: dict[str, tuple[list[str], dict[str, str]]] = {
    "no-token-mode": (["topics", "list", "--address", ADDRESS], {}),
    "no-token": (["topics", "list", "--address", ADDRESS], {"RAY_AUTH_MODE": "token"}),
    "wrong-token": (["topics", "list", "--address", ADDRESS],
                    {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "00" * 16}),
    "with-token": (["--address", ADDRESS, "cluster", "status"], TOKEN_ENV),
    "not-told": (["topics", "list"], {}),  # neither --address nor RAY_ADDRESS
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def raylog(argv: list[str], env_extra: dict[str, str], home: Path) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")}
    env.update({"HOME": str(home), **env_extra})
    home.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([RAYLOG, *argv], capture_output=True, text=True, env=env,
                          timeout=120)
    return {"returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr}


def token_cluster(root: Path) -> dict[str, object]:
    """Every command's outcome against a one-node Ray head that wants TOKEN, and its
    address."""
    ray_dir = Path(tempfile.mkdtemp(prefix="rl-tok-"))  # short: Ray's socket paths are limited
    port = free_port()
    env = {**os.environ, "HOME": str(root), **TOKEN_ENV}
    env.pop("RAY_ADDRESS", None)
    head = subprocess.Popen(
        [RAY, "start", "--head", f"--port={port}", "--num-cpus=1", "--include-dashboard=false",
         f"--temp-dir={ray_dir}", "--block"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        address = f"127.0.0.1:{port}"

        def listening() -> bool:
            if head.poll() is not None:
                raise SystemExit(f"ray start exited with status {head.returncode}")
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        wait_for(listening, timeout=90, what="the token cluster's GCS")
        return {"address": address, "commands": {
            name: raylog([address if a == ADDRESS else a for a in argv], env_extra,
                         root / f"home-{name}")
            for name, (argv, env_extra) in COMMANDS.items()}}
    finally:
        head.send_signal(signal.SIGTERM)  # --block: Ray stops the processes it started
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        shutil.rmtree(ray_dir, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1] != "token-cluster":
        raise SystemExit(f"no scenario named {sys.argv[1]!r}")
    print(json.dumps(token_cluster(Path(sys.argv[2]))))
