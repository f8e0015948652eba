"""A one-node raylog cluster in Ray processes of its own on this machine, and a Flight
endpoint over it: the second cluster of mirror tests and benchmarks, or for trying
``raylog mirror`` on one machine.

The head is started with ``ray start --head --block`` on a free port with its own
temporary directory (so it shares nothing with other Ray clusters of the machine), the
``raylog_broker`` resource, ``RAYLOG_DATA_DIR`` under ``root`` and Ray's token
authentication with a token of its own (:meth:`LocalCluster.env` for the processes that
join it), in a session of its own;
:meth:`LocalCluster.stop` sends it SIGTERM (Ray then stops the processes it started) and
kills what is left of its process group. Nothing here runs ``ray stop``, which would stop
every Ray cluster of the machine.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

from raylog.util.cluster_names import BROKER_RESOURCE, DATA_DIR_ENV

BIN = Path(sys.executable).parent
START_TIMEOUT_S = 120.0
# `ray start --block` stops its processes gracefully on SIGTERM, which takes some 30 s here;
# after this long the rest is killed (raylog's logs recover from that as from any crash).
GRACE_S = 5.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without the Ray cluster it may be joined to."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return {**env, **extra}


def _stop(process: subprocess.Popen, timeout_s: float = 60.0) -> None:
    """SIGTERM, then SIGKILL to the process group of a process started in its own session."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=timeout_s)
    with contextlib.suppress(ProcessLookupError):  # whatever it left behind
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


class LocalCluster:
    """A head-only raylog cluster; ``address`` once started. Use as a context manager."""

    def __init__(self, root: Path, *, num_cpus: int = 1,
                 object_store_bytes: int = 200 * 1024 * 1024, grace_s: float = GRACE_S) -> None:
        """``grace_s``: how long :meth:`stop` lets ``ray start`` stop gracefully before it
        kills the rest (0 for a cluster whose data is thrown away with it)."""
        self.root = Path(root)
        self.num_cpus, self.object_store_bytes = num_cpus, object_store_bytes
        self.grace_s = grace_s
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        # Short: Ray's socket paths must fit in 107 bytes.
        self._ray_dir = Path(tempfile.mkdtemp(prefix="rl-m-"))
        self._head: subprocess.Popen | None = None
        self.token = secrets.token_hex(16)  # Ray's token authentication, this cluster's own

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a process that joins this cluster (its Ray token)."""
        return clean_env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=self.token, **extra)

    def start(self) -> LocalCluster:
        env = self.env(**{DATA_DIR_ENV: str(self.root / "data")})
        (self.root / "data").mkdir(parents=True, exist_ok=True)
        with open(self.root / "ray-start.log", "w") as log:
            self._head = subprocess.Popen(
                [str(BIN / "ray"), "start", "--head", f"--port={self.port}",
                 f"--num-cpus={self.num_cpus}",
                 f"--object-store-memory={self.object_store_bytes}",
                 "--include-dashboard=false", f"--temp-dir={self._ray_dir}",
                 f'--resources={{"{BROKER_RESOURCE}": 1}}', "--block"],
                env=env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while not _listening(self.port):
                if self._head.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"ray start failed; see {self.root / 'ray-start.log'}")
                time.sleep(0.2)
            started = subprocess.run([str(BIN / "raylog"), "start", "--address", self.address],
                                     env=self.env(), capture_output=True, text=True,
                                     timeout=180)
            if started.returncode:
                raise RuntimeError(f"raylog start failed: {started.stderr.strip()}")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self._head is not None:
            # Ray's workers run in process groups of their own, as children of the raylet.
            workers = _children_of_group(self._head.pid)
            _stop(self._head, timeout_s=self.grace_s)
            _reap(workers)
            self._head = None
        shutil.rmtree(self._ray_dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


class FlightEndpoint:
    """``raylog flight-serve`` over a LocalCluster, on a free port, in a process of its
    own; ``location`` once started."""

    def __init__(self, cluster: LocalCluster, token_file: Path, log: Path) -> None:
        self.cluster, self.token_file, self.log = cluster, token_file, log
        self.location: str | None = None
        self._process: subprocess.Popen | None = None

    def start(self) -> FlightEndpoint:
        with open(self.log, "w") as log:
            self._process = subprocess.Popen(
                [str(BIN / "raylog"), "flight-serve", "--address", self.cluster.address,
                 "--port", "0", "--token-file", str(self.token_file)],
                env=self.cluster.env(), stdout=subprocess.PIPE, stderr=log, text=True,
                start_new_session=True)
        line = _first_line(self._process, START_TIMEOUT_S)  # the address, once it serves
        if " at " not in line:
            self.stop()
            raise RuntimeError(f"flight-serve did not start; see {self.log}")
        self.location = line.rsplit(" at ", 1)[1].strip()
        return self

    def stop(self) -> None:
        if self._process is not None:
            _stop(self._process, timeout_s=30)
            self._process = None

    def __enter__(self) -> FlightEndpoint:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _first_line(process: subprocess.Popen, timeout_s: float) -> str:
    """The first line of ``process``'s stdout, or "" if none came within ``timeout_s``
    (a process that hangs before it says anything must not hang its caller)."""
    ready, _, _ = select.select([process.stdout], [], [], timeout_s)
    return process.stdout.readline() if ready else ""


def _stat(pid: int | str) -> tuple[int, int, int] | None:
    """(parent, process group, start time) of a process, None if it is gone."""
    try:
        # pid (comm) state ppid pgrp ... starttime (22nd): comm may hold spaces
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), int(fields[2]), int(fields[19])


def _children_of_group(pgid: int) -> dict[int, int]:
    """Processes outside process group ``pgid`` whose parent is in it: pid -> start time."""
    stats = {int(e.name): _stat(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()}
    stats = {pid: stat for pid, stat in stats.items() if stat is not None}
    group = {pid for pid, (_, pg, _) in stats.items() if pg == pgid}
    return {pid: start for pid, (ppid, pg, start) in stats.items()
            if ppid in group and pg != pgid}


def _reap(processes: dict[int, int], timeout_s: float = 10.0) -> None:
    """Wait for processes (workers whose raylet is gone exit by themselves), then kill
    those left, each only if it is still the process it was (same start time)."""
    def left() -> list[int]:
        return [pid for pid, start in processes.items()
                if (_stat(pid) or (0, 0, None))[2] == start]

    deadline = time.monotonic() + timeout_s
    while left() and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
