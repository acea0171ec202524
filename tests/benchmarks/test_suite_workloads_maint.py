"""The suite's maintenance workloads (compaction, retention, mixed) at tiny sizes: shape and sanity only."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from rich.console import Console

from benchmarks.compaction import run_compaction
from benchmarks.core.progress import PhaseProgress
from benchmarks.core.result import WorkloadResult
from benchmarks.core.targets import open_target
from benchmarks.mixed import _Consumed, _consumer, _Run, run_mixed, send_times_ns, shape_for
from benchmarks.retention import run_retention
from benchmarks.suite.context import QUICK, MiB, SuiteContext, SuiteParams
from s3stream import OffsetOutOfRange
from s3stream.base.records import RECORD_SCHEMA

pytestmark = pytest.mark.benchmark

TINY = {**QUICK, "duration_s": 1.0, "compaction_bytes": 4 * MiB, "compaction_keys": 1000,
        "retention_segments": 40, "retention_partitions": 4, "partitions": 4, "producers": 2, "consumers": 2}


@contextmanager
def suite_context(tmp_path: Path, target: str = "file") -> Iterator[SuiteContext]:
    params = SuiteParams(target=target, quick=True, progress=False, work_dir=tmp_path, **TINY)
    console = Console(quiet=True)
    with open_target(target, tmp_path / "work", seed=params.seed) as tgt, \
            PhaseProgress(console, phases=1, enabled=False) as progress:
        yield SuiteContext(params=params, target=tgt, console=console, progress=progress)


def check_figures(result: WorkloadResult, name: str, expected: set[str]) -> None:
    assert result.name == name
    assert expected <= set(result.figures), expected - set(result.figures)
    assert set(result.units) == set(result.figures)
    assert all(math.isfinite(v) for v in result.figures.values())
    assert result.seconds > 0 and result.notes
    result.as_dict()   # serializable shape


def test_compaction_on_file(tmp_path: Path) -> None:
    with suite_context(tmp_path) as ctx:
        result = run_compaction(ctx)
    check_figures(result, "compaction", {
        "cleaner_mb_per_s", "raw_mb_per_s", "baseline_mb_per_s", "cleaner_vs_raw", "cleaner_vs_baseline",
        "peak_rss_mib", "records_kept", "records_removed", "cleaner_requests"})
    f = result.figures
    assert min(f["cleaner_mb_per_s"], f["raw_mb_per_s"], f["baseline_mb_per_s"], f["peak_rss_mib"]) > 0
    assert f["cleaner_vs_raw"] == pytest.approx(f["cleaner_mb_per_s"] / f["raw_mb_per_s"])
    assert f["cleaner_vs_baseline"] == pytest.approx(f["cleaner_mb_per_s"] / f["baseline_mb_per_s"])
    assert 0 < f["records_kept"] <= 1000 and f["records_removed"] > 0   # 4096 records over 1000 keys
    assert result.requests["PUT"] > 0 and result.requests["GET"] > 0
    assert f["cleaner_requests"] == sum(result.requests.values())
    assert result.baseline["cleaner_mb_per_s"] == f["baseline_mb_per_s"]


RETENTION_FIGURES = {"deleting_pass_s", "steady_pass_s", "warm_pass_s", "deleting_pass_requests",
                     "steady_pass_requests", "steady_pass_list", "segments_deleted", "requests_per_deleted_segment"}


@pytest.mark.parametrize("target", ["file", "latency:lan"])
def test_retention(tmp_path: Path, target: str) -> None:
    with suite_context(tmp_path, target) as ctx:
        result = run_retention(ctx)
    check_figures(result, "retention", RETENTION_FIGURES)
    f = result.figures
    assert f["segments_deleted"] == 4 * (10 // 2)   # 40 segments over 4 partitions; the older half expires
    assert f["warm_segments_deleted"] == 4 * (10 // 4)
    assert f["deleting_pass_requests"] == sum(result.requests.values()) > f["steady_pass_requests"] > 0
    assert f["requests_per_deleted_segment"] == pytest.approx(f["deleting_pass_requests"] / f["segments_deleted"])
    assert result.requests["PUT"] >= 4   # at least one manifest commit per partition


def test_mixed_on_file(tmp_path: Path) -> None:
    with suite_context(tmp_path) as ctx:
        result = run_mixed(ctx)
    check_figures(result, "mixed", {
        "produce_mb_per_s", "produce_p50_ms", "produce_p99_ms", "consume_mb_per_s", "consumer_lag_p99_ms",
        "cleaner_rounds", "cleaner_bytes_removed", "retention_segments_deleted", "errors"})
    f = result.figures
    assert f["errors"] == 0
    assert f["produce_mb_per_s"] > 0 and f["consume_mb_per_s"] > 0
    assert 0 < f["produce_p50_ms"] <= f["produce_p99_ms"]
    assert 0 < f["consumer_lag_p99_ms"] < 60_000
    assert min(f["cleaner_rounds"], f["cleaner_bytes_removed"], f["retention_segments_deleted"]) >= 0
    assert f["cleaner_passes"] >= 1 and f["retention_passes"] >= 1
    assert {s.name for s in result.series} == {"produce_mb_per_s", "consume_mb_per_s", "consumer_lag_p99_ms"}
    assert all(len(s.t_s) == len(s.values) >= 1 for s in result.series)
    assert result.latencies_ms["produce"] and result.latencies_ms["lag"]
    assert result.payload_bytes > 0 and result.requests["PUT"] > 0


def test_mixed_decodes_send_times_and_sizes_its_topic() -> None:
    values = pa.chunked_array([pa.array([(5).to_bytes(8, "little") + b"abc", (7).to_bytes(8, "little")])[1:],
                               pa.array([(2**40).to_bytes(8, "little") + b"z" * 100])])
    assert np.array_equal(send_times_ns(values), [7, 2**40])
    quick = shape_for(SuiteParams(target="file", quick=True, **TINY))
    full = shape_for(SuiteParams(target="file", duration_s=60.0))
    assert quick.segment_bytes == MiB and full.segment_bytes == 8 * MiB
    assert full.retention_ms < 60_000 and full.segment_ms < full.retention_ms
    assert full.rate_bytes_per_s == 4e6


class _MovedLog:
    """A partition whose log start retention moved to 5; it holds offsets 5..9 and gets nothing new."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def read_arrow(self, offset: int, *, max_bytes: int | None = None) -> pa.Table:
        self.asked.append(offset)
        if offset < 5:
            raise OffsetOutOfRange("below the log start", offset=offset, log_start_offset=5, log_end_offset=10)
        stamp = time.perf_counter_ns().to_bytes(8, "little")
        rows = [{"offset": o, "timestamp": 0, "key": b"k", "value": stamp + b"123456789", "headers": None,
                 "horizon_ms": None} for o in range(offset, 10)]
        return pa.Table.from_pylist(rows, schema=RECORD_SCHEMA)


def test_a_consumer_below_the_log_start_skips_to_it_and_counts_it() -> None:
    log = _MovedLog()
    run = _Run(t0=time.perf_counter(), deadline=time.perf_counter() + 1)
    out = _Consumed()
    thread = run.thread("consumer", lambda: _consumer(run, [log], out))  # type: ignore[list-item]
    thread.start()
    time.sleep(0.1)
    run.stop.set()
    thread.join()
    assert not run.errors and out.out_of_range == 1 and log.asked[:3] == [0, 5, 10]
    assert sum(out.reads_bytes) == 5 * (1 + 17)
    lags = np.concatenate(out.lags_ms)
    assert len(lags) == 5 and bool(np.all((lags >= 0) & (lags < 100)))


def test_a_failing_thread_stops_the_run_and_is_recorded() -> None:
    run = _Run(t0=0.0, deadline=1.0)

    def fail() -> None:
        raise ValueError("boom")

    thread = run.thread("x", fail)
    thread.start()
    thread.join()
    assert run.stop.is_set() and [(n, str(e)) for n, e in run.errors] == [("x", "boom")]
