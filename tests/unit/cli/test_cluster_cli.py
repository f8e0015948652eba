"""``raylog cluster``: its actions' arguments, output and errors, over a fake admin client
(the cluster's side is tests/integration/test_operations.py)."""

from __future__ import annotations

import io

import pytest

from raylog.cli import cluster as cluster_cli
from raylog.cli.commands import build_parser, main
from raylog.errors import LastInSyncReplicaError, RollStoppedError, UnknownBrokerError


class FakeAdmin:
    def __init__(self, error: Exception | None = None) -> None:
        self.calls: list[tuple] = []
        self.error = error

    def drain_broker(self, broker, force, timeout_s):
        self.calls.append(("drain", broker, force, timeout_s))
        if self.error is not None:
            raise self.error
        return {"broker": broker, "moved": ["t-0", "t-3"], "left_isr": ["t-0", "t-1"],
                "still_leading": ["t-2"] if force else [], "last_in_sync": []}

    def stop_broker(self, broker):
        self.calls.append(("stop", broker))
        return {"broker": broker, "node_id": "abcdef0123456789"}

    def resume_broker(self, broker):
        self.calls.append(("resume", broker))
        return {}

    def roll(self, brokers, timeouts, on_step):
        self.calls.append(("roll", brokers, timeouts.sync_s))
        if self.error is not None:
            raise self.error
        for broker in brokers or [0, 1]:
            on_step("drain", broker)
        return brokers or [0, 1]


@pytest.fixture
def admin(monkeypatch) -> FakeAdmin:
    fake = FakeAdmin()
    monkeypatch.setattr(cluster_cli, "_admin", lambda args: fake)
    return fake


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def test_drain_moves_then_stops_and_says_how_to_resume(admin):
    code, out = run("cluster", "drain", "2")
    assert code == 0
    assert admin.calls == [("drain", 2, False, 60.0), ("stop", 2)]
    assert "broker 2 drained: 2 leaderships moved, left 2 ISRs" in out
    assert "broker 2 stopped (node abcdef012345); 'raylog cluster resume 2'" in out


def test_drain_forced_keeping_its_actors_running(admin):
    code, out = run("cluster", "drain", "1", "--force", "--timeout", "5", "--keep-running")
    assert code == 0
    assert admin.calls == [("drain", 1, True, 5.0)]
    assert "still leads (no other in-sync replica, forced): t-2" in out
    assert "'ray stop' there" in out


def test_a_refused_drain_is_one_line_and_status_1(monkeypatch, capsys):
    fake = FakeAdmin(LastInSyncReplicaError("broker 1 is the last in-sync replica of t-0"))
    monkeypatch.setattr(cluster_cli, "_admin", lambda args: fake)
    assert main(["cluster", "drain", "1"]) == 1
    assert capsys.readouterr().err == ("raylog: error: broker 1 is the last in-sync replica "
                                       "of t-0\n")
    assert fake.calls == [("drain", 1, False, 60.0)]  # not stopped


@pytest.mark.parametrize("error", [UnknownBrokerError("unknown broker 9"),
                                   RollStoppedError("the roll stopped at broker 1")])
def test_a_refused_or_stopped_roll_is_status_1(monkeypatch, capsys, error):
    monkeypatch.setattr(cluster_cli, "_admin", lambda args: FakeAdmin(error))
    assert main(["cluster", "roll", "--brokers", "9"]) == 1
    assert capsys.readouterr().err == f"raylog: error: {error}\n"


def test_roll_reports_each_step(admin):
    code, out = run("cluster", "roll", "--brokers", "2", "0", "--timeout", "90")
    assert code == 0
    assert admin.calls == [("roll", [2, 0], 90.0)]
    assert out.splitlines() == ["broker 2: drain", "broker 0: drain",
                                "rolled brokers 2, 0: every partition in sync"]


def test_resume(admin):
    assert run("cluster", "resume", "3")[0] == 0
    assert admin.calls == [("resume", 3)]


@pytest.mark.parametrize("argv", [["cluster", "drain"], ["cluster", "drain", "x"],
                                  ["cluster", "drain", "1", "--timeout", "0"],
                                  ["cluster", "drain", "-1"],
                                  ["cluster", "roll", "--brokers"],
                                  ["cluster", "roll", "--timeout", "inf"]])
def test_bad_command_lines_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_other_modules_can_add_an_action_to_the_group():
    import argparse

    commands = argparse.ArgumentParser().add_subparsers(dest="command")
    actions = cluster_cli.add_parser(commands)
    actions.add_parser("balance").set_defaults(handler=lambda args, out: out.write("planned"))
    args = commands.choices["cluster"].parse_args(["balance"])
    out = io.StringIO()
    cluster_cli.run(args, out)
    assert out.getvalue() == "planned"
    # and the real parser's group is the one add_parser builds
    assert build_parser().parse_args(["cluster", "drain", "1"]).handler is cluster_cli.cmd_drain
    # raylog/cli/balance.py's action is added that way too, and run as the others are
    from raylog.cli.balance import cmd_balance

    balance = build_parser().parse_args(["cluster", "balance"])
    assert (balance.run, balance.handler) == ("cluster", cmd_balance)


def test_status_shows_a_drained_broker(monkeypatch):
    class Status:
        def cluster_status(self):
            broker = {"node_id": "n" * 20, "host": "h", "data_dir": "/d", "replicas": [],
                      "leaders": []}
            return {"cluster_id": "c", "controller_node": "x" * 20, "controller_dir": "/c",
                    "topics": 0, "partitions": 0, "under_replicated_partitions": 0,
                    "offline_partitions": 0, "refused": [],
                    "brokers": [{**broker, "broker_id": 0, "alive": True, "draining": True},
                                {**broker, "broker_id": 1, "alive": True, "draining": False},
                                {**broker, "broker_id": 2, "alive": False, "draining": True}]}

    monkeypatch.setattr(cluster_cli, "_admin", lambda args: Status())
    code, out = run("cluster", "status")
    assert code == 0
    assert [line.split()[3] for line in out.splitlines()[2:]] == ["drain", "yes", "no"]


class NodeAdmin:
    """Brokers 0 and 2 on this machine (10.0.0.5, node aaaa...), 1 elsewhere, 3 down here."""

    def __init__(self, error: Exception | None = None) -> None:
        self.calls: list[tuple] = []
        self.error = error

    def cluster_status(self):
        def broker(b, node, host, alive=True):
            return {"broker_id": b, "node_id": node, "host": host, "alive": alive}
        return {"brokers": [broker(0, "aaaa0000", "10.0.0.5"), broker(1, "bbbb1111", "10.0.0.6"),
                            broker(2, "cccc2222", "10.0.0.5"),
                            broker(3, "dddd3333", "10.0.0.5", alive=False)]}

    def stop_brokers(self, brokers, force, timeout_s):
        self.calls.append(("stop_brokers", brokers, force, timeout_s))
        if self.error is not None:
            raise self.error
        return [{"broker": b, "moved": ["t-0"], "left_isr": ["t-0", "t-1"],
                 "still_leading": [], "stopped": {"broker": b}} for b in brokers]


@pytest.fixture
def node_admin(monkeypatch) -> NodeAdmin:
    fake = NodeAdmin()
    monkeypatch.setattr(cluster_cli, "_admin", lambda args: fake)
    monkeypatch.setattr(cluster_cli, "this_host", lambda: "10.0.0.5")
    monkeypatch.setattr(cluster_cli, "ray_stop", lambda: fake.calls.append(("ray stop",)) or 0)
    return fake


def test_stop_node_drains_and_stops_this_machines_brokers_then_stops_ray(node_admin):
    code, out = run("cluster", "stop-node")
    assert code == 0
    assert node_admin.calls == [("stop_brokers", [0, 2], False, 60.0), ("ray stop",)]
    assert out.splitlines() == [
        "broker 0 drained (1 leaderships moved, left 2 ISRs) and stopped",
        "broker 2 drained (1 leaderships moved, left 2 ISRs) and stopped"]


def test_stop_node_of_a_named_node_leaves_ray_running(node_admin):
    code, out = run("cluster", "stop-node", "--node", "bbbb", "--force", "--timeout", "7")
    assert code == 0
    assert node_admin.calls == [("stop_brokers", [1], True, 7.0)]  # no 'ray stop' here
    assert "Ray still runs on node bbbb: 'ray stop' there" in out


def test_stop_node_without_brokers_stops_ray_only(node_admin):
    node_admin.cluster_status = lambda: {"brokers": []}
    code, out = run("cluster", "stop-node")
    assert code == 0 and node_admin.calls == [("ray stop",)]
    assert out == "no live broker on this machine (10.0.0.5)\n"


def test_a_refused_stop_node_does_not_stop_ray(node_admin, capsys):
    node_admin.error = LastInSyncReplicaError("broker 2 is the last in-sync replica of t-0")
    assert main(["cluster", "stop-node", "--keep-ray"]) == 1
    assert node_admin.calls == [("stop_brokers", [0, 2], False, 60.0)]
    assert main(["cluster", "stop-node"]) == 1
    assert ("ray stop",) not in node_admin.calls
    assert "raylog: error: broker 2 is the last in-sync replica of t-0" in capsys.readouterr().err
