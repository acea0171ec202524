"""Smoke test of the engine benchmark: the whole harness, tiny settings, the `file` target.

It checks the run completes, leaves nothing behind, and writes result files of the documented shape
(every raw limit, every figure with its reference, target and verdict), not the figures' values:
a few hundred milliseconds per phase on a shared machine say nothing about performance.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from benchmarks.core.result import schema
from benchmarks.engine.figures import rejudge
from benchmarks.engine.params import MiB, make_params
from benchmarks.engine.run import run_engine_benchmark

pytestmark = pytest.mark.benchmark

ROOT = Path(__file__).resolve().parents[2]

TINY = {
    "duration_s": 1.0, "latency_seconds": 0.5, "raw_seconds": 0.3, "fsync_seconds": 0.2,
    "partitions": 2, "producers": 2, "batch_records": 50, "latency_batch_records": 20,
    "segment_bytes": 1 * MiB, "cost_bytes": 4 * MiB, "many_partitions": 20, "read_max_bytes": 1 * MiB,
    "put_threads": 2, "put_object_bytes": 1 * MiB, "get_range_bytes": 256 * 1024, "disk_block_bytes": 1 * MiB,
    "record_pool_bytes": 1 * MiB, "progress": False,
}

FIGURE_KEYS = {"ingest_throughput", "ack_latency_p99", "puts_per_gib_1p", "puts_per_gib_20p", "sequential_read",
               "peak_rss"}


def test_engine_benchmark_writes_result_files_of_the_documented_shape(tmp_path: Path) -> None:
    out = tmp_path / "results" / "engine-file.json"
    work = tmp_path / "work"
    params = make_params("file", out, quick=True, work_dir=work, profile=True, **TINY)
    console_text = io.StringIO()

    returned = run_engine_benchmark(params, Console(file=console_text, width=200))

    result = json.loads(out.read_text())
    assert result == json.loads(json.dumps(returned, default=str))
    assert result["schema"] == schema("engine") == "s3stream-benchmark-engine/1"
    assert result["target"]["spec"] == "file"
    assert {"cores", "memory_bytes", "python", "platform", "cpu_model"} <= result["machine"].keys()
    assert {"s3stream", "pyarrow", "boto3", "python"} <= result["versions"].keys()
    assert result["parameters"]["many_partitions"] == 20
    assert result["store_settings"]["ack"] == "wal"
    raw = result["raw_limits"]
    assert set(raw) == {"disk_fsync_write", "fsync_latency", "put", "put_single", "ranged_get", "ranged_get_single"}
    for limit in raw.values():
        assert limit["mb_per_s"] > 0 and limit["requests"] > 0
    assert raw["fsync_latency"]["latency_ms"]["p99_ms"] >= raw["fsync_latency"]["latency_ms"]["p50_ms"] > 0
    figures = {f["name"]: f for f in result["figures"]}
    assert set(figures) == FIGURE_KEYS
    for f in figures.values():
        assert f["value"] > 0 and f["reference"] > 0 and isinstance(f["passed"], bool)
        assert f["ratio"] == pytest.approx(f["value"] / f["reference"], rel=0.01, abs=0.002)
        assert f["target"].startswith("ratio ")
    assert result["passed"] == all(f["passed"] for f in figures.values())
    assert rejudge(result) == result  # the verdicts follow from the stored measurements alone
    m = result["measurements"]
    assert m["read"]["records"] == m["read"]["log_end_offset"] - m["read"]["log_start_offset"] > 0
    assert m["read"]["unsealed_records"] == 0
    assert m["put_cost_many"]["one_time_puts"]["manifest"] == 20  # one writer claim per partition
    assert m["put_cost_one"]["puts"]["manifest"] == m["put_cost_one"]["puts"]["segment"]  # one per seal
    assert m["latency"]["ack_latency_ms"]["count"] > 0
    probe = m["latency"]["fsync_during_phase_ms"]  # a separate process probed the disk during the phase
    assert probe["count"] > 0 and probe["p99_ms"] >= probe["p50_ms"] > 0
    appenders = m["latency"]["appenders_fsync_during_phase_ms"]  # the producers' count, append size and pace
    assert appenders["count"] > 0 and appenders["threads"] == params.producers
    assert appenders["block_bytes"] == TINY["latency_batch_records"] * params.record_bytes
    assert figures["ack_latency_p99"]["reference"] == pytest.approx(appenders["p99_ms"], rel=0.01)
    assert figures["ack_latency_p99"]["details"]["fsync_4k_during_phase_p99_ms"] == probe["p99_ms"]
    assert figures["ack_latency_p99"]["details"]["idle_fsync_p99_ms"] == raw["fsync_latency"]["latency_ms"]["p99_ms"]
    assert {"sustained_ingest", "latency_at_half_load", "sequential_read"} <= result["profiles"].keys()
    markdown = out.with_suffix(".md").read_text()
    assert "| Sustained ingest, ack=wal, flushed to target |" in markdown and "## Raw limits" in markdown
    assert "the appenders' pattern" in markdown
    assert "Sustained ingest" in console_text.getvalue()
    assert not any(work.iterdir()), "the run's scratch directory must be removed"


def test_cli_help_names_the_engine_command() -> None:
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "engine", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "--target" in proc.stdout and "--duration" in proc.stdout and "--quick" in proc.stdout


def test_cli_rejects_an_unknown_target_without_a_traceback(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "engine", "--target", "ftp", "--no-progress",
                           "--out", str(tmp_path / "x.json"), "--work-dir", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert "unknown target 'ftp'" in proc.stdout
    assert not (tmp_path / "x.json").exists()


@pytest.mark.s3
def test_s3_target_writes_under_a_run_prefix_and_deletes_it(tmp_path: Path, moto_endpoint: str) -> None:
    import boto3

    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    client.create_bucket(Bucket="bench-s3-target")
    client.put_object(Bucket="bench-s3-target", Key="pfx-other/keep", Body=b"not ours")
    out = tmp_path / "engine-s3.json"
    spec = f"s3://bench-s3-target/pfx?endpoint_url={moto_endpoint}&region=us-east-1"
    params = make_params(spec, out, quick=True, work_dir=tmp_path / "work", **TINY)

    result = run_engine_benchmark(params, Console(file=io.StringIO(), width=200))

    assert result["target"]["kind"] == "s3" and result["target"]["prefix"].startswith("pfx/s3stream-bench-")
    assert result["target"]["url"].startswith("s3://bench-s3-target/pfx")
    assert {f["name"] for f in result["figures"]} == FIGURE_KEYS
    keys = [o["Key"] for o in client.list_objects_v2(Bucket="bench-s3-target").get("Contents", [])]
    assert keys == ["pfx-other/keep"], "the run must delete everything it wrote, and only that"
