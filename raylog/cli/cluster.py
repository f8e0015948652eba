"""``raylog cluster``: the cluster's status, and operations without downtime
(docs/operations.md).

- ``status [--json]``: brokers, their nodes and health, partitions under-replicated and
  offline.
- ``drain BROKER [--force] [--timeout S] [--keep-running]``: controlled shutdown: the
  broker's leaderships move to other in-sync replicas, it leaves the ISRs, then its actors
  stop (its node serves no broker until it leaves Ray or ``resume``). Refused if it is a
  partition's last in-sync replica, unless ``--force``.
- ``resume BROKER``: undo a drain or a stop.
- ``stop-node [--node NODE] [--force] [--timeout S] [--keep-ray]``: how to stop a broker
  node: drain every broker on this machine's Ray nodes, stop them, then run ``ray stop``
  here (with NODE: that node's brokers, and no ``ray stop``). All or nothing: a refused
  drain stops nothing.
- ``roll [--brokers B ...] [--timeout S]``: restart brokers one at a time (drain, restart,
  wait until every partition is in sync, preferred leaders back); stops at the first
  problem.
- ``balance``: the partition balancer's plan, and its execution (raylog/cli/balance.py, which
  adds it as below).

The group is built by :func:`add_parser`, which returns the group's subparsers: another
module adds an action with ``actions.add_parser(NAME)`` and
``set_defaults(handler=its_function)`` (``handler(args, out) -> exit status``), and
``raylog cluster NAME`` runs it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from typing import Any, TextIO

from raylog.cli.common import connect, int_in, json_flag, print_json, short_node


def seconds(text: str) -> float:
    """An argparse type: a number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def add_parser(commands: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """Add ``raylog cluster`` and its actions to ``commands``; return the actions'
    subparsers (for other modules' actions)."""
    cluster = commands.add_parser(
        "cluster", help="cluster status; drain, resume, roll and balance brokers without downtime")
    cluster.set_defaults(run="cluster")
    actions = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")

    status = actions.add_parser("status", help="brokers, their health, partitions at risk")
    status.set_defaults(handler=cmd_status)
    json_flag(status)

    drain = actions.add_parser(
        "drain", help="controlled shutdown of a broker: its leaderships move, then it stops",
        description="Move every leadership of BROKER to another in-sync replica, take it out "
                    "of the ISRs, then stop its actors; its node serves no broker until it "
                    "leaves Ray or 'raylog cluster resume BROKER'. Producers see retries at "
                    "most. Refused if BROKER is the last in-sync replica of a partition, "
                    "unless --force.")
    drain.set_defaults(handler=cmd_drain)
    drain.add_argument("broker", type=int_in(0), metavar="BROKER")
    drain.add_argument("--force", action="store_true",
                       help="drain even partitions it is the last in-sync replica of (they "
                            "are offline until it is back), and stop even if the replicas "
                            "were slower than --timeout")
    drain.add_argument("--timeout", type=seconds, default=60.0, metavar="S",
                       help="how long the replicas may take to take the new leaders "
                            "(default 60)")
    drain.add_argument("--keep-running", action="store_true",
                       help="drain only: leave its actors running (stop the node yourself, "
                            "'ray stop' on it)")
    json_flag(drain)

    resume = actions.add_parser("resume", help="undo a drain: the broker serves and leads "
                                               "again")
    resume.set_defaults(handler=cmd_resume)
    resume.add_argument("broker", type=int_in(0), metavar="BROKER")

    stop_node = actions.add_parser(
        "stop-node", help="stop this machine's Ray node: drain and stop its brokers, then "
                          "'ray stop'",
        description="Drain every broker served by this machine's Ray nodes (or by --node), "
                    "stop them, then run 'ray stop' here: the way to stop a broker node "
                    "without a failed send ('ray stop' alone signals the raylet, which takes "
                    "its brokers down undrained). Refused, with nothing stopped, if a broker "
                    "is the last in-sync replica of a partition, unless --force.")
    stop_node.set_defaults(handler=cmd_stop_node)
    stop_node.add_argument("--node", metavar="NODE",
                           help="the Ray node id (or its first characters, as 'raylog cluster "
                                "status' prints them) whose brokers to stop, here or on "
                                "another machine; then 'ray stop' is not run (stop that node "
                                "yourself) (default: the nodes at this machine's address)")
    stop_node.add_argument("--force", action="store_true",
                           help="drain even partitions a broker is the last in-sync replica "
                                "of (offline until it is back)")
    stop_node.add_argument("--timeout", type=seconds, default=60.0, metavar="S",
                           help="how long the replicas may take to take each broker's new "
                                "leaders (default 60)")
    stop_node.add_argument("--keep-ray", action="store_true",
                           help="drain and stop the brokers only; do not run 'ray stop'")
    json_flag(stop_node)

    roll = actions.add_parser(
        "roll", help="restart brokers one at a time without downtime",
        description="For each broker in turn: drain it, restart its actors, wait until every "
                    "partition is in sync again, give the preferred replicas their "
                    "leaderships back. Refused on a cluster with offline partitions; stops "
                    "at the first problem.")
    roll.set_defaults(handler=cmd_roll)
    roll.add_argument("--brokers", type=int_in(0), nargs="+", metavar="BROKER",
                      help="the brokers to restart, in this order (default: every live "
                           "broker)")
    roll.add_argument("--timeout", type=seconds, default=300.0, metavar="S",
                      help="how long a restarted broker may take to be in sync again "
                           "(default 300)")
    return actions


def run(args: argparse.Namespace, out: TextIO) -> int:
    return args.handler(args, out)


def _admin(args: argparse.Namespace) -> Any:
    from raylog import Admin

    return Admin(cluster=connect(args))


def cmd_status(args: argparse.Namespace, out: TextIO) -> int:
    status = _admin(args).cluster_status()
    if args.json:
        print_json(status, out)
        return 0
    out.write(f"cluster {status['cluster_id']}: controller on node "
              f"{short_node(status['controller_node'])} ({status['controller_dir']}), "
              f"{status['topics']} topics, {status['partitions']} partitions, "
              f"{status['under_replicated_partitions']} under-replicated, "
              f"{status['offline_partitions']} offline\n")
    out.write(f"{'broker':>6}  {'node':<14}{'host':<16}{'alive':<7}{'replicas':>9}"
              f"{'leaders':>9}  data directory\n")
    for broker in status["brokers"]:
        out.write(f"{broker['broker_id']:>6}  {short_node(broker['node_id']):<14}"
                  f"{broker['host'] or '-':<16}{_alive(broker):<7}"
                  f"{len(broker['replicas']):>9}{len(broker['leaders']):>9}  "
                  f"{broker['data_dir'] or '-'}\n")
    for refused in status["refused"]:
        out.write(f"refused node {short_node(refused['node_id'])}: {refused['reason']}\n")
    return 0


def _alive(broker: dict[str, Any]) -> str:
    """"yes", "no", or "drain" for a running broker that is drained."""
    if broker.get("draining") and broker["alive"]:
        return "drain"
    return "yes" if broker["alive"] else "no"


def cmd_drain(args: argparse.Namespace, out: TextIO) -> int:
    admin = _admin(args)
    drained = admin.drain_broker(args.broker, force=args.force, timeout_s=args.timeout)
    if not args.keep_running:
        drained["stopped"] = admin.stop_broker(args.broker)
    if args.json:
        print_json(drained, out)
        return 0
    out.write(f"broker {args.broker} drained: {len(drained['moved'])} leaderships moved, "
              f"left {len(drained['left_isr'])} ISRs\n")
    if drained["still_leading"]:
        out.write(f"still leads (no other in-sync replica, forced): "
                  f"{', '.join(drained['still_leading'])}\n")
    if args.keep_running:
        out.write(f"its actors still run: stop its node ('ray stop' there), or "
                  f"'raylog cluster resume {args.broker}'\n")
    else:
        out.write(f"broker {args.broker} stopped (node {short_node(drained['stopped']['node_id'])}"
                  f"); 'raylog cluster resume {args.broker}' serves it again\n")
    return 0


def cmd_resume(args: argparse.Namespace, out: TextIO) -> int:
    _admin(args).resume_broker(args.broker)
    out.write(f"broker {args.broker} resumed: it leads and joins ISRs again as it catches "
              f"up ('raylog topics elect-leaders' gives its leaderships back)\n")
    return 0


def this_host() -> str:
    """This machine's address as Ray's nodes on it report it."""
    import ray

    return ray.util.get_node_ip_address()


def ray_stop() -> int:
    """Disconnect, then ``ray stop`` on this machine; its exit status."""
    import ray

    ray.shutdown()
    ray_script = shutil.which("ray") or os.path.join(os.path.dirname(sys.executable), "ray")
    return subprocess.call([ray_script, "stop"])


def node_brokers(status: dict[str, Any], node: str | None, host: str | None) -> list[int]:
    """The live brokers served by ``node`` (a node id or its beginning), or by the nodes at
    ``host`` if no node is given."""
    return [b["broker_id"] for b in status["brokers"] if b["alive"] and (
        b["node_id"] is not None and b["node_id"].startswith(node) if node
        else b["host"] == host)]


def cmd_stop_node(args: argparse.Namespace, out: TextIO) -> int:
    admin = _admin(args)
    host = None if args.node else this_host()
    where = f"node {args.node}" if args.node else f"this machine ({host})"
    brokers = node_brokers(admin.cluster_status(), args.node, host)
    stopped = admin.stop_brokers(brokers, force=args.force, timeout_s=args.timeout) \
        if brokers else []
    if args.json:
        print_json({"brokers": stopped}, out)
    elif not brokers:
        out.write(f"no live broker on {where}\n")
    for drained in [] if args.json else stopped:
        out.write(f"broker {drained['broker']} drained ({len(drained['moved'])} leaderships "
                  f"moved, left {len(drained['left_isr'])} ISRs) and stopped\n")
        if drained["still_leading"]:
            out.write(f"  offline until it is back (forced): "
                      f"{', '.join(drained['still_leading'])}\n")
    if args.keep_ray or args.node:
        if not args.json:
            out.write(f"Ray still runs on {where}: 'ray stop' there when ready ('raylog "
                      f"cluster resume BROKER' serves a broker again)\n")
        return 0
    out.flush()
    return ray_stop()


def cmd_roll(args: argparse.Namespace, out: TextIO) -> int:
    from raylog.client.operations import RollTimeouts

    def said(step: str, broker: int) -> None:
        out.write(f"broker {broker}: {step}\n")
        out.flush()

    done = _admin(args).roll(args.brokers, RollTimeouts(sync_s=args.timeout), on_step=said)
    out.write(f"rolled brokers {', '.join(map(str, done))}: every partition in sync\n")
    return 0
