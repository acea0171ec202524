"""The benchmark's pure helpers: percentiles, PUT classification, verdicts, target names, the record pool."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest

from benchmarks.core.measure import LatencySummary, PeakRss, _uncommitted_files
from benchmarks.core.producers import make_batches
from benchmarks.core.profiler import StackSampler, _role
from benchmarks.core.result import Figure
from benchmarks.core.targets import open_target, target_slug
from benchmarks.engine.costs import classify_puts
from benchmarks.engine.params import make_params
from s3stream.base.errors import InvalidConfig, InvalidRequest

pytestmark = pytest.mark.benchmark


def test_latency_percentiles_use_nearest_rank() -> None:
    summary = LatencySummary.of_seconds([i / 1000 for i in range(1, 1001)])  # 1..1000 ms
    assert summary.count == 1000
    assert [summary.p50_ms, summary.p99_ms, summary.p999_ms, summary.max_ms] == pytest.approx([500, 990, 999, 1000])
    assert LatencySummary.of_seconds([]).count == 0


def test_puts_are_classified_by_key_and_the_first_wal_put_of_a_new_node_is_its_fence() -> None:
    log = [("PUT", "wal/n-1/00000000000000000001.wal", 60), ("GET", "wal/n-1/00000000000000000002.wal", 0),
           ("PUT", "wal/n-1/00000000000000000002.wal", 9_000_000),
           ("PUT", "logs/t/0/segments/00000000000000000000-01h.parquet", 8_000_000),
           ("PUT", "logs/t/0/manifest/00000000000000000003.json", 900), ("PUT", "topics/t/meta/1.json", 10)]
    assert classify_puts(log, node_opened=True) == {"wal_object": 1, "fence": 1, "segment": 1, "manifest": 1,
                                                    "other": 1}
    assert classify_puts(log)["wal_object"] == 2


def test_figure_verdicts_compare_the_ratio_with_the_target() -> None:
    fast = Figure.judge("k", "t", 60.0, "MB/s", 100.0, "raw", at_least=0.5)
    slow = Figure.judge("k", "t", 40.0, "MB/s", 100.0, "raw", at_least=0.5)
    late = Figure.judge("k", "t", 3.0, "ms", 1.0, "fsync", at_most=2.0)
    assert (fast.ratio, fast.passed, slow.passed, late.passed) == (0.6, True, False, False)
    with pytest.raises(ValueError):
        Figure.judge("k", "t", 1.0, "x", 1.0, "y")


def test_target_names_and_unknown_targets(tmp_path: Path) -> None:
    assert [target_slug(s) for s in ("file", "seaweedfs", "latency:s3-standard", "s3://b/p?region=x")] == [
        "file", "seaweedfs", "latency-s3-standard", "s3"]
    with pytest.raises(InvalidRequest, match="unknown latency profile"), open_target("latency:nope", tmp_path):
        pass


def test_store_options_are_validated_before_the_run(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfig):
        make_params("file", tmp_path / "x.json", store_options={"flush.bytez": "1"})
    params = make_params("file", tmp_path / "x.json", quick=True, store_options={"flush.bytes": "1048576"})
    assert params.settings().flush_bytes == 1 << 20 and params.settings().ack == "wal"
    assert params.duration_s == 5.0 and make_params("file", tmp_path / "x.json").duration_s == 60.0


def test_record_pool_values_are_unique_and_batches_uniform() -> None:
    batches = make_batches(10, 100, seed=1, pool_bytes=5000)
    assert len(batches) == 7  # the smallest prime >= 7 batches
    values = [r.value for b in batches for r in b]
    assert len(values) == 70 and len(set(values)) == 70 and all(len(v or b"") == 100 for v in values)


def test_thread_roles_drop_numbers_and_node_ids() -> None:
    assert _role("bench-producer-3") == "bench-producer"
    assert _role("s3stream-flush-n-01jabcdef0123") == "s3stream-flush"
    assert _role("wal-syncer /tmp/x/wal") == "wal-syncer"
    assert _role("MainThread") == "MainThread"


def test_sampler_and_rss_meter_see_a_busy_thread() -> None:
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(range(1000))

    worker = threading.Thread(target=spin, name="spinner-1")
    with PeakRss() as rss, StackSampler(interval_s=0.002) as sampler:
        worker.start()
        stop.wait(0.2)
        stop.set()
        worker.join()
    roles = sampler.result()["threads_by_role"]
    assert roles["spinner"]["samples"] > 0
    assert any("spin" in fn for fn, _ in roles["spinner"]["top_inclusive"] + roles["spinner"]["top_self"])
    assert rss.result()["peak_rss_bytes"] > 0


def test_uncommitted_changes_are_named_except_result_files(tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "engine.py").write_text("v1\n")
    (tmp_path / "benchmarks" / "results" / "engine.md").write_text("old\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "c")
    assert _uncommitted_files(tmp_path) == []
    (tmp_path / "engine.py").write_text("v2\n")
    (tmp_path / "benchmarks" / "results" / "engine.md").write_text("new\n")  # what a run writes
    (tmp_path / "scratch.txt").write_text("untracked\n")
    assert _uncommitted_files(tmp_path) == ["engine.py"]
    assert _uncommitted_files(tmp_path / "missing") == []  # not a repository: nothing to name
