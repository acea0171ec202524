"""The suite's ingest, e2e and catch-up workloads on the ``file`` target with tiny settings, and the
naive baseline's log on the memory store.

Shape and sanity only (figures present, finite, positive where they must be; latency samples and
series present; every record verified): a few hundred milliseconds per phase on a shared machine say
nothing about performance.
"""

from __future__ import annotations

import io
import math
import struct
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from rich.console import Console

from benchmarks.catchup import run_catchup
from benchmarks.core.progress import PhaseProgress
from benchmarks.core.result import WorkloadResult
from benchmarks.core.targets import open_target
from benchmarks.e2e import run_e2e, sent_ns
from benchmarks.ingest import run_ingest
from benchmarks.suite.context import QUICK, MiB, SuiteContext, SuiteParams
from benchmarks.suite.naive import NaiveLog, naive_key, throughput_series
from s3stream import Record
from s3stream.base.errors import PreconditionFailed
from s3stream.objectstore.memory import MemoryObjectStore


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SuiteContext]:
    work = tmp_path_factory.mktemp("suite-io")
    params = SuiteParams(target="file", **{**QUICK, "duration_s": 0.5, "catchup_bytes": 4 * MiB},
                         partitions=4, producers=2, batch_records=50, consumers=2, quick=True, progress=False,
                         work_dir=work)
    console = Console(file=io.StringIO())
    with open_target("file", Path(work)) as target:
        yield SuiteContext(params, target, console, PhaseProgress(console, phases=3, enabled=False))


def _check(result: WorkloadResult, name: str, figures: set[str], positive: set[str]) -> None:
    assert result.name == name
    assert figures <= result.figures.keys(), figures - result.figures.keys()
    assert all(math.isfinite(v) for v in result.figures.values())
    assert all(result.figures[f] > 0 for f in positive), {f: result.figures[f] for f in positive}
    assert set(result.units) == set(result.figures)
    assert result.series and all(s.t_s and len(s.t_s) == len(s.values) for s in result.series)
    assert result.seconds > 0
    result.as_dict()  # serializable


@pytest.mark.benchmark
def test_ingest_measures_both_ack_modes_and_the_naive_baseline(ctx: SuiteContext) -> None:
    result = run_ingest(ctx)

    per_mode = {f"ack_{m}_{f}" for m in ("wal", "s3")
                for f in ("mb_per_s", "records_per_s", "p50_ms", "p99_ms", "p999_ms")}
    _check(result, "ingest", per_mode | {"put_per_gib", "get_per_gib", "ack_s3_put_per_gib"},
           per_mode | {"put_per_gib", "ack_s3_put_per_gib"})
    assert set(result.baseline) >= {"naive_mb_per_s", "naive_records_per_s", "naive_p50_ms", "naive_p99_ms",
                                    "naive_p999_ms", "naive_put_per_gib"}
    assert all(v > 0 for k, v in result.baseline.items() if k.startswith("naive_"))
    assert set(result.latencies_ms) == {"ack=wal", "ack=s3", "naive"}
    assert all(result.latencies_ms.values())
    assert {s.name for s in result.series} == {"ack=wal", "ack=s3", "naive"}
    assert {"PUT", "GET", "HEAD", "LIST", "DELETE"} <= result.requests.keys() and result.requests["PUT"] > 0
    assert result.payload_bytes > 0


@pytest.mark.benchmark
def test_e2e_verifies_every_record_cross_node_and_same_node(ctx: SuiteContext) -> None:
    result = run_e2e(ctx)

    figures = {"e2e_p50_ms", "e2e_p99_ms", "e2e_p999_ms", "same_node_p50_ms", "same_node_p99_ms",
               "produce_p50_ms", "produce_p99_ms", "records_verified"}
    _check(result, "e2e", figures, figures)
    assert set(result.latencies_ms) == {"e2e", "same-node", "produce"}
    records = int(result.figures["records_verified"])
    assert len(result.latencies_ms["e2e"]) == ctx.params.consumers * records
    assert len(result.latencies_ms["same-node"]) == records
    assert result.figures["e2e_p99_ms"] >= result.figures["e2e_p50_ms"]


@pytest.mark.benchmark
def test_catchup_reads_every_record_back_cold_and_naive(ctx: SuiteContext) -> None:
    result = run_catchup(ctx)

    figures = {"catchup_mb_per_s", "catchup_records_per_s", "catchup_seconds", "catchup_get_per_gib"}
    _check(result, "catchup", figures, figures)
    assert result.baseline["naive_catchup_mb_per_s"] > 0
    assert result.figures["catchup_records_per_s"] * result.figures["catchup_seconds"] >= (
        ctx.params.catchup_bytes // ctx.params.record_bytes) * 0.999


def test_naive_log_round_trips_batches_in_order_on_the_memory_store() -> None:
    store = MemoryObjectStore()
    log = NaiveLog(store, "t", 0)
    sent = [[Record(key=f"k{b}-{i}".encode(), value=bytes([b, i]) * 10) for i in range(3)] for b in range(12)]
    for batch in sent:
        log.append(batch)
    NaiveLog(store, "t", 1).append(sent[0])

    assert log.keys() == [naive_key("t", 0, seq) for seq in range(12)]
    tables = list(log.read())
    assert [t.column("value").to_pylist() for t in tables] == [[r.value for r in batch] for batch in sent]
    assert [t.column("key").to_pylist() for t in tables] == [[r.key for r in batch] for batch in sent]
    reopened = NaiveLog(store, "t", 0)  # continues after what is there
    reopened.append(sent[1])
    assert len(reopened.keys()) == 13
    assert len(NaiveLog(store, "t", 1).keys()) == 1


def test_naive_log_appends_are_put_if_absent() -> None:
    store = MemoryObjectStore()
    first, second = NaiveLog(store, "t", 0), NaiveLog(store, "t", 0)
    first.append([Record(key=None, value=b"a")])
    with pytest.raises(PreconditionFailed):
        second.append([Record(key=None, value=b"b")])


def test_throughput_series_buckets_completions_per_second() -> None:
    series = throughput_series("x", [(0.1, 1_000_000), (0.9, 1_000_000), (1.2, 500_000), (3.0, 9)], 1.5)
    assert series.t_s == [1.0, 1.5]
    assert series.values == pytest.approx([2.0, 1.0])


def test_sent_ns_reads_the_stamp_of_every_value_at_once() -> None:
    stamps = [5, 1 << 40, 123_456_789]
    values = [struct.pack("<q", s) + b"payload" * i for i, s in enumerate(stamps)]
    chunked = pa.chunked_array([pa.array(values[:1], pa.binary()), pa.array(values[1:], pa.binary())])
    assert sent_ns(chunked).tolist() == stamps
    assert sent_ns(pa.array(values, pa.binary()).slice(1)).tolist() == stamps[1:]
