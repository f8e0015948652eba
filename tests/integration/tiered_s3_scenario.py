"""Tiered storage against a real S3-compatible server on loopback (moto's server mode), on
a cluster of its own: run by test_tiered_s3.py as ``python -m
tests.integration.tiered_s3_scenario s3 ROOT`` (the store is a cluster setting of the
controller's environment, so it needs its own cluster, and a process joins one Ray cluster
at a time). Copies, a read from offset 0 (a consumer's, and Ray Data's without credentials
in what it sends), whole-log retention, and the store stopped and
started again (on the same port; moto keeps its buckets in this process) while producers
and hot readers go on. Prints what it saw as JSON."""

from __future__ import annotations

import ctypes
import json
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import ray
from pyarrow import fs

from actors.serving import IDLE_MAINTENANCE_ENV
from raylog import Admin, Consumer, TopicPartition
from raylog.metadata.hosts import PROCESSES_ENV
from raylog.tiered.settings import SETTINGS_ENV, URI_ENV
from raylog.tiered.store import ObjectStore
from raylog.util.cluster_names import NAMESPACE
from tests.integration.restart_scenario import Nodes, wait_for
from tests.integration.sent_arguments import SentArguments
from tests.integration.test_tiered import (
    CONFIGS,
    PAD,
    copied,
    leader_view,
    produce,
    read_all,
    retention_done,
)

BUCKET = "raylog-tiered"
# Distinct values (moto takes any): the Ray Data read below looks for them in what it sent.
SECRETS = {"access_key": "AKIDraylogS3test", "secret_key": "raylog-secret-wJalrXUtnFEMI",
           "session_token": "raylog-token-FwoGZXIvYXdz"}
CREDENTIALS = {**SECRETS, "region": "us-east-1", "scheme": "http"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_s3(port: int) -> Any:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    return server


def folder_count(store: ObjectStore, topic: str, topic_id: str) -> int:
    return len(store.list_folders(f"{store.prefix}/{topic}-{topic_id}/0"))


def freed_with_secrets(_actor: Any, times: int = 64) -> None:
    """Run in an actor's process (``__ray_call__``): allocate blocks of many sizes filled
    with the secrets' values over and over, and free them, so that what the process
    allocates next (a call's answer Ray serializes, say) starts as the secrets. Byte for
    byte what the cold-read gateway's own signed S3 requests leave there now and then (the
    access key in ``Authorization``, the session token in ``x-amz-security-token``): a
    gap Ray left unwritten in an answer then shows them every time, not in one run of
    several."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    pattern = b"".join(v.encode() for v in SECRETS.values())
    for _ in range(times):
        blocks = []
        for size in (*range(32, 4096, 32), 8192, 16384, 65536):
            block = libc.malloc(size)
            ctypes.memmove(block, (pattern * (size // len(pattern) + 1))[:size], size)
            blocks.append(block)
        for block in blocks:
            libc.free(block)


def soil(handle: Any, calls: int = 16) -> None:
    """freed_with_secrets in ``handle``'s process, on as many of its threads as take one of
    ``calls`` calls at once (the gateway answers on several)."""
    ray.get([handle.__ray_call__.remote(freed_with_secrets) for _ in range(calls)],
            timeout=60)


@ray.remote(num_cpus=0)
def _take(value: Any) -> None:
    """A task that takes an argument (recorder_sees sends it one)."""


def _closing_over(marker: str) -> Any:
    """A function holding ``marker`` in its closure (cloudpickle sends it by value)."""
    def closure() -> str:
        return marker
    return closure


def recorder_sees() -> dict[str, bool]:
    """The recorder's control: a value this driver does send to Ray (a task's argument, a
    ``ray.put``, a remote function's closure) is found in what it recorded, each way. A
    recorder that missed them would let ray_data_read's check pass whatever was sent."""
    seen = {}
    for how in ("argument", "put", "closure"):
        marker = f"recorder-control-{how}-{uuid.uuid4().hex}"
        sent = SentArguments()
        with sent.recording():
            if how == "argument":
                ray.get(_take.remote(marker), timeout=60)
            elif how == "put":
                ray.put(marker)
            else:
                ray.get(ray.remote(num_cpus=0)(_closing_over(marker)).remote(), timeout=60)
        seen[how] = marker.encode() in sent.blob()
    return seen


def ray_data_read(admin: Admin, view: dict, records: list) -> dict[str, Any]:
    """Ray Data reads the topic, its cold part through the cold-read gateway of the
    leader's node, which asks the controller for the store's credentials: the rows are the
    consumer's, and no secret is in any argument this driver sent to Ray nor in the
    Dataset, though the freed memory of the gateway and of the leader's broker holds them
    when they answer (soil). Then the gateway is killed and a read again gives the same
    rows (the controller starts a new gateway, under a new name, which asks for the
    credentials again)."""
    from raylog.integrations.ray_data import read_topic

    def rows() -> list[tuple]:
        # The gateway the read will use (started by the controller if there is none) and
        # the leader's broker (the hot blocks'; it uploads to the store, so its memory
        # holds signed requests too), with the secrets in the memory they free: the
        # answers they serialize next must not carry them.
        soil(ray.get_actor(admin._cluster.controller.cold_reader(node), namespace=NAMESPACE))
        soil(admin._cluster.topic("cold", refresh=True).partitions[0].leader_client().handle)
        sent = SentArguments()
        with sent.recording():
            dataset = read_topic("cold", end_offset={"cold": {0: 40}}, timeout_ms=60_000)
            found = sorted((r["offset"], r["key"], r["value"]) for r in dataset.take_all())
            sent.chunks.append(ray.cloudpickle.dumps(dataset))
        sent_secrets.extend(name for name, value in SECRETS.items()
                            if value.encode() in sent.blob())
        return found

    sent_secrets: list[str] = []
    expected = [(r.offset, r.key, r.value) for r in records]
    node = admin._cluster.topic("cold", refresh=True).partitions[0].leader_client().node_id
    first = rows()
    gateway = admin._cluster.controller.cold_reader(node)
    ray.kill(ray.get_actor(gateway, namespace=NAMESPACE), no_restart=True)
    again = rows()
    return {"dataset_cold_records": view["local_log_start"] - view["log_start"],
            "dataset_rows_ok": first == expected and again == expected,
            "dataset_secrets_sent": sent_secrets,
            "recorder_sees": recorder_sees(),
            "dataset_gateways": [gateway, admin._cluster.controller.cold_reader(node)]}


def s3(root: Path) -> dict[str, Any]:
    port = free_port()
    server = start_s3(port)
    settings = {"endpoint_override": f"127.0.0.1:{port}", **CREDENTIALS}
    store = ObjectStore.from_uri(f"s3://{BUCKET}/cold", settings)
    fs.S3FileSystem(allow_bucket_creation=True, **settings).create_dir(BUCKET)

    cluster_env = {"head_env": {URI_ENV: f"s3://{BUCKET}/cold",
                                SETTINGS_ENV: json.dumps(settings)},
                   "env": {IDLE_MAINTENANCE_ENV: "2", PROCESSES_ENV: "1"}}
    nodes = Nodes(root, ["b0", "b1"], **cluster_env)
    out: dict[str, Any] = {}
    try:
        admin = Admin()
        admin.create_topic("cold", 1, 2, CONFIGS)
        topic_id = admin._cluster.topic("cold").topic_id
        produce("cold", 0, 40)
        view = wait_for(lambda: copied(admin, "cold", 3), timeout=120, what="copies to S3")
        out["store"] = view["store"]
        out["copied_segments"] = len(view["remote"])
        out["folders"] = folder_count(store, "cold", topic_id)
        records = read_all("cold", 40)
        out["offsets_from_0"] = [r.offset for r in records] == list(range(40))
        out |= ray_data_read(admin, view, records)

        # The store goes away: producers and readers of the local tail go on.
        server.stop()
        started = time.monotonic()
        produce("cold", 40, 20)
        out["produce_while_down_s"] = round(time.monotonic() - started, 2)
        tp = TopicPartition("cold", 0)
        with Consumer(enable_auto_commit=False) as consumer:
            consumer.assign([tp])
            consumer.seek(tp, 55)
            hot: list = []
            wait_for(lambda: hot.extend(consumer.poll(timeout_ms=200)) or len(hot) >= 5,
                     timeout=60, what="hot records while the store is down")
        out["hot_while_down"] = [r.offset for r in hot]
        stalled = leader_view(admin, "cold")["remote"][-1].end_offset

        # It comes back (same port, same buckets): copies resume.
        server = start_s3(port)
        resumed = wait_for(lambda: (v := leader_view(admin, "cold"))["remote"][-1].end_offset
                           > max(stalled, 45) and v, timeout=180, what="copies resumed")
        out["resumed_past"] = [stalled, resumed["remote"][-1].end_offset]
        records = read_all("cold", 60)
        out["offsets_after_outage"] = [r.offset for r in records] == list(range(60))
        out["values_ok"] = all(r.value == b"v%05d" % r.offset + PAD for r in records)

        # Whole-log retention deletes in S3 too.
        admin.alter_configs("cold", {"retention.bytes": 4096})
        after = wait_for(lambda: retention_done(admin, "cold", 4096), timeout=120,
                         what="remote segments deleted")
        out["log_start_after_retention"] = after["log_start"]
        wait_for(lambda: folder_count(store, "cold", topic_id) == len(
            leader_view(admin, "cold")["remote"]), timeout=60, what="S3 folders deleted")
        out["folders_after_retention"] = folder_count(store, "cold", topic_id)
        kept = leader_view(admin, "cold")
        out["remote_after_retention"] = len(kept["remote"])
        nodes.stop()

        # The whole cluster again, nodes in another order: the remote log is read back
        # from the metadata topic, and a consumer reads from its start across both logs.
        nodes = Nodes(root, ["b1", "b0"], **cluster_env)
        admin = Admin()
        back = wait_for(lambda: (v := leader_view(admin, "cold"))["remote"] and v,
                        timeout=120, what="the remote log after the restart")
        out["restart_same_remote"] = [s.segment_id for s in back["remote"]][:len(
            kept["remote"])] == [s.segment_id for s in kept["remote"]]
        out["restart_log_start"] = [kept["log_start"], back["log_start"]]
        offsets = [r.offset for r in read_all("cold", 60)]
        out["restart_offsets_ok"] = offsets == list(range(back["log_start"], 60))
    finally:
        nodes.stop()
        server.stop()
    return out


SCENARIOS = {"s3": s3}

if __name__ == "__main__":
    scenario, root = sys.argv[1], Path(sys.argv[2])
    print(json.dumps(SCENARIOS[scenario](root)))
