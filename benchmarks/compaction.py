"""Compaction benchmark: the cleaner's throughput against the raw limit and a per-record Python baseline.

Run ``python -m benchmarks.compaction [--quick] [--gib 1.0]``. Results go to
``benchmarks/results/compaction-<size>.json`` and ``.md`` (``--out-dir`` to change).

Workload: one compacted partition on a ``file://`` store holding ``--gib`` GiB of 1 KiB records (logical
size 21 + 10-byte key + 993-byte random value; ``--record-bytes`` changes it) over ``--keys`` distinct
keys drawn uniformly, in sealed segments of ``--segment-mib`` MiB. The segments are written directly
(``encode_segment`` + one ``add_segment`` manifest commit): appending 1 GiB through the WAL would only
measure the WAL.

Measured, each over the same segments in the same run:

1. **raw limit** (no cleaner logic): for each segment, GET the object, decode it with pyarrow, filter it
   with a keep-mask precomputed outside the timing (the latest offset of every key), encode the survivors
   with the segment format's writer and PUT them. This is the floor of any rewrite of these segments.
2. **cleaner**: one ``Store.run_cleaner()`` pass (selection, offset map over the keys with column
   projection, rewrite with the keep rules, atomic manifest swap, retention), with its peak RSS.
3. **baseline**: :mod:`benchmarks.compaction_baseline`, a straightforward per-record Python cleaner
   (Record objects, a dict of key -> offset, a loop over records), on the whole log by default
   (``--baseline-segments N`` for the first N only: quicker, but not the same work, since a prefix of
   the log keeps a larger share of its records than the whole log does).

The cleaner can beat the raw limit: the raw pass decodes every row group, while the cleaner never fetches
a row group whose offsets hold no winner of its offset map (the footer index tells it, with the counts the
round's statistics need).

The three phases run ``--repeat`` times (default 3), interleaved; a shared machine only ever slows a run
down, so the fastest run of each phase counts (every run's figure is kept in the results); between
repetitions the dirty segments are put back with one manifest edit.

Figures: cleaner/raw (target >= 0.5), cleaner/baseline (target >= 10), peak RSS against the process's RSS
before the pass + ``log.cleaner.dedupe.buffer.size`` + two segments. Throughput counts logical input
bytes over wall time. The cleaner's result is checked: exactly the latest record of every key survives,
at its offset, and the log end is unchanged; a wrong result makes the run exit 2, a missed target exit 1.
Benchmarks time with ``time.perf_counter`` (a measurement; the store reads an injected ManualClock).
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import io
import pstats
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import s3stream
from benchmarks.compaction_baseline import BaselineSegment, compact_segments
from benchmarks.measure import CpuMeter, PeakRss, current_rss_bytes, machine_info, versions
from benchmarks.process import start_benchmark_process
from benchmarks.scratch import RESULTS_DIR, run_in_scratch, write_pair
from s3stream import layout
from s3stream.clock import ManualClock
from s3stream.ids import IdSource
from s3stream.manifest.intents import add_segment, compose
from s3stream.manifest.model import FrozenMap, Manifest, RemovedObject, SegmentRef
from s3stream.objectstore.protocol import ObjectStore
from s3stream.records import RECORD_SCHEMA
from s3stream.segment import encode_segment

__all__ = ["BenchConfig", "main", "run"]

MiB = 1 << 20
T0 = 1_700_000_000_000
KEY_BYTES = 10
RECORD_OVERHEAD = 21
TOPIC = "compaction-bench"
TARGET_VS_RAW = 0.5
TARGET_VS_BASELINE = 10.0


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """One run's shape."""

    total_bytes: int
    record_bytes: int
    keys: int
    segment_bytes: int
    baseline_segments: int
    dedupe_buffer_bytes: int
    seed: int
    quick: bool
    profile: bool
    repeat: int = 3

    @property
    def records_per_segment(self) -> int:
        return self.segment_bytes // self.record_bytes

    @property
    def segments(self) -> int:
        return max(1, self.total_bytes // (self.records_per_segment * self.record_bytes))

    @property
    def slug(self) -> str:
        if self.quick:
            return "quick"
        size = f"{self.total_bytes / 2**30:g}gib"
        return size if self.record_bytes == 1024 else f"{size}-{self.record_bytes}b"


@dataclass(frozen=True, slots=True)
class BuiltLog:
    """The partition under test: its segments, and the keep-mask of every record (offset order)."""

    store: s3stream.Store
    refs: list[SegmentRef]
    keep: np.ndarray

    @property
    def logical_bytes(self) -> int:
        return sum(r.size_bytes for r in self.refs)


# ----------------------------------------------------------------------------------------------- workload


def _segment_table(cfg: BenchConfig, key_pool: pa.Array, ids: np.ndarray, base: int,
                   rng: np.random.Generator) -> pa.Table:
    n = len(ids)
    value_len = cfg.record_bytes - RECORD_OVERHEAD - KEY_BYTES
    offsets = pa.py_buffer(np.arange(0, (n + 1) * value_len, value_len, dtype=np.int32).tobytes())
    values = pa.Array.from_buffers(pa.binary(), n, [None, offsets, pa.py_buffer(rng.bytes(n * value_len))])
    offs = np.arange(base, base + n, dtype=np.int64)
    return pa.Table.from_arrays([pa.array(offs), pa.array(T0 - 10 * cfg.total_bytes // cfg.record_bytes + offs),
                                 key_pool.take(pa.array(ids)), values,
                                 pa.nulls(n, RECORD_SCHEMA.field("headers").type), pa.nulls(n, pa.int64())],
                                schema=RECORD_SCHEMA)


def build_log(store: s3stream.Store, cfg: BenchConfig) -> BuiltLog:
    """Write the sealed segments directly and commit them in one manifest edit; compute the keep-mask."""
    rt = store.runtime
    store.create_topic(TOPIC, 1, {"cleanup.policy": "compact", "segment.bytes": cfg.segment_bytes})
    log = store.partition(TOPIC, 0)
    rng = np.random.default_rng(cfg.seed)
    key_pool = pa.array([b"k%09d" % i for i in range(cfg.keys)], pa.binary())
    n = cfg.records_per_segment
    all_ids = rng.integers(0, cfg.keys, size=cfg.segments * n)
    refs: list[SegmentRef] = []
    for i in range(cfg.segments):
        base = i * n
        table = _segment_table(cfg, key_pool, all_ids[base:base + n], base, rng)
        first_ts = int(table.column("timestamp")[0].as_py())
        data, summary = encode_segment(table, base_offset=base, last_offset=base + n - 1,
                                       first_batch_max_timestamp=first_ts,
                                       row_group_bytes=rt.settings.segment_row_group_bytes)
        key = layout.segment_key(log.topic_id, 0, base, rt.ids.ulid(T0))
        rt.objstore.put(key, data)
        refs.append(SegmentRef(key, base, base + n - 1, summary.size_bytes, summary.object_size, summary.record_count,
                               summary.max_timestamp, first_ts, T0, summary.crc32c))
    log.manifest_store.commit(compose(*(add_segment(r, None) for r in refs)))
    order = np.arange(len(all_ids), dtype=np.int64)
    last = np.full(cfg.keys, -1, dtype=np.int64)
    np.maximum.at(last, all_ids, order)
    return BuiltLog(store, refs, last[all_ids] == order)


def restore_dirty(built: BuiltLog) -> None:
    """Put the original (dirty) segments back and forget the checkpoint, for the next repetition.

    The cleaner's outputs become removed objects (the originals were never deleted: GC does not run).
    """
    originals = tuple(built.refs)
    keys = {r.key for r in originals}

    def apply(cur: Manifest) -> Manifest:
        dropped = tuple(RemovedObject(s.key, T0, cur.seq + 1) for s in cur.segments if s.key not in keys)
        return dataclasses.replace(cur, segments=originals, next_offset=originals[-1].end_offset,
                                   removed=(*(r for r in cur.removed if r.key not in keys), *dropped),
                                   cleaner_checkpoint=None, attributes=FrozenMap())

    built.store.partition(TOPIC, 0).manifest_store.commit(apply)


# ----------------------------------------------------------------------------------------------- phases


def measure_raw(objstore: ObjectStore, built: BuiltLog, row_group_bytes: int) -> dict[str, Any]:
    """GET, decode, filter with the precomputed mask, encode, PUT: every segment, timed end to end."""
    cpu = CpuMeter()
    started = time.perf_counter()
    kept = 0
    for i, ref in enumerate(built.refs):
        table = pq.read_table(pa.BufferReader(objstore.get(ref.key)))
        mask = pa.array(built.keep[ref.base_offset:ref.last_offset + 1])
        survivors = table.filter(mask)
        kept += survivors.num_rows
        first_ts = int(survivors.column("timestamp")[0].as_py()) if survivors.num_rows else -1
        data, _ = encode_segment(survivors, base_offset=ref.base_offset, last_offset=ref.last_offset,
                                 first_batch_max_timestamp=first_ts, row_group_bytes=row_group_bytes)
        objstore.put(f"bench-raw/{i:05d}.parquet", data)
    seconds = time.perf_counter() - started
    for i in range(len(built.refs)):
        objstore.delete(f"bench-raw/{i:05d}.parquet")
    return {"seconds": round(seconds, 3), "mb_per_s": round(built.logical_bytes / MiB / seconds, 2),
            "records_kept": kept, "cpu": cpu.read()}


def measure_cleaner(built: BuiltLog, *, profile: bool) -> dict[str, Any]:
    """One ``Store.run_cleaner()`` pass, with its peak RSS (and a cProfile when asked)."""
    store = built.store
    profiler = cProfile.Profile() if profile else None
    cpu = CpuMeter()
    with PeakRss() as peak:
        baseline_rss = current_rss_bytes()
        started = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        report = store.run_cleaner()
        if profiler is not None:
            profiler.disable()
        seconds = time.perf_counter() - started
    r = report.cleaned
    out: dict[str, Any] = {"seconds": round(seconds, 3), "mb_per_s": round(built.logical_bytes / MiB / seconds, 2),
                           "cpu": cpu.read(), "memory": {**peak.result(), "baseline_rss_bytes": baseline_rss},
                           "round": None if r is None else {k: v for k, v in asdict(r).items() if k != "log_id"}}
    if profiler is not None:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(30)
        out["profile_top30_cumulative"] = text.getvalue().splitlines()
    return out


def baseline_count(cfg: BenchConfig, built: BuiltLog) -> int:
    """How many segments the baseline cleans: ``--baseline-segments``, or all of them when 0."""
    return cfg.baseline_segments if 0 < cfg.baseline_segments < len(built.refs) else len(built.refs)


def measure_baseline(objstore: ObjectStore, built: BuiltLog, count: int, row_group_bytes: int) -> dict[str, Any]:
    """The per-record Python cleaner on the first ``count`` segments (reads and writes included)."""
    subset = built.refs[:count]
    cpu = CpuMeter()
    started = time.perf_counter()
    segs = [BaselineSegment(objstore.get(r.key), r.base_offset, r.last_offset) for r in subset]
    kept = 0
    for i, out in enumerate(compact_segments(segs, row_group_bytes=row_group_bytes)):
        objstore.put(f"bench-baseline/{i:05d}.parquet", out.data)
        kept += pq.read_metadata(pa.BufferReader(out.data)).num_rows
    seconds = time.perf_counter() - started
    for i in range(len(subset)):
        objstore.delete(f"bench-baseline/{i:05d}.parquet")
    nbytes = sum(r.size_bytes for r in subset)
    return {"segments": len(subset), "bytes": nbytes, "seconds": round(seconds, 3),
            "mb_per_s": round(nbytes / MiB / seconds, 2), "records_kept": kept, "cpu": cpu.read()}


def verify(built: BuiltLog, cleaner: dict[str, Any]) -> list[str]:
    """Exactly the latest record of every key survives, at its offset; offsets and the log end intact."""
    problems: list[str] = []
    log = built.store.partition(TOPIC, 0)
    total = len(built.keep)
    rnd = cleaner["round"]
    if rnd is None or rnd["aborted"] or rnd["end_offset"] != total or rnd["map_full"]:
        problems.append(f"the pass did not clean the whole log in one round: {rnd}")
    if (log.log_start_offset, log.log_end_offset) != (0, total):
        problems.append(f"log range changed: [{log.log_start_offset}, {log.log_end_offset})")
    offsets = log.read_arrow(0, max_bytes=1 << 62).column("offset")
    expected = np.flatnonzero(built.keep)
    got = np.asarray(offsets.to_numpy(), dtype=np.int64)
    if len(got) != len(expected) or not bool(np.all(got == expected)):
        problems.append(f"survivors differ: {len(got)} records, expected {len(expected)}")
    if rnd is not None and rnd["records_kept"] != len(expected):
        problems.append("records_kept of the round disagrees with the keep-mask")
    return problems


# ----------------------------------------------------------------------------------------------- report


def figures(cfg: BenchConfig, raw: dict[str, Any], cleaner: dict[str, Any], baseline: dict[str, Any]
            ) -> list[dict[str, Any]]:
    """The judged figures: ratios to the raw limit and the baseline, and peak memory against its budget."""
    mem = cleaner["memory"]
    budget = mem["baseline_rss_bytes"] + cfg.dedupe_buffer_bytes + 2 * cfg.segment_bytes
    vs_raw = cleaner["mb_per_s"] / raw["mb_per_s"]
    vs_base = cleaner["mb_per_s"] / baseline["mb_per_s"]
    return [
        {"name": "cleaner_vs_raw", "value": round(vs_raw, 3), "target": f">= {TARGET_VS_RAW}",
         "passed": vs_raw >= TARGET_VS_RAW},
        {"name": "cleaner_vs_baseline", "value": round(vs_base, 2), "target": f">= {TARGET_VS_BASELINE}",
         "passed": vs_base >= TARGET_VS_BASELINE},
        {"name": "peak_rss_mib", "value": round(mem["peak_rss_bytes"] / MiB, 1),
         "target": f"<= {budget / MiB:.0f} (RSS before {mem['baseline_rss_bytes'] / MiB:.0f} + dedupe buffer "
                   f"{cfg.dedupe_buffer_bytes / MiB:.0f} + 2 x segment {cfg.segment_bytes / MiB:.0f})",
         "passed": mem["peak_rss_bytes"] <= budget},
    ]


def render_markdown(result: dict[str, Any]) -> str:
    cfg, raw, cl, base = result["config"], result["raw"], result["cleaner"], result["baseline"]
    rnd = cl["round"] or {}
    rows = "\n".join(f"| {f['name']} | {f['value']} | {f['target']} | {'yes' if f['passed'] else '**no**'} |"
                     for f in result["figures"])
    mem = cl["memory"]
    return f"""# Compaction benchmark ({result['slug']})

{cfg['total_bytes'] / 2**30:.3g} GiB of {cfg['record_bytes']} B records, {cfg['keys']:,} distinct keys, \
{result['segments']} segments of {cfg['segment_bytes'] / MiB:.0f} MiB, file:// store, one partition.
Machine: {result['machine']['cores']} cores ({result['machine']['cpu_model']}), \
load at start {result['machine']['load_average_at_start']}; allocator: {result['machine'].get('allocator', '-')}.

| figure | value | target | met |
|---|---|---|---|
{rows}

| phase | MB/s (logical input) | seconds | records kept | process cores | machine cores |
|---|---|---|---|---|---|
| raw limit (GET, decode, mask filter, encode, PUT) | {raw['mb_per_s']} | {raw['seconds']} | {raw['records_kept']:,} \
| {raw['cpu']['process_cpu_cores']} | {raw['cpu'].get('machine_busy_cores', '-')} |
| cleaner (`Store.run_cleaner()`) | {cl['mb_per_s']} | {cl['seconds']} | {rnd.get('records_kept', 0):,} \
| {cl['cpu']['process_cpu_cores']} | {cl['cpu'].get('machine_busy_cores', '-')} |
| per-record Python baseline ({base['segments']} segments) | {base['mb_per_s']} | {base['seconds']} \
| {base['records_kept']:,} | {base['cpu']['process_cpu_cores']} | {base['cpu'].get('machine_busy_cores', '-')} |

Each phase ran {cfg['repeat']} times, interleaved; the table shows the fastest run of each (MB/s of every run: \
raw {raw['runs_mb_per_s']}, cleaner {cl['runs_mb_per_s']}, baseline {base['runs_mb_per_s']}). \
Peak RSS is the worst run's. The raw limit is {raw['mb_per_s'] / max(base['mb_per_s'], 1e-9):.1f}x the \
baseline; the cleaner can beat it because it never fetches row groups its offset map shows are dropped whole \
({100 * rnd.get('records_unread', 0) / max(1, rnd.get('records_read', 1)):.1f}% of the records here).

Cleaner round: {rnd.get('segments_in')} segments in, {rnd.get('segments_out')} out; offset map \
{100 * rnd.get('map_utilization', 0):.2f}% of its capacity; map read {rnd.get('map_bytes_read', 0) / MiB:.1f} MiB \
(keys and offsets only); recopy {100 * rnd.get('bytes_written', 0) / max(1, rnd.get('bytes_read', 1)):.1f}%.
Peak RSS {mem['peak_rss_bytes'] / MiB:.0f} MiB ({mem['method']}); RSS before the pass \
{mem['baseline_rss_bytes'] / MiB:.0f} MiB.

Correctness: {'every key kept exactly its latest record at its offset; log range unchanged' if not result['problems']
              else 'PROBLEMS: ' + '; '.join(result['problems'])}.
"""


def write_results(result: dict[str, Any], out_dir: Path) -> Path:
    return write_pair(result, out_dir, f"compaction-{result['slug']}", render_markdown(result))


# ----------------------------------------------------------------------------------------------- run


def _best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest of the repetitions (a shared machine only ever slows a phase down), with every run's figure."""
    best = dict(max(runs, key=lambda r: r["mb_per_s"]))
    best["runs_mb_per_s"] = [r["mb_per_s"] for r in runs]
    profiles = [r["profile_top30_cumulative"] for r in runs if "profile_top30_cumulative" in r]
    if profiles:
        best["profile_top30_cumulative"] = profiles[0]
    if "memory" in best:  # memory is judged on the worst run, not the fastest
        best["memory"] = max((r["memory"] for r in runs), key=lambda m: m["peak_rss_bytes"] - m["baseline_rss_bytes"])
    return best


def _warm_up(row_group_bytes: int) -> None:
    """Load the codecs once, untimed, so no phase pays for lazy initialisation."""
    table = RECORD_SCHEMA.empty_table()
    data, _ = encode_segment(table, base_offset=0, last_offset=0, row_group_bytes=row_group_bytes)
    pq.read_table(pa.BufferReader(data))


def measure_all(cfg: BenchConfig, built: BuiltLog) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], list[str]]:
    """``cfg.repeat`` interleaved repetitions of raw, baseline and cleaner; the best of each, and problems."""
    objstore, rgb = built.store.object_store, built.store.settings.segment_row_group_bytes
    _warm_up(rgb)
    raws, bases, cleans, problems = [], [], [], []
    for i in range(cfg.repeat):
        if i:
            restore_dirty(built)
        raws.append(measure_raw(objstore, built, rgb))
        bases.append(measure_baseline(objstore, built, baseline_count(cfg, built), rgb))
        cleans.append(measure_cleaner(built, profile=cfg.profile and i == 0))
        problems += verify(built, cleans[-1])
        if raws[-1]["records_kept"] != int(built.keep.sum()):
            problems.append("the raw pass kept a different number of records")
    return _best(raws), _best(bases), _best(cleans), sorted(set(problems))


def run(cfg: BenchConfig, work_dir: Path) -> dict[str, Any]:
    """Build the log under ``work_dir`` and measure every phase; returns the result document."""
    url = f"file://{work_dir.resolve() / 'store'}"
    store = s3stream.open_store(url, clock=ManualClock(T0), ids=IdSource(seed=cfg.seed), probe=False,
                                wal_dir=str(work_dir / "wal"),
                                log_cleaner_dedupe_buffer_size=cfg.dedupe_buffer_bytes)
    try:
        started = time.perf_counter()
        built = build_log(store, cfg)
        build_s = time.perf_counter() - started
        raw, baseline, cleaner, problems = measure_all(cfg, built)
    finally:
        store.close()
    result: dict[str, Any] = {
        "benchmark": "compaction", "slug": cfg.slug, "config": asdict(cfg), "segments": len(built.refs),
        "logical_bytes": built.logical_bytes, "object_bytes": sum(r.object_size for r in built.refs),
        "build_seconds": round(build_s, 3), "raw": raw, "cleaner": cleaner, "baseline": baseline,
        "problems": problems, "machine": machine_info(str(work_dir)), "versions": versions()}
    result["figures"] = figures(cfg, raw, cleaner, baseline)
    result["passed"] = not problems and all(f["passed"] for f in result["figures"])
    return result


def _config(args: argparse.Namespace) -> BenchConfig:
    if args.quick:
        return BenchConfig(total_bytes=48 * MiB, record_bytes=1024, keys=min(args.keys, 5000),
                           segment_bytes=4 * MiB, baseline_segments=0, dedupe_buffer_bytes=args.dedupe_mib * MiB,
                           seed=args.seed, quick=True, profile=args.profile, repeat=max(1, min(args.repeat, 2)))
    if args.record_bytes < RECORD_OVERHEAD + KEY_BYTES + 1:
        raise SystemExit(f"--record-bytes must be at least {RECORD_OVERHEAD + KEY_BYTES + 1}")
    return BenchConfig(total_bytes=int(args.gib * 2**30), record_bytes=args.record_bytes, keys=args.keys,
                       segment_bytes=args.segment_mib * MiB, baseline_segments=args.baseline_segments,
                       dedupe_buffer_bytes=args.dedupe_mib * MiB, seed=args.seed, quick=False, profile=args.profile,
                       repeat=max(1, args.repeat))


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 all targets met, 1 a target missed, 2 a wrong result (files are written either way)."""
    start_benchmark_process()  # as s3stream's own processes run; SIGTERM cleans up
    p = argparse.ArgumentParser(prog="python -m benchmarks.compaction", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="48 MiB in 4 MiB segments, 5000 keys (a smoke run)")
    p.add_argument("--gib", type=float, default=1.0, help="GiB of records in the partition (default 1)")
    p.add_argument("--keys", type=int, default=100_000, help="distinct keys (default 100000)")
    p.add_argument("--record-bytes", type=int, default=1024, help="logical bytes per record (default 1024)")
    p.add_argument("--segment-mib", type=int, default=64, help="segment.bytes in MiB (default 64)")
    p.add_argument("--baseline-segments", type=int, default=0,
                   help="segments the baseline cleans (default 0: all of them)")
    p.add_argument("--dedupe-mib", type=int, default=128, help="log.cleaner.dedupe.buffer.size in MiB")
    p.add_argument("--repeat", type=int, default=3, help="interleaved repetitions; the best of each phase counts "
                   "(at most 2 with --quick)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--profile", action="store_true", help="cProfile the cleaner pass into the results")
    p.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    p.add_argument("--work-dir", type=Path, default=None, help="scratch parent directory (default: system temp)")
    args = p.parse_args(argv)
    cfg = _config(args)
    result = run_in_scratch(lambda work: run(cfg, work), prefix="s3stream-compaction-", work_dir=args.work_dir,
                            write=lambda r: write_results(r, args.out_dir))
    if result["problems"]:
        return 2
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
