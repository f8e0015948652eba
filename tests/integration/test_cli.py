"""The ``raylog`` command line against the session's cluster."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import ray

from raylog import Admin
from raylog.cli import main
from tests.children import Child, sigint_ignored
from tests.integration.conftest import wait_for


def run(*argv: str, stdin: str = "") -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out, stdin=io.StringIO(stdin))
    return code, out.getvalue()


def test_topic_lifecycle(ray_cluster, topic_name):
    code, out = run("topics", "create", topic_name, "--partitions", "3",
                    "--config", "retention.ms=60000")
    assert code == 0 and f"created topic {topic_name} with 3 partitions" in out
    assert topic_name in run("topics", "list")[1].split()
    code, out = run("topics", "describe", topic_name)
    assert code == 0 and "PartitionCount: 3" in out and "retention.ms=60000" in out
    assert out.count("\tPartition: ") == 3
    code, out = run("topics", "alter", topic_name, "--partitions", "4",
                    "--set", "segment.bytes=1048576", "--delete", "retention.ms")
    assert code == 0 and "PartitionCount: 4" in out and "segment.bytes=1048576" in out
    assert "retention.ms" not in out
    assert run("topics", "delete", topic_name) == (0, f"deleted topic {topic_name}\n")
    assert topic_name not in run("topics", "list")[1].split()


def test_produce_and_consume_lines(ray_cluster, topic_name):
    run("topics", "create", topic_name, "--partitions", "2")
    lines = "".join(f"user-{i % 3}:click {i}\n" for i in range(20))
    code, out = run("produce", topic_name, "--key-separator", ":", stdin=lines)
    assert (code, out) == (0, f"produced 20 records to {topic_name}\n")
    code, out = run("consume", topic_name, "--from-beginning", "--format", "json",
                    "--timeout-ms", "3000")
    records = [json.loads(line) for line in out.splitlines()]
    assert sorted(r["value"] for r in records) == sorted(f"click {i}" for i in range(20))
    for key in ("user-0", "user-1", "user-2"):  # a key's records stay in order
        mine = [int(r["value"].split()[1]) for r in records if r["key"] == key]
        assert mine == sorted(mine) and len({r["partition"] for r in records
                                             if r["key"] == key}) == 1
    code, out = run("consume", topic_name, "--from-beginning", "--max-messages", "5")
    assert code == 0 and len(out.splitlines()) == 5
    group = f"cli-{topic_name}"
    code, out = run("consume", topic_name, "--group", group, "--from-beginning",
                    "--timeout-ms", "3000")
    assert code == 0 and len(out.splitlines()) == 20
    # The group committed its progress: a second run has nothing left to read.
    # (From the beginning: were the commit lost, this run would print all 20 again.)
    assert run("consume", topic_name, "--group", group, "--from-beginning",
               "--timeout-ms", "3000") == (0, "")


def test_cluster_status_lists_brokers(ray_cluster, topic_name):
    run("topics", "create", topic_name, "--partitions", "3")
    code, out = run("cluster", "status", "--json")
    status = json.loads(out)
    assert code == 0
    brokers = {b["broker_id"]: b for b in status["brokers"]}
    assert set(brokers) >= set(ray_cluster.broker_ids)
    assert {str(Path(b["data_dir"])) for b in brokers.values() if b["alive"]} == \
        {str(d.resolve()) for d in ray_cluster.data_dirs.values()}
    assert status["refused"] == []
    leaders = [tuple(t) for b in status["brokers"] for t in b["leaders"]]
    assert sorted(p for t, p in leaders if t == topic_name) == [0, 1, 2]
    placement = {p["partition"]: p["replicas"] for p in
                 Admin().describe_topic(topic_name)["partitions"]}
    hosts = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}
    for broker_id, broker in brokers.items():  # each broker lists what it holds, and where
        held = sorted(p for t, p in map(tuple, broker["replicas"]) if t == topic_name)
        assert held == sorted(p for p, replicas in placement.items() if broker_id in replicas)
        if broker["alive"]:
            assert broker["host"] == hosts[broker["node_id"]]
    assert status["under_replicated_partitions"] == 0 and status["offline_partitions"] == 0
    code, out = run("cluster", "status")
    assert code == 0 and "alive" in out and len(out.splitlines()) >= 1 + 1 + 3


def test_start_finds_the_running_controller(ray_cluster):
    """`raylog start`, which `ray up` runs on the head: the controller is created if missing,
    found if running (here: found, with the topics it has)."""
    code, out = run("--address", ray_cluster.cluster.address, "start")
    topics = len(Admin().list_topics())
    assert (code, out) == (0, f"raylog controller running ({topics} topics)\n")


def test_errors_are_reported_not_raised(ray_cluster, topic_name, capsys):
    assert run("topics", "describe", topic_name)[0] == 1
    assert f"unknown topic {topic_name!r}" in capsys.readouterr().err
    assert run("topics", "create", "bad/name")[0] == 1
    assert "outside [a-zA-Z0-9._-]" in capsys.readouterr().err
    assert run("topics", "create", topic_name, "--config", "retention.ms=soon")[0] == 1
    assert "retention.ms must be an integer" in capsys.readouterr().err
    assert run("produce", topic_name, stdin="x\n")[0] == 1
    assert f"unknown topic {topic_name!r}" in capsys.readouterr().err
    assert run("topics", "create", topic_name)[0] == 0
    assert run("produce", topic_name, "--key-separator", "=", stdin="no separator\n")[0] == 1
    assert "1 of 1 records refused: no key separator '=' in the line (line 1)" in \
        capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        run("groups", "reset-offsets", "g", topic_name, "--to", "timestamp:soon")
    assert exited.value.code == 2
    assert "--to must be earliest, latest" in capsys.readouterr().err


def test_console_script_connects_to_a_running_cluster(ray_cluster):
    env = {**os.environ, "RAY_ADDRESS": ray_cluster.cluster.address}
    result = subprocess.run([os.path.join(os.path.dirname(sys.executable), "raylog"),
                             "cluster", "status"], capture_output=True, text=True, env=env,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "controller on node" in result.stdout


@pytest.mark.parametrize("argv", [["topics", "list"], ["cluster", "status"]])
def test_without_a_cluster_it_says_so(argv):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    result = subprocess.run([os.path.join(os.path.dirname(sys.executable), "raylog"),
                             "--address", "127.0.0.1:1", *argv],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 1
    assert "no Ray cluster at '127.0.0.1:1'" in result.stderr
    assert "ray up cluster.yaml" in result.stderr


def test_a_connected_process_never_acts_on_another_cluster(ray_cluster, topic_name, capsys):
    """In a process already joined to a cluster, --address naming another one is refused,
    whether or not something listens there."""
    assert main(["--address", "127.0.0.1:1", "topics", "list"]) == 1
    assert "no Ray cluster at '127.0.0.1:1'" in capsys.readouterr().err
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        address = f"127.0.0.1:{other.getsockname()[1]}"
        assert main(["--address", address, "topics", "create", topic_name]) == 1
    err = capsys.readouterr().err
    assert "already connected to the Ray cluster at" in err and address in err
    assert main(["--address", ray_cluster.cluster.address, "topics", "list"]) == 0
    assert topic_name not in capsys.readouterr().out


# -- refusals: one line on stderr, exit status 1, and nothing stored changes ---------------------

def error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("raylog: error: "), err
    return err.strip()


def end_offsets(topic: str, partitions: int = 1) -> dict:
    from raylog import Consumer, TopicPartition

    with Consumer() as consumer:
        return consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])


def test_produce_reports_records_the_cluster_refused(ray_cluster, topic_name, capsys):
    run("topics", "create", topic_name, "--config", "cleanup.policy=compact",
        "--config", "max.message.bytes=4096")
    code, out = run("produce", topic_name, stdin="no key\nnone either\n")
    assert (code, out) == (1, f"produced 0 records to {topic_name}\n")
    assert error_line(capsys) == (
        "raylog: error: 2 of 2 records refused: a compacted log refuses records without a "
        "key (lines 1, 2)")
    large = os.urandom(6000).hex()  # incompressible, over max.message.bytes once encoded
    code, out = run("produce", topic_name, "--key-separator", ":", stdin=f"k:{large}\n")
    assert (code, out) == (1, f"produced 0 records to {topic_name}\n")
    assert "1 of 1 records refused: " in error_line(capsys)
    assert end_offsets(topic_name) == {(topic_name, 0): 0}


def test_produce_counts_a_mix_of_produced_and_refused_records(ray_cluster, topic_name,
                                                               capsys):
    run("topics", "create", topic_name)
    code, out = run("produce", topic_name, "--key-separator", ":",
                    stdin="a:1\nno separator\nb:2\nneither\n")
    assert (code, out) == (1, f"produced 2 records to {topic_name}\n")
    assert error_line(capsys) == ("raylog: error: 2 of 4 records refused: no key separator "
                                  "':' in the line (lines 2, 4)")
    assert end_offsets(topic_name) == {(topic_name, 0): 2}


def test_alter_refuses_deleting_a_config_that_is_not_set(ray_cluster, topic_name, capsys):
    from raylog import Admin

    run("topics", "create", topic_name, "--partitions", "2", "--config", "retention.ms=60000")
    before = Admin().describe_topic(topic_name)
    assert run("topics", "alter", topic_name, "--delete", "segment.bytes")[0] == 1
    assert error_line(capsys) == (f"raylog: error: topic {topic_name!r} has no value set for "
                                  "'segment.bytes' (it has its default): nothing to delete")
    # Each change is checked before any is made: the partitions were not added either.
    assert run("topics", "alter", topic_name, "--partitions", "3", "--set",
               "segment.bytes=1048576", "--delete", "retention.msx")[0] == 1
    assert "did you mean 'retention.ms'?" in error_line(capsys)
    assert run("topics", "alter", topic_name, "--partitions", "1")[0] == 1
    assert "cannot have fewer (1): partitions are added, never removed" in error_line(capsys)
    assert run("topics", "alter", topic_name, "--partitions", "2")[0] == 1
    assert "already has 2 partitions" in error_line(capsys)
    assert Admin().describe_topic(topic_name) == before
    code, out = run("topics", "alter", topic_name, "--delete", "retention.ms")
    assert code == 0 and "retention.ms" not in out


@pytest.mark.parametrize(("argv", "message"), [
    (["topics", "create", "{topic}", "--partitions", "1000000"],
     "cannot have 1000000 partitions: the limit is 10000 per topic"),
    (["topics", "create", "{topic}", "--config", "retention.msx=5"],
     "unknown topic config 'retention.msx' (did you mean 'retention.ms'?)"),
    (["topics", "create", "{topic}", "--replication-factor", "9"], "replication factor 9"),
    (["topics", "delete", "__consumer_offsets"], "internal"),
    (["topics", "describe", "{topic}"], "unknown topic"),
    (["produce", "{topic}"], "unknown topic"),
    (["consume", "{topic}"], "unknown topic"),
    (["groups", "describe", "{topic}"], "unknown consumer group"),
    (["groups", "delete", "{topic}"], "unknown consumer group"),
    (["groups", "reset-offsets", "g", "{topic}", "--to", "earliest"], "unknown topic"),
])
def test_refusals_are_one_line_with_status_1(ray_cluster, topic_name, capsys, argv, message):
    def user_topics() -> list[dict]:
        # Internal topics are raylog's own: a group command may create __consumer_offsets
        # on first use, as Kafka's coordinator does.
        return [t for t in Admin().describe_topics() if not t["name"].startswith("__")]

    before = user_topics()
    code, out = run(*(a.format(topic=topic_name) for a in argv))
    assert (code, out) == (1, "")
    assert message in error_line(capsys)
    assert user_topics() == before


def test_max_messages_is_a_limit_and_zero_prints_nothing(ray_cluster, topic_name, capsys):
    run("topics", "create", topic_name, "--partitions", "2")
    run("produce", topic_name, stdin="".join(f"{i}\n" for i in range(6)))
    assert run("consume", topic_name, "--from-beginning", "--max-messages", "0") == (0, "")
    code, out = run("consume", topic_name, "--from-beginning", "--max-messages", "2",
                    "--timeout-ms", "3000")
    assert code == 0 and len(out.splitlines()) == 2
    assert capsys.readouterr().err == "Processed a total of 2 messages\n"  # as Kafka's
    assert run("consume", topic_name, "--partition", "2")[0] == 1
    assert "has partitions 0..1, not 2" in error_line(capsys)
    assert capsys.readouterr().err == ""


def test_the_console_script_refuses_in_one_line_without_a_traceback(ray_cluster, topic_name):
    from raylog import Admin

    Admin().create_topic(topic_name, configs={"cleanup.policy": "compact"})
    env = {**os.environ, "RAY_ADDRESS": ray_cluster.cluster.address}
    result = subprocess.run([os.path.join(os.path.dirname(sys.executable), "raylog"),
                             "produce", topic_name], input="keyless\n", capture_output=True,
                            text=True, env=env, timeout=120)
    assert result.returncode == 1
    assert result.stdout == f"produced 0 records to {topic_name}\n"
    assert result.stderr == ("raylog: error: 1 of 1 records refused: a compacted log refuses "
                             "records without a key (line 1)\n")


# -- Kafka's habits: following, printing, JSON, dry runs -------------------------------------------

class ConsoleConsumer(Child):
    """``raylog consume ...`` as a user runs it: the console script in its own process, its
    output lines collected as they come (tests/children.py: read, stopped and killed with
    deadlines)."""

    def __init__(self, address: str, *argv: str) -> None:
        super().__init__([os.path.join(os.path.dirname(sys.executable), "raylog"), "consume",
                          *argv], env={**os.environ, "RAY_ADDRESS": address})


def produce_until_seen(topic: str, consumers: list[ConsoleConsumer], timeout: float = 90
                       ) -> int:
    """Produce ``tick-i`` records until one shows in a consumer's output (it started
    reading: a consumer from the latest offsets sees only what comes after that); returns
    how many were produced."""
    from raylog import Producer
    produced = 0

    def seen() -> bool:
        nonlocal produced
        with Producer() as producer:
            producer.send(topic, b"tick-%d" % produced).result(timeout=30)
        produced += 1
        return any("tick-" in line for c in consumers for line in c.lines)

    wait_for(seen, timeout=timeout, interval=0.5, what="a consumer printing a new record")
    return produced


def test_consume_follows_until_interrupted(ray_cluster, topic_name):
    run("topics", "create", topic_name, "--partitions", "2")
    run("produce", topic_name, stdin="old\n")
    # Started as under `make test &`, this process ignoring SIGINT: the console consumer
    # must not inherit that (tests/children.py), or the Ctrl-C below would not stop it.
    with sigint_ignored():
        consumer = ConsoleConsumer(ray_cluster.cluster.address, topic_name)  # from the latest
    with consumer:
        produced = produce_until_seen(topic_name, [consumer])
        wait_for(lambda: f"tick-{produced - 1}" in consumer.lines, timeout=60,
                 what="the last record printed")
        code = consumer.stop(signal.SIGINT)
    assert code == 0, consumer.stderr
    assert "old" not in consumer.lines and consumer.lines[-1] == f"tick-{produced - 1}"
    assert consumer.errors[-1] == f"Processed a total of {len(consumer.lines)} messages"
    assert "Traceback" not in consumer.stderr


def test_a_group_member_prints_nothing_twice_across_a_rebalance(ray_cluster, topic_name):
    """The first member printed everything; a second joins and takes partitions over: what
    the first printed was committed before it gave them up, so no record shows twice."""
    run("topics", "create", topic_name, "--partitions", "4")
    group = f"follow-{topic_name}"
    address = ray_cluster.cluster.address
    # From the beginning: a partition the second member takes over without a commit holds
    # nothing the first printed (it printed every record), and nothing produced meanwhile
    # is skipped by a start at the latest offset.
    first = ConsoleConsumer(address, topic_name, "--group", group, "--from-beginning",
                            "--print", "partition,value")
    second = None
    try:
        produce_until_seen(topic_name, [first])
        run("produce", topic_name, stdin="".join(f"a-{i}\n" for i in range(40)))
        wait_for(lambda: sum("a-" in line for line in first.lines) == 40, timeout=60,
                 what="the first member printing 40 records")
        second = ConsoleConsumer(address, topic_name, "--group", group, "--from-beginning",
                                 "--print", "partition,value")
        wait_for(lambda: len(Admin().describe_group(group)["members"]) == 2 and
                 Admin().describe_group(group)["state"] == "stable", timeout=60,
                 what="both members in the group")
        # Keyed, so they spread over the four partitions: both members get some.
        run("produce", topic_name, "--key-separator", ":",
            stdin="".join(f"k{i}:b-{i}\n" for i in range(40)))
        wait_for(lambda: sum("b-" in line for c in (first, second) for line in c.lines) >= 40,
                 timeout=60, what="the members printing 40 more records")
        # Ctrl-C for one, a supervisor's SIGTERM for the other: the same clean stop.
        assert first.stop(signal.SIGINT) == 0 and second.stop(signal.SIGTERM) == 0
    finally:
        first.kill()
        if second is not None:
            second.kill()
    printed = [line.split("\t")[1] for c in (first, second) for line in c.lines]
    ours = [v for v in printed if v[:2] in ("a-", "b-")]
    assert sorted(ours) == sorted([f"a-{i}" for i in range(40)] + [f"b-{i}" for i in range(40)])
    assert {line.split("\t")[0] for line in second.lines}  # the second took partitions over
    for member in (first, second):
        assert member.errors[-1] == f"Processed a total of {len(member.lines)} messages"
    committed = Admin().describe_group(group)
    assert committed["lag"] == 0  # both committed what they printed on exit


def test_until_end_print_and_produce_from_a_file(ray_cluster, topic_name, tmp_path):
    run("topics", "create", topic_name, "--partitions", "2")
    lines = tmp_path / "records.txt"
    lines.write_text("".join(f"k{i % 3}:v{i}\n" for i in range(30)))
    code, out = run("produce", topic_name, "--file", str(lines), "--key-separator", ":")
    assert (code, out) == (0, f"produced 30 records to {topic_name}\n")
    code, out = run("consume", topic_name, "--from-beginning", "--until-end",
                    "--print", "partition,offset,key,value")
    rows = [line.split("\t") for line in out.splitlines()]
    assert code == 0 and len(rows) == 30
    assert all(p.startswith("Partition:") and o.startswith("Offset:") for p, o, _, _ in rows)
    assert sorted(v for _, _, _, v in rows) == sorted(f"v{i}" for i in range(30))
    assert run("consume", topic_name, "--until-end") == (0, "")  # from the latest: at its end
    assert run("produce", topic_name, "--file", str(tmp_path / "missing"))[0] == 1


def test_every_list_and_describe_speaks_json(ray_cluster, topic_name):
    run("topics", "create", topic_name, "--partitions", "2", "--config", "retention.ms=60000")
    group = f"json-{topic_name}"
    run("produce", topic_name, stdin="x\ny\n")
    run("consume", topic_name, "--group", group, "--from-beginning", "--until-end")
    assert topic_name in json.loads(run("topic", "list", "--json")[1])
    [described] = json.loads(run("topics", "describe", topic_name, "--json")[1])
    assert described["configs"] == {"retention.ms": 60000} and len(described["partitions"]) == 2
    groups = json.loads(run("group", "list", "--json")[1])
    assert any(g["group_id"] == group for g in groups)
    assert json.loads(run("groups", "describe", group, "--json")[1])["lag"] == 0
    assert json.loads(run("cluster", "status", "--json")[1])["topics"] >= 1


def test_reset_offsets_changes_nothing_without_execute(ray_cluster, topic_name):
    run("topics", "create", topic_name)
    group = f"reset-{topic_name}"
    run("produce", topic_name, stdin="".join(f"{i}\n" for i in range(10)))
    run("consume", topic_name, "--group", group, "--from-beginning", "--until-end")

    def committed() -> int:
        return Admin().describe_group(group)["partitions"][0]["committed"]

    assert committed() == 10
    code, out = run("groups", "reset-offsets", group, topic_name, "--to", "earliest")
    assert code == 0 and out.splitlines()[0].split() == [
        "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"]
    assert out.splitlines()[1].split() == [group, topic_name, "0", "10", "0"]
    assert "nothing changed" in out and committed() == 10
    plan = json.loads(run("groups", "reset-offsets", group, topic_name, "--to", "3",
                          "--dry-run", "--json")[1])
    assert plan["executed"] is False and plan["offsets"][0]["new_offset"] == 3
    assert committed() == 10
    code, out = run("groups", "reset-offsets", group, topic_name, "--to", "earliest",
                    "--execute")
    assert code == 0 and "nothing changed" not in out and committed() == 0
