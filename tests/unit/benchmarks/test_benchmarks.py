"""The benchmark scripts start, and the storage one writes the figures its issue names.

Figures are never compared with anything here: the machine is shared and noisy.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"


@pytest.mark.parametrize("script", ["storage", "produce_consume", "groups", "analytics", "density",
                                    "replication", "schemas", "controller_restart",
                                    "broker_scaling", "compaction", "failover",
                                    "log_opening", "kafka_records", "gateway_security",
                                    "transactions", "roll", "ray_hops"])
def test_each_benchmark_explains_its_options(script, monkeypatch, capsys):
    """Its command line as ``python benchmarks/SCRIPT.py --help`` gives it (the scripts'
    folder first on sys.path), in this process: a subprocess each spent some 1.5 s importing
    what this process imported once."""
    path = BENCHMARKS / f"{script}.py"
    assert 'if __name__ == "__main__":' in path.read_text()  # it runs as a script
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(f"benchmark_{script}", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look it up there
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit) as exited:
        module.main(["--help"])
    out = capsys.readouterr().out
    assert exited.value.code == 0, out
    assert "--quick" in out and "--json" in out


def test_storage_benchmark_writes_its_figures(monkeypatch, tmp_path, capsys):
    """Its command line end to end, on 50,000 records instead of --quick's 1.5 million: the
    figures and the table are the same, only the work behind them is smaller."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import storage

    monkeypatch.setattr(storage, "QUICK", storage.Mode("test", records=50_000, repetitions=1,
                                                       append_rounds=1))
    out = tmp_path / "storage.json"
    assert storage.main(["--quick", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    for name in ("encode_records_per_s", "append_mb_per_s", "raw_write_mb_per_s",
                 "read_records_per_s", "read_arrow_records_per_s"):
        assert figures[name] > 0, name
    assert "| (c) read to Arrow |" in capsys.readouterr().out


def test_kafka_records_benchmark_measures_every_codec_and_shape(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import kafka_records

    result = kafka_records.run(kafka_records.Mode("tiny", records=2000, repetitions=1),
                               tmp_path)
    for direction in ("to_raylog", "to_kafka"):
        for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
            for shape in kafka_records.SHAPES:
                assert result[f"{direction}_{codec}_{shape}_records_per_s"] > 0
        assert result[f"{direction}_python_none_1000_records_per_s"] > 0
    assert set(result["targets"]) == set(kafka_records.TARGETS)
    assert "| to_kafka | zstd | 16kb |" in kafka_records.table(result)


# -- the suite's pure parts: percentiles, targets, the report, a missing Redis ------------------

@pytest.fixture
def suite_modules(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import suite_peers
    import suite_report

    return suite_report, suite_peers


def made_up_runs(redis: bool = True) -> tuple[dict, dict]:
    """What the suite's single node and its 3 brokers return, figures invented."""
    single = {"produce_records_per_s": 1_200_000.0, "produce_arrow_records_per_s": 4e6,
              "consume_records_per_s": 2.5e6, "consume_group_records_per_s": 3e6,
              "e2e_p50_ms": 3.0, "e2e_p99_ms": 25.0, "e2e_p999_ms": 40.0,
              "e2e_default_p50_ms": 4.0, "e2e_default_p99_ms": 9.0, "e2e_default_p999_ms": 12.0,
              "redis_produce_records_per_s": 200_000.0 if redis else None,
              "redis_consume_records_per_s": 400_000.0 if redis else None,
              "queue_produce_records_per_s": 500_000.0, "queue_consume_records_per_s": 5e5,
              "produce_records_per_cpu_s": 1.3e6,
              "produce_arrow_uncompressed_records_per_s": 2e6,
              "lz4_compress_records_per_s": 5e6, "page_cache_write_records_per_s": 4e6,
              "actor_call_p50_ms": 1.5}
    matrix = {"cells": [{"value_bytes": 1000, "producers": 3, "replication_factor": 3,
                         "acks": "all", "records_per_s": 80_000.0}],
              "rf1_acks1_records_per_s": 1_000_000.0, "rf3_acksall_records_per_s": 600_000.0,
              "rf3_acksall_fsync_records_per_s": 150_000.0}
    return single, matrix


def made_up_results(redis: bool = True) -> dict:
    """A results document of the suite's shape, figures invented."""
    import suite_report

    single, matrix = made_up_runs(redis)
    figures = suite_report.headline_figures(single, matrix)
    run = {"offered_records_per_s": 10_000, "p50_ms": 3.0, "p99_ms": 25.0, "p999_ms": 40.0,
           "max_ms": 41.0, "samples": 1000}
    return {
        **figures, "targets": suite_report.targets_report(figures), "mode": "quick",
        "finished_at": "2026-11-25 12:00 UTC", "wall_seconds": 200.0,
        "single_node": {"produce_records_per_cpu_s": single["produce_records_per_cpu_s"]},
        "replicated": matrix,
        "latency": {"runs": [{"linger_ms": 0, **run}, {"linger_ms": 5, **run}]},
        "curve": {"offered_records_per_s": 50_000, "defaults": {"linger_ms": 5,
                                                                "batch_size": 4096},
                  "points": [{"linger_ms": lg, "batch_size": size, "records_per_s": 1e6,
                              "p50_ms": 2.0, "p99_ms": 9.0}
                             for lg, size in ((0, 4096), (5, 4096), (5, 1024))]},
        "redis": {"available": True, "version": "7.0.15", "command": "redis-server --save ''",
                  "client_version": "8.1.0", "hiredis": True, "workload": "XADD"} if redis
        else {"available": False, "reason": "redis-server is not installed"},
        "queue": {"workload": "batches of 1,000"}, "method": ["how"],
        "machine": {"cpu_count": 2, "cpu_model": "cpu", "python": "3.11", "ray": "2.60.0",
                    "pyarrow": "26", "load_average_1m": {"start": 0.5, "end": 0.7}},
    }


def test_percentiles_are_nearest_rank(suite_modules):
    report, _ = suite_modules
    samples = list(range(1, 1001))  # 1 .. 1000 ms
    assert report.percentile(samples, 50) == 500
    assert report.percentile(samples, 99) == 990
    assert report.percentile(samples, 99.9) == 999
    assert report.percentile(samples, 100) == 1000
    assert report.percentile([7.5], 99.9) == 7.5  # one sample is every percentile
    assert report.percentile([3, 1, 2], 50) == 2  # order does not matter
    summary = report.latency_summary([1.0, 2.0, 3.0, 10.0])
    assert (summary["p50_ms"], summary["p99_ms"], summary["max_ms"]) == (2.0, 10.0, 10.0)
    with pytest.raises(ValueError):
        report.percentile([], 50)
    with pytest.raises(ValueError):
        report.percentile(samples, 0)


def test_results_lead_with_every_required_figure(suite_modules):
    report, _ = suite_modules
    single, matrix = made_up_runs(redis=False)
    figures = report.headline_figures(single, matrix)
    assert set(report.REQUIRED_KEYS) <= figures.keys()
    assert figures["produce_mb_per_s"] == 120.0 and figures["rf3_over_rf1"] == 0.6
    assert figures["produce_rf3_acksall_fsync_records_per_s"] == 150_000.0
    assert figures["rf3_fsync_over_rf3"] == 0.25
    assert figures["produce_vs_queue"] == 2.4
    assert figures["redis_produce_records_per_s"] is None and figures["produce_vs_redis"] is None
    del single["consume_records_per_s"]
    with pytest.raises(KeyError):  # a figure the run did not return fails, not a silent None
        report.headline_figures(single, matrix)


def test_the_machines_limits_are_ratios_of_the_same_run(suite_modules):
    report, _ = suite_modules
    single, matrix = made_up_runs()
    figures = report.headline_figures(single, matrix)
    assert figures["vs_lz4_limit"] == 0.8  # send_batch 4 M/s, lz4 alone 5 M/s
    assert figures["vs_actor_call_p50"] == 2.0  # e2e p50 3 ms (linger 0), a call 1.5 ms
    assert figures["vs_page_cache_limit"] == 0.5  # uncompressed 2 M/s, the writes 4 M/s
    targets = report.targets_report(figures)
    assert targets["vs_lz4_limit"]["met"] is True  # at least 0.8
    assert targets["vs_actor_call_p50"]["met"] is True
    assert targets["produce_arrow_uncompressed_records_per_s"]["met"] is False  # 2 M < 10 M
    single["e2e_p50_ms"] = 3.0 * 1.5  # exactly 3x: "within 3x" is met
    assert report.targets_report(report.headline_figures(single, matrix))[
        "vs_actor_call_p50"]["met"] is True
    single["e2e_p50_ms"] = 5.0
    assert report.targets_report(report.headline_figures(single, matrix))[
        "vs_actor_call_p50"]["met"] is False


def test_the_listener_is_compared_with_kafka_and_absent_without_it(suite_modules):
    report, _ = suite_modules
    single, matrix = made_up_runs()
    figures = report.headline_figures(single, matrix)
    assert figures["vs_kafka_listener_produce"] is None  # Kafka did not run
    assert figures["kafka_listener_consume_records_per_s"] is None
    single |= {"kafka_produce_records_per_s": 1e6, "kafka_consume_records_per_s": 4e5,
               "kafka_listener_produce_records_per_s": 5e5,
               "kafka_listener_consume_records_per_s": 6e5}
    figures = report.headline_figures(single, matrix)
    assert figures["vs_kafka_listener_produce"] == 0.5
    assert figures["vs_kafka_listener_consume"] == 1.5
    assert figures["vs_kafka_produce"] == 1.2  # raylog's own clients, unchanged


def test_the_report_shows_the_listener_and_the_limits_beside_their_peers(suite_modules):
    report, _ = suite_modules
    results = made_up_results()
    results |= {"kafka_listener_produce_records_per_s": 500_000.0,
                "kafka_produce_records_per_s": 1_000_000.0, "vs_kafka_listener_produce": 0.5}
    kafka = report.kafka_table(results)
    lines = kafka.splitlines()
    produce = next(i for i, line in enumerate(lines) if line.startswith("| produce, 1 producer"))
    assert lines[produce + 1].startswith("| producer process: records per CPU-second")
    assert "| produce as above, confluent-kafka -> raylog's Kafka listener (records/s) | " \
        "500,000 | 1,000,000 | 0.50x | - |" in kafka
    assert "| consume as above, confluent-kafka <- raylog's Kafka listener (records/s) | - | " \
        "- | - | - |" in kafka
    e2e = next(i for i, line in enumerate(lines) if "p99 at 10,000 records/s, linger 5" in line)
    assert lines[e2e + 1].startswith("| end-to-end p50 / p99.9, linger 5 ms (ms) | 4.00 / 12.00")
    limits = report.limits_table(results)
    assert "(the page cache) | 2,000,000 | 4,000,000 | 0.50x | >= 10,000,000: **missed** |" \
        in limits
    assert "on one core | 4,000,000 | 5,000,000 | 0.80x | >= 0.8: met |" in limits
    assert "p50 | 3.00 | 1.50 | 2.00x | <= 3: met |" in limits
    assert limits in report.results_markdown(results)


def test_lz4_alone_compresses_what_send_batch_would(monkeypatch):
    import pyarrow as pa

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import suite_raylog

    from raylog.records import payload
    from raylog.records.header import HEADER_SIZE, Codec

    values = [b"%08d" % i * 12 for i in range(3000)]
    payloads = suite_raylog.uncompressed_payloads(pa.table({"value": values}), 6)
    encoded = b"".join(payloads)
    assert encoded.count(values[1234]) == 1  # every value once, framed as Arrow IPC
    assert suite_raylog.compress_all(payloads) == sum(
        len(payload.compress(p)) for p in payloads)
    # what the producer puts after the header is that compression of the same stream
    columns = pa.Table.from_pydict({"timestamp": [0] * 3, "key": [None] * 3,
                                    "value": values[:3], "headers": [[]] * 3},
                                   schema=payload.PAYLOAD_SCHEMA)
    raw = payload.encode(columns, codec=Codec.NONE)[HEADER_SIZE:]
    assert payload.encode(columns, codec=Codec.LZ4)[HEADER_SIZE:] == payload.compress(raw)


def test_targets_say_met_missed_or_not_measured(suite_modules):
    report, _ = suite_modules
    figures = {"produce_records_per_s": 1_000_000, "e2e_p50_ms": 5.0, "e2e_p99_ms": 19.9,
               "consume_records_per_s": 1_999_999, "produce_vs_redis": None}
    targets = report.targets_report(figures)
    assert targets["produce_records_per_s"]["met"] is True  # at least the bound
    assert targets["e2e_p50_ms"]["met"] is False  # "under 5 ms": 5.0 is not under
    assert targets["e2e_p99_ms"]["met"] is True
    assert targets["consume_records_per_s"]["met"] is False
    assert targets["produce_vs_redis"]["met"] is None
    ratios = {"produce_records_per_s": 3.0, "queue_produce_records_per_s": 1.0,
              "redis_produce_records_per_s": None}
    report.add_ratios(ratios)
    assert ratios["produce_vs_queue"] == 3.0 and ratios["produce_vs_redis"] is None


def test_the_report_writes_json_markdown_and_plots(suite_modules, tmp_path):
    report, _ = suite_modules
    pytest.importorskip("matplotlib")  # the bench extra
    results = made_up_results()
    written = report.write_results(tmp_path, results)
    assert sorted(p.name for p in written) == sorted(
        ["results.json", "results.md", *report.PLOTS])
    loaded = json.loads((tmp_path / "results.json").read_text())
    assert all(key in loaded for key in report.REQUIRED_KEYS)
    for name in report.PLOTS:
        assert (tmp_path / name).read_bytes().startswith(b"\x89PNG")
    text = (tmp_path / "results.md").read_text()
    assert "| produce, 1 producer, 100 B | 1,200,000 | 200,000 | 500,000 | 6.00x | 2.40x |" in text
    assert "< 20: **missed**" in text  # p99 of 25 ms
    assert "redis-server 7.0.15" in text
    assert "| rf 3 acks=all with flush.messages=1 / without (1 producer, 100 B, 3 brokers) | " \
        "0.25x |" in text


def test_a_missing_redis_is_reported_not_fatal(suite_modules, monkeypatch):
    report, peers = suite_modules
    monkeypatch.setattr(peers.shutil, "which", lambda name: None)
    monkeypatch.setattr(peers.Path, "exists", lambda self: False)
    assert peers.redis_server_path() is None
    reason = peers.missing_redis_reason()
    assert "redis-server is not installed" in reason
    with peers.redis_or_none() as (server, why):
        assert server is None and why == reason
    assert peers.redis_info(None, reason) == {"available": False, "reason": reason}
    text = report.results_markdown(made_up_results(redis=False))
    assert "Redis Streams: **not measured**: redis-server is not installed" in text
    assert "| produce, 1 producer, 100 B | 1,200,000 | - (missing: see below) |" in text


def test_the_readme_section_is_replaced_between_its_markers(suite_modules):
    report, _ = suite_modules
    text = f"intro\n\n{report.README_START}\nold table\n{report.README_END}\n\nafter\n"
    replaced = report.replace_section(text, f"{report.README_START}\nnew\n{report.README_END}")
    assert "old table" not in replaced and "\nnew\n" in replaced
    assert replaced.startswith("intro") and replaced.endswith("after\n")
    with pytest.raises(ValueError):
        report.replace_section("no markers", "x")


def test_the_suite_explains_its_options():
    done = subprocess.run([sys.executable, str(BENCHMARKS / "suite.py"), "--help"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--quick" in done.stdout and "--out" in done.stdout and "--publish" in done.stdout


def test_raylog_bench_hands_every_argument_to_the_suite(capfd):
    from raylog.cli import main

    assert main(["bench", "--quick", "--help"]) == 0  # --quick not taken by raylog's parser
    assert "usage: suite.py" in capfd.readouterr().out
    assert main(["bench", "--bogus"]) == 2  # the suite's exit status is the command's
    assert "suite.py: error: unrecognized arguments: --bogus" in capfd.readouterr().err


# -- the latency probes' polling loop (suite_raylog.StampedProbe), over fake consumers -----------

class _RaylogRecord:
    def __init__(self, value: bytes) -> None:
        self.value = value


class _RaylogConsumer:
    """raylog's Consumer.poll: the records of one poll at a time."""

    def __init__(self, polls: list[list]) -> None:
        self.polls = polls

    def poll(self, timeout_ms: int) -> list:
        return self.polls.pop(0) if self.polls else []


class _KafkaMessage:
    def __init__(self, value: bytes, error: str | None = None) -> None:
        self._value, self._error = value, error

    def value(self) -> bytes:
        return self._value

    def error(self) -> str | None:
        return self._error


class _KafkaConsumer:
    """confluent-kafka's poll (the first message or None) and consume (the rest)."""

    def __init__(self, messages: list) -> None:
        self.messages = messages

    def poll(self, timeout: float):
        return self.messages.pop(0) if self.messages else None

    def consume(self, n: int, timeout: float) -> list:
        taken, self.messages = self.messages[:n], self.messages[n:]
        return taken


def _probe(remote_class, consumer):
    """The class behind a probe actor, made without its client or Ray, over ``consumer``."""
    import suite_raylog

    probe = object.__new__(remote_class.__ray_actor_class__)
    suite_raylog.StampedProbe.__init__(probe, consumer)
    return probe


def test_both_latency_probes_time_each_record_from_the_stamp_its_value_starts_with(
        monkeypatch):
    import numpy as np

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import suite_kafka
    import suite_raylog

    sent = time.monotonic_ns() - 5_000_000  # sent 5 ms ago
    value = sent.to_bytes(suite_raylog.STAMP_BYTES, "big") + b"filler"
    probes = [_probe(suite_raylog.LatencyProbe, _RaylogConsumer(
                  [[_RaylogRecord(value)] * 2, [], [_RaylogRecord(value)]])),
              _probe(suite_kafka.KafkaLatencyProbe, _KafkaConsumer(
                  [_KafkaMessage(value) for _ in range(3)]))]
    for probe in probes:
        probe._start(3)
        latencies = np.frombuffer(probe.latencies(), np.int64)
        assert len(latencies) == 3
        assert all(5_000_000 <= ns <= time.monotonic_ns() - sent for ns in latencies)


def test_a_kafka_message_with_an_error_fails_the_probe(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import suite_kafka

    probe = _probe(suite_kafka.KafkaLatencyProbe, _KafkaConsumer(
        [_KafkaMessage(bytes(8)), _KafkaMessage(b"", error="broker down")]))
    probe._start(2)
    with pytest.raises(RuntimeError, match="broker down"):
        probe.latencies()
