"""`raylog mirror` and `raylog flight-serve` on bad input and unreachable clusters: one line,
the right exit status, retries said and given up when asked. No Ray is started: the source
is a Flight endpoint over a fake cluster, and an unreachable target is refused before Ray."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from raylog.cli import main
from raylog.mirror.flight_server import SourceFlightServer
from raylog.mirror.local import free_port
from tests.unit.mirror.test_mirror_flight import FakeSource


@pytest.fixture(scope="module")
def endpoint():
    server = SourceFlightServer(FakeSource(), "right-token")
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    yield server.location
    server.shutdown()
    thread.join(10)


@pytest.fixture
def token(tmp_path, monkeypatch):
    monkeypatch.delenv("RAYLOG_FLIGHT_TOKEN", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)

    def write(value: str) -> str:
        path = tmp_path / "token"
        path.write_text(value + "\n")
        return str(path)

    return write


def _run(capsys, *argv: str) -> tuple[int, list[str]]:
    try:
        status = main(list(argv))
    except SystemExit as e:  # argparse's way out of a bad command line
        status = e.code
    return status, capsys.readouterr().err.strip().splitlines()


def _mirror(source: str, token_file: str, *extra: str) -> list[str]:
    return ["mirror", "--source", source, "--alias", "east", "--token-file", token_file,
            "--target", f"127.0.0.1:{free_port()}", "--once", *extra]


def test_a_wrong_token_is_refused_at_once(endpoint, token, capsys):
    status, err = _run(capsys, *_mirror(endpoint, token("wrong-token")))
    assert status == 1
    assert err == [err[0]] and err[0].startswith("raylog: error: the source ")
    assert "refused the token" in err[0]


def test_an_unreachable_source_is_retried_with_backoff_then_given_up(token, capsys):
    source = f"grpc://127.0.0.1:{free_port()}"
    status, err = _run(capsys, *_mirror(source, token("t"), "--give-up-after-s", "2"))
    assert status == 1
    retries = [line for line in err if "trying again in" in line]
    assert retries and all(line.startswith(f"raylog mirror: reaching the source {source}: ")
                           for line in retries)
    assert "is unreachable" in err[-1] and err[-1].startswith("raylog: error: ")


def test_an_unreachable_target_is_retried_with_backoff_then_given_up(endpoint, token, capsys):
    status, err = _run(capsys, *_mirror(endpoint, token("right-token"), "--give-up-after-s",
                                        "2"))
    assert status == 1
    assert any(line.startswith("raylog mirror: joining the target cluster: no Ray cluster at")
               and "trying again in" in line for line in err)
    assert err[-1].startswith("raylog: error: no Ray cluster at")


@pytest.mark.parametrize("argv, message", [
    (["--alias", "a.b"], "alias must be"),
    (["--alias", "east", "--target-alias", "east"], "cannot both be"),
    (["--alias", "east", "--topics", "("], "is not a regular expression"),
])
def test_bad_names_and_patterns_are_usage_errors(token, capsys, argv, message):
    status, err = _run(capsys, "mirror", "--source", "grpc://127.0.0.1:1", "--token-file",
                       token("t"), *argv)
    assert status == 2 and len(err) == 1 and message in err[0]


def test_without_a_token_nothing_starts(token, capsys):
    status, err = _run(capsys, "mirror", "--source", "grpc://127.0.0.1:1", "--alias", "east")
    assert status == 2 and "token is needed" in err[0]
    status, err = _run(capsys, "flight-serve", "--address", "127.0.0.1:1")
    assert status == 2 and "token is needed" in err[0]


def test_tls_needs_a_certificate_and_its_key(token, tmp_path, capsys):
    status, err = _run(capsys, "flight-serve", "--token-file", token("t"), "--tls-cert",
                       str(tmp_path / "cert.pem"))
    assert status == 2 and "both --tls-cert and --tls-key" in err[0]


def test_translate_takes_an_alias(capsys):
    status, err = _run(capsys, "groups", "translate", "g", "--cluster-alias", "no.dots")
    assert status == 2 and "alias must be" in err[0]


def test_the_benchmark_explains_its_options():
    script = Path(__file__).resolve().parents[3] / "benchmarks" / "mirror.py"
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--quick" in done.stdout and "--json" in done.stdout
