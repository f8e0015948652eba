"""raylog's peers in the benchmark suite: Redis Streams on a real ``redis-server`` and Ray's
own ``ray.util.queue.Queue``, given the same 100-byte values as raylog.

Redis runs as Debian packages it (``apt-get install redis-server``), on a free loopback
port, with no RDB snapshots and an append-only file fsynced every second
(``--save "" --appendonly yes --appendfsync everysec``), in a scratch directory; the suite
starts it and always stops it. Redis is driven the way it is fast: XADD pipelined in batches
of PIPELINE records, XRANGE with COUNT for reading (every record becomes a Python object, as
raylog's consumer makes a ConsumerRecord of each).
"""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PIPELINE = 1_000          # XADD commands per pipeline round trip
READ_COUNT = 1_000        # records per XRANGE
STREAM = "bench"
FIELD = b"v"
START_TIMEOUT_S = 10.0


def redis_server_path() -> str | None:
    """The redis-server executable on PATH (or Debian's /usr/bin), or None."""
    return shutil.which("redis-server") or next(
        (p for p in ("/usr/bin/redis-server", "/usr/sbin/redis-server") if Path(p).exists()),
        None)


def missing_redis_reason() -> str | None:
    """Why Redis cannot be measured here (no server binary, no Python client), or None."""
    if redis_server_path() is None:
        return ("redis-server is not installed (Debian: `apt-get install -y redis-server`; "
                "`make bench` does it when run as root with apt)")
    try:
        import redis  # noqa: F401
    except ImportError:
        return "the Python client is missing: `pip install -e '.[bench]'`"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A redis-server process this suite started, and a client of it. ``stop()`` (or the
    context manager's exit) ends the process and removes its directory, whatever happened."""

    def __init__(self) -> None:
        import redis

        binary = redis_server_path()
        if binary is None:
            raise RuntimeError(missing_redis_reason())
        self.directory = Path(tempfile.mkdtemp(prefix="raylog-bench-redis-"))
        self.port = _free_port()
        self.args = [binary, "--port", str(self.port), "--bind", "127.0.0.1",
                     "--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
                     "--dir", str(self.directory), "--daemonize", "no",
                     "--logfile", str(self.directory / "redis.log")]
        self.process = subprocess.Popen(self.args, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            self.client = redis.Redis(host="127.0.0.1", port=self.port)
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                try:
                    self.client.ping()
                    break
                except redis.ConnectionError:
                    if self.process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"redis-server did not start: "
                                           f"{self._log_tail()}") from None
                    time.sleep(0.05)
            self.version = self.client.info("server")["redis_version"]
        except BaseException:
            self.stop()
            raise

    @property
    def command(self) -> str:
        shown = ['""' if a == "" else a for a in self.args]
        shown[shown.index(str(self.directory))] = "<scratch dir>"
        shown[shown.index(str(self.directory / "redis.log"))] = "<scratch dir>/redis.log"
        shown[shown.index(str(self.port))] = "<free port>"
        return " ".join(["redis-server", *shown[1:]])

    def _log_tail(self) -> str:
        try:
            return (self.directory / "redis.log").read_text()[-500:]
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def redis_or_none() -> Iterator[tuple[RedisServer | None, str | None]]:
    """(a started server, None), or (None, why Redis cannot be measured)."""
    reason = missing_redis_reason()
    if reason is not None:
        yield None, reason
        return
    try:
        server = RedisServer()
    except RuntimeError as e:
        yield None, str(e)
        return
    with server:
        yield server, None


def redis_produce(server: RedisServer, values: list[bytes]) -> None:
    """XADD every value to the stream, PIPELINE commands per round trip."""
    pipe = server.client.pipeline(transaction=False)
    for i in range(0, len(values), PIPELINE):
        for value in values[i:i + PIPELINE]:
            pipe.xadd(STREAM, {FIELD: value})
        pipe.execute()


def redis_consume(server: RedisServer, count: int) -> tuple[int, int]:
    """Read the stream's first ``count`` records with XRANGE ... COUNT; the records and
    value bytes read."""
    client, seen, size, low = server.client, 0, 0, "-"
    while seen < count:
        entries = client.xrange(STREAM, min=low, count=min(READ_COUNT, count - seen))
        if not entries:
            raise RuntimeError(f"the stream ended after {seen:,} of {count:,} records")
        for _, fields in entries:
            size += len(fields[FIELD])
        seen += len(entries)
        low = "(" + entries[-1][0].decode()
    return seen, size


def redis_info(server: RedisServer | None, reason: str | None) -> dict[str, Any]:
    if server is None:
        return {"available": False, "reason": reason}
    import redis

    hiredis = importlib.util.find_spec("hiredis") is not None  # redis-py uses it
    return {"available": True, "version": server.version, "command": server.command,
            "client_version": redis.__version__, "hiredis": hiredis,
            "workload": f"one stream; XADD of each value as field `v`, pipelined "
                        f"{PIPELINE:,} commands per round trip; reading with XRANGE COUNT "
                        f"{READ_COUNT:,} from the start, every record made a Python object"}
