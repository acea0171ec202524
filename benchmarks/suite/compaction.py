"""The compaction workload: the cleaner's throughput on the suite's target, against the raw rewrite limit and
the per-record Python baseline.

It is :mod:`benchmarks.compaction` run once (no repetitions: the suite runs every workload once) on a store of
``ctx.target`` instead of a local directory: one compacted partition of ``compaction_bytes`` logical bytes over
``compaction_keys`` keys, written directly as sealed segments, then the raw limit (GET, decode, precomputed
keep-mask filter, encode, PUT), the baseline (over the whole log, like the cleaner) and one
``Store.run_cleaner()`` pass, whose requests are counted. The cleaner's result is verified; a wrong one raises.
"""

from __future__ import annotations

import time
from typing import Any

import s3stream
from benchmarks.compaction import (
    KEY_BYTES,
    RECORD_OVERHEAD,
    T0,
    BenchConfig,
    BuiltLog,
    _warm_up,
    baseline_count,
    build_log,
    figures,
    measure_baseline,
    measure_cleaner,
    measure_raw,
    verify,
)
from benchmarks.measure import mb_per_s
from benchmarks.suite.model import MiB, SuiteContext, SuiteParams, WorkloadResult
from s3stream.clock import ManualClock
from s3stream.ids import IdSource
from s3stream.objectstore.protocol import ObjectStore
from s3stream.testing.recording import KINDS, RecordingObjectStore

__all__ = ["run_compaction"]

NAME = "compaction"


def segment_bytes_for(params: SuiteParams) -> int:
    """The suite's segment size, capped so the log has at least four segments (the cleaner groups and
    rewrites segments; a log of one segment would measure a degenerate round), and at least 1 MiB."""
    return max(MiB, min(params.segment_bytes, params.compaction_bytes // 4))


def _config(params: SuiteParams, dedupe_buffer_bytes: int) -> BenchConfig:
    if params.record_bytes < RECORD_OVERHEAD + KEY_BYTES + 1:
        raise ValueError(f"compaction needs record_bytes >= {RECORD_OVERHEAD + KEY_BYTES + 1}")
    return BenchConfig(total_bytes=params.compaction_bytes, record_bytes=params.record_bytes,
                       keys=params.compaction_keys, segment_bytes=segment_bytes_for(params),
                       baseline_segments=0, dedupe_buffer_bytes=dedupe_buffer_bytes,
                       seed=params.seed, quick=params.quick, profile=False, repeat=1)


def _speed(nbytes: int, seconds: float) -> float:
    """MB/s (10^6 B); the standalone phases round their seconds to 1 ms, so never divide by zero."""
    return mb_per_s(nbytes, max(seconds, 1e-3))


def _phases(ctx: SuiteContext, built: BuiltLog, objstore: ObjectStore, rec: RecordingObjectStore,
            cfg: BenchConfig) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, int]]:
    """Raw limit and baseline straight on the target's ObjectStore, then the cleaner with its requests counted."""
    rgb = built.store.settings.segment_row_group_bytes
    _warm_up(rgb)
    with ctx.progress.phase("compaction: raw limit"):
        raw = measure_raw(objstore, built, rgb)
    with ctx.progress.phase("compaction: per-record baseline"):
        baseline = measure_baseline(objstore, built, baseline_count(cfg, built), rgb)
    with ctx.progress.phase("compaction: cleaner pass"):
        rec.reset()
        cleaner = measure_cleaner(built, profile=False)
        requests = rec.counts()
    return raw, baseline, cleaner, requests


def run_compaction(ctx: SuiteContext) -> WorkloadResult:
    """Build the log on the target, measure raw, baseline and cleaner once, verify the cleaner's result."""
    params = ctx.params
    started = time.perf_counter()
    url, objstore = ctx.target.store(NAME)
    rec = RecordingObjectStore(objstore, log_size=1)
    # a ManualClock as in the standalone benchmark: the records are stamped before T0 and nothing here waits
    store = s3stream.open_store(url, object_store=rec, clock=ManualClock(T0), ids=IdSource(seed=params.seed),
                                wal_dir=ctx.target.wal_dir(NAME), **params.open_options())
    try:
        cfg = _config(params, store.settings.log_cleaner_dedupe_buffer_size)
        with ctx.progress.phase(f"compaction: build {cfg.segments} segments"):
            built = build_log(store, cfg)
        raw, baseline, cleaner, requests = _phases(ctx, built, objstore, rec, cfg)
        problems = verify(built, cleaner)
        if raw["records_kept"] != int(built.keep.sum()):
            problems.append("the raw pass kept a different number of records")
    finally:
        store.close()
    if problems:
        raise RuntimeError("compaction: the cleaner's result is wrong: " + "; ".join(problems))
    result = _result(cfg, built, raw, baseline, cleaner, requests)
    result.seconds = time.perf_counter() - started
    return result


def _result(cfg: BenchConfig, built: BuiltLog, raw: dict[str, Any], baseline: dict[str, Any],
            cleaner: dict[str, Any], requests: dict[str, int]) -> WorkloadResult:
    result = WorkloadResult(NAME)
    nbytes = built.logical_bytes
    clean_mb = _speed(nbytes, cleaner["seconds"])
    raw_mb = _speed(nbytes, raw["seconds"])
    base_mb = _speed(baseline["bytes"], baseline["seconds"])
    rnd = cleaner["round"]
    result.figure("cleaner_mb_per_s", clean_mb, "MB/s")
    result.figure("raw_mb_per_s", raw_mb, "MB/s")
    result.figure("baseline_mb_per_s", base_mb, "MB/s")
    result.figure("cleaner_vs_raw", clean_mb / raw_mb, "ratio")
    result.figure("cleaner_vs_baseline", clean_mb / base_mb, "ratio")
    result.figure("peak_rss_mib", cleaner["memory"]["peak_rss_bytes"] / MiB, "MiB")
    result.figure("records_kept", rnd["records_kept"], "records")
    result.figure("records_removed", rnd["records_read"] - rnd["records_kept"], "records")
    result.figure("cleaner_seconds", cleaner["seconds"], "s")
    result.figure("cleaner_requests", sum(requests.values()), "requests")
    for kind in KINDS:
        result.figure(f"cleaner_{kind.lower()}_requests", requests[kind], "requests")
    result.requests = dict(requests)
    result.payload_bytes = nbytes   # what the pass cleaned: its requests per GiB cleaned
    result.baseline = {"cleaner_mb_per_s": base_mb, "seconds": baseline["seconds"],
                       "segments": baseline["segments"]}
    verdicts = ", ".join(f"{f['name']} {f['value']} (target {f['target'].split(' (')[0]})"
                         for f in figures(cfg, raw, cleaner, baseline))
    result.notes += [
        f"one compacted partition: {nbytes / MiB:.0f} MiB of logical record bytes ({cfg.record_bytes} B records, "
        f"{cfg.keys:,} keys) in {len(built.refs)} sealed segments of {cfg.segment_bytes / MiB:.0f} MiB, "
        "written directly (not through the WAL)",
        "MB/s = 10^6 logical input bytes (payload + 21 B per record) per second of wall time; one repetition",
        f"baseline (per-record Python) over the whole log ({baseline['segments']} segments)",
        f"cleaner round: {rnd['segments_in']} segments in, {rnd['segments_out']} out, "
        f"offset map {100 * rnd['map_utilization']:.2f}% full; requests counted during the pass only "
        "(payload_bytes = the bytes it cleaned)",
        f"standalone targets: {verdicts}",
        "verified: exactly the latest record of every key survives at its offset; log range unchanged",
    ]
    return result
