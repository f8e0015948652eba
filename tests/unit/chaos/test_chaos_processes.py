"""The chaos suite never leaves a process stopped (tests/chaos/processes.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import psutil
import pytest

from tests.chaos.processes import Pauses, resume_left_paused


@pytest.fixture
def child() -> Iterator[psutil.Process]:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield psutil.Process(process.pid)
    finally:
        os.kill(process.pid, signal.SIGCONT)
        process.kill()
        process.wait(timeout=10)


def test_a_paused_process_runs_again_and_is_off_the_record(child, tmp_path):
    pauses = Pauses(tmp_path / "paused.json")
    pauses.pause(child.pid, 0.05)
    assert child.status() != psutil.STATUS_STOPPED
    assert json.loads((tmp_path / "paused.json").read_text()) == {}


def test_a_pause_that_fails_midway_resumes_the_process(child, tmp_path):
    pauses = Pauses(tmp_path / "paused.json")
    with pytest.raises(ValueError):
        pauses.pause(child.pid, -1)  # time.sleep refuses it, after the SIGSTOP
    assert child.status() != psutil.STATUS_STOPPED


def test_what_a_killed_holder_left_stopped_is_resumed_from_its_record(child, tmp_path):
    record = tmp_path / "paused.json"
    os.kill(child.pid, signal.SIGSTOP)
    record.write_text(json.dumps({str(child.pid): child.create_time(),
                                  "999999999": 1.0}))  # gone: left alone
    assert resume_left_paused(record) == [child.pid]
    assert child.status() != psutil.STATUS_STOPPED
    assert resume_left_paused(tmp_path / "missing.json") == []


def test_a_pid_now_of_another_process_is_not_signalled(child, tmp_path):
    record = tmp_path / "paused.json"
    record.write_text(json.dumps({str(child.pid): child.create_time() - 100}))
    assert resume_left_paused(record) == []
