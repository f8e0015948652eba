"""The command line's handling of bad input, without a cluster: usage errors, one line on
stderr each, exit status 2; refusals exit 1; never a traceback. (Against a cluster:
tests/integration/test_cli.py.)"""

from __future__ import annotations

import argparse
import io

import pytest

import raylog.cli.commands as cli
from raylog import __version__
from raylog.cli.commands import main
from raylog.cli.common import report
from raylog.cli.records import _record, _refusals, format_record
from raylog.errors import InvalidRecordError, RecordTooLargeError, UnknownTopicError
from raylog.types import ConsumerRecord


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("raylog: error: "), err
    assert "Traceback" not in err and "usage:" not in err
    return lines[0]


@pytest.mark.parametrize("argv", [
    [],
    ["bogus"],
    ["topics"],
    ["topics", "create", "t", "--partitions", "0"],
    ["topics", "create", "t", "--partitions", "-3"],
    ["topics", "create", "t", "--partitions", "many"],
    ["topics", "create", "t", "--partitions", str(2**31)],
    ["topics", "create", "t", "--replication-factor", "0"],
    ["topics", "create", "t", "--config", "retention.ms"],
    ["topics", "create", "t", "--config", "=5"],
    ["topics", "alter", "t", "--partitions", "0"],
    ["topics", "alter", "t", "--set", "nonsense"],
    ["produce", "t", "--partition", "-1"],
    ["produce", "t", "--key-separator", ""],
    ["produce", "t", "--linger-ms", "-1"],
    ["produce", "t", "--acks", "2"],
    ["consume", "t", "--max-messages", "-1"],
    ["consume", "t", "--max-messages", "ten"],
    ["consume", "t", "--timeout-ms", "-5"],
    ["consume", "t", "--partition", "-2"],
    ["consume", "t", "--format", "xml"],
    ["consume", "t", "--print", "key,colour"],
    ["consume", "t", "--print", ","],
    ["consume", "t", "--timeout-ms", "-2"],
    ["groups", "reset-offsets", "g", "t", "--to", "earliest", "--execute", "--dry-run"],
    ["groups", "reset-offsets", "g", "t", "--to", "yesterday"],
    ["groups", "reset-offsets", "g", "t", "--to", "earliest", "--partitions"],
    ["groups", "reset-offsets", "g", "t", "--to", "earliest", "--partitions", "-1"],
    ["groups", "reset-offsets", "g", "t"],
    ["cluster", "restart"],
    ["demo", "--services", "9"],
    ["demo", "--records", "0"],
])
def test_usage_errors_are_one_line_and_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    line = one_error_line(capsys)
    assert "--help" in line


@pytest.mark.parametrize(("argv", "message"), [
    (["topics", "alter", "t"], "topics alter needs --partitions, --set or --delete"),
    (["consume", "t", "--print", "key", "--format", "json"],
     "give --print or --format, not both"),
    (["topics", "create", "t", "--config", "a=1", "--config", "a=2"],
     "config 'a' is given twice"),
])
def test_impossible_requests_are_usage_errors_found_before_connecting(argv, message, capsys):
    assert main(["--address", "127.0.0.1:1", *argv]) == 2
    assert one_error_line(capsys) == f"raylog: error: {message}"


@pytest.mark.parametrize("argv", [["topics", "list"], ["cluster", "status"],
                                  ["produce", "t"], ["consume", "t"], ["groups", "list"]])
def test_without_a_cluster_each_command_says_so_on_one_line(argv, capsys):
    assert main(["--address", "127.0.0.1:1", *argv], stdin=io.StringIO("x\n")) == 1
    assert "no Ray cluster at '127.0.0.1:1'" in one_error_line(capsys)


@pytest.mark.parametrize(("error", "status", "text"), [
    (RuntimeError("boom\n  at line 2"), 1, "raylog: error: unexpected RuntimeError: boom at "
                                           "line 2"),
    (UnknownTopicError("unknown topic 'x'"), 1, "raylog: error: unknown topic 'x'"),
    (argparse.ArgumentTypeError("bad"), 2, "raylog: error: bad"),
    (KeyboardInterrupt(), 130, "raylog: error: interrupted"),
])
def test_every_failure_is_one_line_with_a_status(monkeypatch, capsys, error, status, text):
    def fail(*args):
        raise error

    monkeypatch.setattr(cli, "cmd_cluster", fail)
    assert main(["cluster", "status"]) == status
    assert one_error_line(capsys) == text


def test_a_closed_output_ends_quietly(monkeypatch, capsys):
    def fail(*args):
        raise BrokenPipeError

    monkeypatch.setattr(cli, "cmd_cluster", fail)
    assert main(["cluster", "status"]) == 141
    assert capsys.readouterr().err == ""


def test_report_is_one_line(capsys):
    assert report("first\nsecond\n\n  third", 1) == 1
    assert capsys.readouterr().err == "raylog: error: first second third\n"


def test_lines_become_records_byte_for_byte():
    assert _record("hello\n", None) == (None, b"hello")
    assert _record("k:v:w\n", ":") == (b"k", b"v:w")
    assert _record("caf\udcc3\udca9\n", None) == (None, "café".encode())  # as read
    assert _record(":v\n", ":") == (b"", b"v")
    with pytest.raises(InvalidRecordError, match=r"no key separator ':'"):
        _record("no separator\n", ":")
    with pytest.raises(InvalidRecordError, match=r"not valid text"):
        _record("\ud800\n", None)


def test_refusals_are_grouped_by_cause_on_one_line():
    compacted = InvalidRecordError("a compacted log refuses records without a key")
    refused = [(n, compacted) for n in (2, 4, 6, 8, 10, 12, 14)]
    refused.append((3, RecordTooLargeError("too big")))
    text = _refusals(refused)
    assert "\n" not in text
    assert text == ("a compacted log refuses records without a key (lines 2, 4, 6, 8, 10 "
                    "and 2 more); too big (line 3)")


@pytest.mark.parametrize("argv", [["topics", "list", "--address", "h:1"],
                                  ["--address", "h:1", "topics", "list"],
                                  ["--address", "other:2", "topics", "list", "--address", "h:1"],
                                  ["groups", "describe", "g", "--address", "h:1"],
                                  ["cluster", "status", "--address", "h:1"]])
def test_address_goes_before_or_after_the_command(argv):
    assert cli.build_parser().parse_args(argv).address == "h:1"


def test_without_an_address_no_running_cluster_is_joined(monkeypatch):
    """A Ray cluster running on this machine may be someone else's: only RAY_ADDRESS or
    --address name one to join."""
    import ray
    import ray._private.services as services

    from raylog.client import connection
    from raylog.errors import NoClusterError

    def found(*_):
        raise AssertionError("looked for a running cluster it was not told to join")

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(services, "canonicalize_bootstrap_address", found)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    assert connection._find_cluster(None) is None
    with pytest.raises(NoClusterError, match="give --address HOST:PORT or set RAY_ADDRESS"):
        connection._connect_ray(None, start_local=False)


def test_version_is_printed_without_a_cluster(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"raylog {__version__}\n"


@pytest.mark.parametrize(("argv", "run"), [
    (["topic", "list"], "topics"), (["topics", "list"], "topics"),
    (["group", "list"], "groups"), (["groups", "describe", "g"], "groups"),
    (["consume", "t"], "consume"), (["cluster", "status"], "cluster"),
])
def test_singular_aliases_as_rpk_has_them(argv, run):
    assert cli.build_parser().parse_args(argv).run == run


def test_address_is_taken_between_command_and_action():
    args = cli.build_parser().parse_args(["topics", "--address", "h:1", "describe", "x"])
    assert args.address == "h:1" and args.names == ["x"]


def test_consume_follows_unless_told_when_to_stop():
    parse = cli.build_parser().parse_args
    assert parse(["consume", "t"]).timeout_ms is None
    assert parse(["consume", "t", "--timeout-ms", "-1"]).timeout_ms is None
    assert parse(["consume", "t", "--timeout-ms", "2500"]).timeout_ms == 2500


def test_reset_offsets_is_a_dry_run_unless_executed():
    parse = cli.build_parser().parse_args
    assert parse(["groups", "reset-offsets", "g", "t", "--to", "earliest"]).execute is False
    assert parse(["groups", "reset-offsets", "g", "t", "--to", "0", "--execute"]).execute


def test_records_print_as_kafkas_console_consumer_prints_them():
    record = ConsumerRecord("t", 2, 17, 1700000000000, b"user-1", b"click",
                            (("trace", b"abc"), ("empty", None)))
    fields = ("timestamp", "partition", "offset", "headers", "key", "value")
    assert format_record(record, fields) == ("CreateTime:1700000000000\tPartition:2\t"
                                             "Offset:17\ttrace:abc,empty:null\tuser-1\tclick")
    bare = record._replace(key=None, headers=())
    assert format_record(bare, ("headers", "key", "value")) == "NO_HEADERS\tnull\tclick"
    assert format_record(bare, ("value",)) == "click"
    assert format_record(bare._replace(value=None), ("value",)) == ""
    assert format_record(record, ("offset", "key")) == "Offset:17\tuser-1"
    as_json = format_record(record, None)
    assert '"headers": [["trace", "abc"], ["empty", null]]' in as_json
    assert '"key": "user-1"' in as_json


def test_help_and_the_clients_import_no_heavy_modules():
    """`raylog --help` imports not even Ray; the clients import Ray but not Ray Data,
    Spark, RayDP or pandas (each costs a command's start, every time)."""
    import json
    import subprocess
    import sys

    script = (
        "import json, sys\n"
        "from raylog.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "helped = sorted(sys.modules)\n"
        "import raylog\nraylog.Producer, raylog.Consumer, raylog.Admin\n"
        "print(json.dumps([helped, sorted(sys.modules)]))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    helped, clients = json.loads(out.splitlines()[-1])

    def loaded(modules: list[str], name: str) -> bool:
        return any(m == name or m.startswith(name + ".") for m in modules)

    assert not any(loaded(helped, m) for m in ("ray", "pyarrow", "pandas", "pyspark",
                                                 "fastavro"))
    assert loaded(clients, "ray")
    assert not any(loaded(clients, m) for m in ("ray.data", "pandas", "pyspark", "raydp",
                                                  "fastavro"))


class _GroupAdmin:
    """An Admin of one group with a static Kafka member and a dynamic one."""

    def __init__(self, cluster: object = None) -> None:
        pass

    def describe_group(self, group: str) -> dict:
        return {"group_id": group, "state": "stable", "generation": 3, "lag": 0,
                "members": [{"member_id": "m-static", "instance_id": "consumer-a"},
                            {"member_id": "m-dynamic"}],
                "partitions": [
                    {"topic": "t", "partition": p, "committed": 5, "end_offset": 5, "lag": 0,
                     "owner": owner} for p, owner in enumerate(["m-static", "m-dynamic", None])]}


def test_groups_describe_names_a_static_members_instance(monkeypatch):
    import raylog

    monkeypatch.setattr(cli, "connect", lambda args: None)
    monkeypatch.setattr(raylog, "Admin", _GroupAdmin)
    out = io.StringIO()
    assert main(["groups", "describe", "g", "--address", "h:1"], out=out) == 0
    rows = out.getvalue().splitlines()[2:]
    assert rows[0].endswith("m-static (instance consumer-a)")
    assert rows[1].endswith("m-dynamic") and rows[2].endswith("-")


class _TieredAdmin:
    """An Admin of a tiered topic whose one partition has a remote and a local log, and of
    a plain topic."""

    def __init__(self, cluster: object = None) -> None:
        pass

    def describe_topics(self, names: object = None) -> list[dict]:
        partition = {"partition": 0, "leader": 2, "leader_epoch": 4, "replicas": [2, 1],
                     "isr": [2, 1], "under_replicated": False, "offline": False}
        return [{"name": name, "topic_id": "id", "replication_factor": 2,
                 "configs": configs, "partitions": [partition]}
                for name, configs in (("cold", {"remote_storage_enable": True}),
                                      ("plain", {}))]

    def describe_replicas(self, name: str) -> list[dict]:
        assert name == "cold"  # a plain topic costs no broker round trip
        return [{"partition": 0, "broker_id": broker, "log_start_offset": start,
                 "log_end_offset": 90, "high_watermark": 90, "size_bytes": 2000,
                 "remote_log_start_offset": 0, "remote_end_offset": 59,
                 "remote_size_bytes": 6000, "remote_segments": 20, "not_copied_bytes": 900}
                for broker, start in ((1, 55), (2, 60))]


def test_topics_describe_shows_a_tiered_partitions_local_and_remote_logs(monkeypatch):
    import raylog

    monkeypatch.setattr(cli, "connect", lambda args: None)
    monkeypatch.setattr(raylog, "Admin", _TieredAdmin)
    out = io.StringIO()
    assert main(["topics", "--address", "h:1", "describe"], out=out) == 0
    lines = out.getvalue().splitlines()
    # the leader's (broker 2)
    assert lines[2] == ("\t\tLocal: 60..90 (2000 bytes)\tRemote: 0..59 (6000 bytes, "
                        "20 segments)\tNotCopied: 900 bytes\tHighWatermark: 90")
    assert len(lines) == 5 and "Remote" not in lines[4]
