"""The scenario processes (restart_scenario.py, replication_scenario.py, balance_scenario.py,
tiered_s3_scenario.py, registry_scenario.py, connecting_scenario.py, command_scenario.py's
commands that start an embedded cluster of their own, and the chaos suite's seeds:
tests/chaos/scenario.py), started early.

A scenario starts Ray clusters of its own in a process of its own, checks, and prints what it
checked as JSON; its tests only look at that. Most of its time is spent waiting (nodes
starting, brokers coming back), and ``make test`` runs the unit tests first, for minutes, on
one core. So the scenarios a session selected start when collection ends, one after another
on a thread of their own (one scenario cluster at a time), and run while the unit tests do;
their tests' fixtures take the results (:meth:`Scenarios.result`, which waits for a scenario
still running) and fail as the scenario did. A session that selects none of their tests
starts none: the unit tests alone start no cluster.

Which scenarios a test needs is said by the fixtures it uses (:data:`NEEDED`), or by its
``scenario`` marks (``pytest.mark.scenario(chaos_scenario(10))``, for scenarios a parameter
names); a scenario
that continues another's cluster (``head-first`` after ``whole-cluster``) shares its
directory and does not start when that one failed. ``python -m MODULE NAME ROOT`` runs one
by hand.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESTARTS = "tests.integration.restart_scenario"
REPLICATION = "tests.integration.replication_scenario"
BALANCE = "tests.integration.balance_scenario"
TIERED_S3 = "tests.integration.tiered_s3_scenario"
COMMAND = "tests.integration.command_scenario"
REGISTRY = "tests.integration.registry_scenario"
CONNECTING = "tests.integration.connecting_scenario"
CHAOS = "tests.chaos.scenario"
TIMEOUT_S = 900  # one scenario, on a busy host


@dataclasses.dataclass(frozen=True)
class Scenario:
    module: str
    name: str
    directory: str  # of the scenario's data; scenarios naming the same one share it
    after: str | None = None  # the scenario whose stopped cluster this one starts again


WHOLE_CLUSTER = Scenario(RESTARTS, "whole-cluster", "restarts")
HEAD_FIRST = Scenario(RESTARTS, "head-first", "restarts", after="whole-cluster")
EMBEDDED = Scenario(RESTARTS, "embedded", "embedded")
MACHINES_GONE = Scenario(REPLICATION, "machines-gone", "machines-gone")
NODE_ADDED = Scenario(BALANCE, "node-added", "node-added")
S3 = Scenario(TIERED_S3, "s3", "tiered-s3")
DEMO_EMBEDDED = Scenario(COMMAND, "demo-embedded", "demo-embedded")
TRANSACTIONS_BENCHMARK = Scenario(COMMAND, "transactions-benchmark", "transactions-benchmark")
REGISTRY_RESTART = Scenario(REGISTRY, "registry-restart", "registry-restart")
TOKEN_CLUSTER = Scenario(CONNECTING, "token-cluster", "token-cluster")

# fixture name -> the scenarios a test using it needs, in the order they run
NEEDED = {"whole_cluster": [WHOLE_CLUSTER], "head_first": [WHOLE_CLUSTER, HEAD_FIRST],
          "embedded_restart": [EMBEDDED], "machines_gone": [MACHINES_GONE],
          "node_added": [NODE_ADDED], "tiered_s3": [S3], "demo_embedded": [DEMO_EMBEDDED],
          "transactions_benchmark": [TRANSACTIONS_BENCHMARK],
          "registry_restart": [REGISTRY_RESTART], "token_cluster": [TOKEN_CLUSTER]}
KEY = pytest.StashKey["Scenarios"]()


def chaos_scenario(seed: int) -> Scenario:
    """One run of the chaos suite's seed (its default length), as tests/chaos/scenario.py
    names it."""
    return Scenario(CHAOS, f"chaos-seed-{seed}", f"chaos-seed-{seed}")


@dataclasses.dataclass
class Run:
    """One scenario's process: its directory, and once ended, its outcome."""

    scenario: Scenario
    root: Path
    ended: threading.Event = dataclasses.field(default_factory=threading.Event)
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    process: subprocess.Popen | None = None


class Scenarios:
    """The session's scenario runs, run in order on one thread, started by :meth:`start`
    or by the first :meth:`result`. Thread-safe: the thread writes a run's outcome before it
    sets ``ended``; the tests read it after."""

    def __init__(self, scenarios: Iterable[Scenario], directory) -> None:
        self.runs: dict[str, Run] = {}
        roots: dict[str, Path] = {}
        for scenario in scenarios:
            if scenario.name not in self.runs:
                if scenario.directory not in roots:
                    roots[scenario.directory] = directory(scenario.directory)
                self.runs[scenario.name] = Run(scenario, roots[scenario.directory])
        # The environment as the session began: the unit tests running meanwhile change
        # os.environ for a while (monkeypatch.setenv), and a scenario must not inherit that.
        self._environ = dict(os.environ)
        self._stopping = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run_all, daemon=True,
                                        name="scenario-processes")

    def start(self) -> None:
        with self._lock:
            if self._thread.ident is None:
                self._thread.start()

    def root(self, name: str) -> Path:
        return self.runs[name].root

    def result(self, name: str) -> dict:
        """What scenario ``name`` printed last (waiting for it to end); fails as it did."""
        if name not in self.runs:
            raise LookupError(f"scenario {name} was not planned: name the fixture that needs "
                              f"it in NEEDED")
        run = self.runs[name]
        self.start()
        if not run.ended.wait(TIMEOUT_S * len(self.runs)):
            raise AssertionError(f"scenario {name} did not end")
        assert run.returncode == 0, \
            f"{name} failed:\n{run.stdout[-3000:]}\n{run.stderr[-6000:]}"
        return json.loads(run.stdout.strip().splitlines()[-1])

    def stop(self) -> None:
        """Kill a scenario still running (the session ends early), with its cluster's
        processes (in its process group), and start no more."""
        self._stopping = True
        for run in self.runs.values():
            if run.process is not None and run.process.poll() is None:
                os.killpg(run.process.pid, signal.SIGKILL)

    def _run_all(self) -> None:
        for run in self.runs.values():
            after = run.scenario.after
            try:
                if self._stopping:
                    run.stderr = "not started: the session ended"
                elif after is not None and self.runs[after].returncode != 0:
                    run.stderr = f"not started: {after}, whose cluster it starts again, failed"
                else:
                    self._run(run)
            except Exception as e:  # its tests fail saying why, the next scenarios still run
                run.stderr += f"\nthe scenario could not be run: {e!r}"
            finally:
                run.ended.set()

    def _run(self, run: Run) -> None:
        env = {**self._environ, "HOME": str(run.root)}  # ~/.raylog of the scenario is its own
        env.pop("RAY_ADDRESS", None)
        command = [sys.executable, "-m", run.scenario.module, run.scenario.name, str(run.root)]
        run.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True,
                                       start_new_session=True)
        try:
            run.stdout, run.stderr = run.process.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(run.process.pid, signal.SIGKILL)  # Ray's processes are in its group
            run.stdout, run.stderr = run.process.communicate()
            run.stderr += f"\nkilled after {TIMEOUT_S} s"
        run.returncode = run.process.returncode


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the scenarios the session's tests need now if unit tests run first (``make
    test``); otherwise when their first test asks (a session of integration tests would run
    them beside its own cluster)."""
    needed = [s for item in session.items
              for s in [*(s for name in getattr(item, "fixturenames", ())
                          for s in NEEDED.get(name, ())),
                        *(s for mark in item.iter_markers("scenario") for s in mark.args)]]
    if needed:
        factory = session.config._tmp_path_factory  # what tmp_path_factory hands out
        scenarios = Scenarios(needed, factory.mktemp)
        session.config.stash[KEY] = scenarios
        if session.items[0].nodeid.startswith("tests/unit/") and \
                not session.config.option.collectonly:
            scenarios.start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    scenarios = session.config.stash.get(KEY, None)
    if scenarios is not None:
        scenarios.stop()


@pytest.fixture(scope="session")
def scenarios(request) -> Scenarios:
    planned = request.config.stash.get(KEY, None)
    if planned is None:
        raise LookupError("no scenario was planned: name the fixture that needs one in NEEDED")
    return planned
