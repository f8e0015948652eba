"""Fail points (raylog/util/faults.py): off unless armed in the file the environment names."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from raylog.util import faults

SCRIPT = textwrap.dedent("""
    from raylog.util import faults
    faults.point("a.b")
    print("passed", flush=True)
""")


def run(tmp_path: Path, content: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env[faults.FILE_ENV] = str(tmp_path / "points")
    if content is not None:
        (tmp_path / "points").write_text(content)
    return subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                          text=True, timeout=60)


def test_a_point_that_is_not_armed_does_nothing(tmp_path):
    assert run(tmp_path, None).stdout == "passed\n"  # no file at all
    assert run(tmp_path, "# a.b = exit\nother = exit\na.b = off\n").stdout == "passed\n"


def test_exit_ends_the_process(tmp_path):
    result = run(tmp_path, "a.b = exit\n")
    assert result.returncode == 1 and result.stdout == ""


def test_exit_once_ends_only_the_first_process(tmp_path):
    marker = tmp_path / "marker"
    first = run(tmp_path, f"a.b = exit-once:{marker}\n")
    assert first.returncode == 1 and marker.exists()
    assert run(tmp_path, f"a.b = exit-once:{marker}\n").stdout == "passed\n"


def test_sleep_stops_the_caller_and_the_file_is_read_again_when_it_changes(
        tmp_path, monkeypatch):
    path = tmp_path / "points"
    monkeypatch.setattr(faults, "_file", str(path))
    monkeypatch.setattr(faults, "_loaded", None)
    path.write_text("a.b = sleep:0.2\n")
    started = time.monotonic()
    faults.point("a.b")
    assert time.monotonic() - started >= 0.2
    path.write_text("a.b = off  # now disarmed, a longer line\n")
    assert faults._armed() == {"a.b": "off  # now disarmed, a longer line"}


def test_without_the_environment_nothing_is_read(monkeypatch):
    monkeypatch.setattr(faults, "_file", None)
    monkeypatch.setattr(faults, "_armed", lambda: pytest.fail("must not read anything"))
    faults.point("a.b")
