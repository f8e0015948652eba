"""Long-running commands stop on SIGTERM as on SIGINT, printing their totals
(raylog/cli/signals.py). The rule itself in this process; ``raylog registry``'s and
``raylog flight-serve``'s serving loops in processes of their own over an in-memory
registry and a fake cluster (no Ray)."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from raylog.cli.signals import StopSignals
from raylog.mirror.flight_client import SourceClient, batch_views
from raylog.mirror.protocol import Ticket
from tests.children import Child, sigint_handled, sigint_ignored
from tests.unit.mirror.test_mirror_flight import TOKEN

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@sigint_handled()
def test_either_signal_asks_for_a_stop_once(sig):
    before = signal.getsignal(sig)
    stops = []
    with StopSignals(on_stop=lambda: stops.append(1)) as stop:
        assert not stop.is_set()
        os.kill(os.getpid(), sig)
        assert stop.wait(30)
        assert stop.received == sig and stops == [1]
        with pytest.raises(KeyboardInterrupt):  # a second one: the command is stuck
            os.kill(os.getpid(), sig)
            stop.wait(30)  # the handler raises here at the latest
    assert signal.getsignal(sig) is before


@sigint_handled()
def test_a_second_signal_can_be_handled_otherwise():
    seconds = []
    with StopSignals(on_second=lambda: seconds.append(1)) as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        stop.wait(30)
        os.kill(os.getpid(), signal.SIGINT)
        # Another thread may take the signal: its handler runs here soon, not at once.
        deadline = time.monotonic() + 30
        while not seconds and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stop.received == signal.SIGTERM and seconds == [1]


def test_a_signal_another_thread_takes_still_wakes_the_wait():
    """The kernel may hand a process's signal to any thread that does not block it (Ray's
    and gRPC's threads in a command that connected to a cluster): the main thread's wait
    wakes all the same, and does not sleep out its timeout."""
    started, release = threading.Event(), threading.Event()
    thread = threading.Thread(target=lambda: (started.set(), release.wait(60)))
    thread.start()
    started.wait(30)
    # From here on only that thread (it kept the mask it started with) can take SIGTERM.
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        with StopSignals() as stop:
            os.kill(os.getpid(), signal.SIGTERM)
            assert stop.wait(30)
            assert stop.received == signal.SIGTERM
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        release.set()
        thread.join(30)


def test_a_sigint_ignored_at_start_stays_ignored_and_sigterm_stops():
    with sigint_ignored(), StopSignals() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(30)
        # Handled, SIGINT (the lower number) would have come first.
        assert stop.received == signal.SIGTERM
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


REGISTRY = """
import sys
from raylog.cli.schemas import serve
from raylog.schemas.registry import MemoryLog, Registry
sys.exit(serve(Registry(MemoryLog()), "127.0.0.1", 0, sys.stdout))
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_the_registry_server_stops_and_says_how_many_requests_it_answered(sig):
    # Started while this process ignores SIGINT, as under `make test &`: the child's
    # SIGINT is reset (tests/children.py), so a SIGINT still reaches it.
    with sigint_ignored():
        child = Child([sys.executable, "-c", REGISTRY], cwd=ROOT)
    with child:
        url = child.wait_for_line("schema registry listening on").rsplit(" ", 1)[1]
        with urllib.request.urlopen(f"{url}/subjects", timeout=30) as answer:
            assert json.load(answer) == []
        assert child.stop(sig) == 0, child.stderr
    assert child.lines[-1] == "schema registry stopped after 1 requests"
    assert "Traceback" not in child.stderr


FLIGHT = """
import sys
from raylog.cli.mirror import serve_until_stopped
from raylog.mirror.flight_server import SourceFlightServer
from tests.unit.mirror.test_mirror_flight import TOKEN, FakeSource
server = SourceFlightServer(FakeSource(), TOKEN)
print(f"serving at {server.location}", flush=True)
sys.exit(serve_until_stopped(server, sys.stdout))
"""


def test_the_flight_endpoint_stops_on_sigterm_and_says_what_it_served():
    with Child([sys.executable, "-c", FLIGHT], cwd=ROOT) as child:
        location = child.wait_for_line("serving at").rsplit(" ", 1)[1]
        client = SourceClient(location, TOKEN)
        sent = sum(len(view) for chunk, _ in client.read(Ticket("orders", 0, 4, end=13))
                   for view in batch_views(chunk))
        client.close()
        assert child.stop(signal.SIGTERM) == 0, child.stderr
    assert child.lines[-1] == f"stopped serving: 1 reads, {sent:,} bytes of records"
    assert "Traceback" not in child.stderr
