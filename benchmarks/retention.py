"""Retention: the S3 requests, manifest commits and wall time of retention passes at scale.

Run ``python -m benchmarks retention --profile s3-standard|s3-express|lan [--quick]``. Results go to
``benchmarks/results/retention-<profile>[-quick].json`` and ``.md`` (``--out-dir`` to change). The suite's
``retention`` workload (:func:`run_retention`, ``python -m benchmarks suite --workloads retention``) runs the
same passes with the suite's sizes on its target.

Setup (fast, no latency model): one topic of ``--partitions`` partitions (default 100), each holding
``--segments`` sealed segments (default 100) of 10 records. Manifests are written directly with the
manifest intents (``add_segment``), one commit per partition; every segment ref points at a small real
Parquet segment object (segment ``j`` covers the same offsets in every partition, so one encoded
object per ``j`` is PUT under every partition's key). Segment ``j``'s records are stamped so exactly
the older half is past ``retention.ms`` at the pass's ``now``.

Measured, each in a process (a fresh Store) that does not write the partitions, through
``RecordingObjectStore(LatencyObjectStore(memory, profile))`` with seeded latencies:

1. **deleting pass**: one ``Store.run_retention()`` in a freshly opened store (cold manifest caches),
   which drops about half of the segments;
2. **steady-state pass**: a second pass right after, which deletes nothing;
3. **warm deleting pass**: the clock moves so another quarter of the segments expires, and a third
   pass in the same (now warm) process drops them: what a long-running process pays per deletion.

For each: requests by kind (PUT/GET/HEAD/LIST/DELETE), and by key family (topic documents,
manifests, WAL namespaces, segment objects), manifest commits (PUTs of manifest versions), segments
and bytes deleted, and wall time. Nothing is estimated: every number is counted on the wire of the
wrapper. Correctness is checked too (log start offsets and surviving segments); a wrong result
makes the run exit 1.

Benchmarks measure elapsed time with ``time.perf_counter`` (a measurement, not semantics); the store
itself reads an injected ManualClock.

In the suite (``retention_partitions`` partitions holding ``retention_segments`` sealed segments in total):

* ``latency:<profile>`` targets run the passes as above: in-memory objects behind that latency model, so
  building thousands of segments costs nothing and every pass pays the modelled latencies;
* other targets (``file``, ``seaweedfs``, ``s3://``) build the same log on the target's real store and run
  the passes in a second store opened on it, through :class:`RecordingObjectStore`.

Every pass is checked (log starts, surviving segments, segments deleted); in the suite a wrong result raises.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pyarrow as pa

import s3stream
from benchmarks.core.markdown import Markdown, render_result
from benchmarks.core.measure import machine_info
from benchmarks.core.requests import key_family
from benchmarks.core.result import Run, WorkloadResult, write_result
from benchmarks.core.scratch import run_in_scratch
from benchmarks.suite.context import SuiteContext, SuiteParams
from s3stream.base import layout
from s3stream.base.clock import ManualClock
from s3stream.base.ids import IdSource
from s3stream.base.records import Record, batch_from_records
from s3stream.format.segment import encode_segment
from s3stream.manifest.intents import add_segment, compose
from s3stream.manifest.model import SegmentRef
from s3stream.manifest.versioned import manifest_store
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.objectstore.recording import KINDS, RecordingObjectStore
from s3stream.testing.forwarding import ForwardingObjectStore
from s3stream.testing.latency import LATENCY_PROFILES, LatencyObjectStore

__all__ = ["BenchConfig", "main", "make_config", "measure_passes", "run", "run_retention",
           "run_standalone"]

T0 = 1_700_000_000_000
RECORDS_PER_SEGMENT = 10
STEP_MS = 60_000  # segment j's records are stamped (segments - j) * STEP_MS before the pass's now
TOPIC = "retention-bench"
PHASES = (("deleting (fresh process, cold caches)", "deleting_pass"), ("steady state", "steady_state_pass"),
          ("deleting again (warm caches)", "warm_deleting_pass"))


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """One run's shape."""

    profile: str
    partitions: int
    segments: int
    seed: int
    time_scale: float
    quick: bool

    @property
    def retention_ms(self) -> int:
        """Segments ``j < segments // 2`` are strictly older than this at the pass's ``now`` (RET-7)."""
        return (self.segments - self.segments // 2) * STEP_MS


# -- setup ---------------------------------------------------------------------------------------------


def _segment_templates(cfg: BenchConfig) -> list[tuple[bytes, Any, int]]:
    """``(object bytes, summary, first batch max ts)`` of segment ``j``: offsets ``[10j, 10j + 9]``."""
    out = []
    for j in range(cfg.segments):
        base = j * RECORDS_PER_SEGMENT
        ts = T0 - (cfg.segments - j) * STEP_MS
        recs = [Record(b"key-%06d" % (base + i), b"value-%06d" % (base + i), ts) for i in range(RECORDS_PER_SEGMENT)]
        table = pa.Table.from_batches([batch_from_records(recs, base, [ts] * len(recs))])
        data, summary = encode_segment(table, base_offset=base, last_offset=base + RECORDS_PER_SEGMENT - 1,
                                       first_batch_max_timestamp=ts, row_group_bytes=1 << 20)
        out.append((data, summary, ts))
    return out


def _build(cfg: BenchConfig, url: str, raw: MemoryObjectStore, clock: ManualClock, wal_dir: str) -> dict[str, Any]:
    """Create the topic and, per partition, PUT its segment objects and commit one manifest adding them."""
    started = time.perf_counter()
    ids = IdSource(cfg.seed)
    templates = _segment_templates(cfg)
    with s3stream.open_store(url, object_store=raw, clock=clock, ids=ids, probe=False, wal_dir=wal_dir) as store:
        store.create_topic(TOPIC, partitions=cfg.partitions,
                           config={"retention.ms": cfg.retention_ms, "cleanup.policy": "delete"})
        topic_id = store.runtime.catalog.get(TOPIC).topic_id
    for p in range(cfg.partitions):
        refs = []
        for data, s, first_ts in templates:
            key = layout.segment_key(topic_id, p, s.base_offset, ids.ulid(clock.now_ms()))
            raw.put(key, data)
            refs.append(SegmentRef(key=key, base_offset=s.base_offset, last_offset=s.last_offset,
                                   size_bytes=s.size_bytes, object_size=s.object_size, record_count=s.record_count,
                                   max_timestamp=s.max_timestamp, first_batch_max_timestamp=first_ts,
                                   created_ms=clock.now_ms(), crc32c=s.crc32c))
        vstore = manifest_store(raw, topic=TOPIC, topic_id=topic_id, partition=p, clock=clock, ids=ids)
        vstore.commit(compose(*(add_segment(ref, None) for ref in refs)))
    return {"build_wall_s": round(time.perf_counter() - started, 3), "topic_id": topic_id,
            "segment_object_bytes": sum(len(t[0]) for t in templates) * cfg.partitions}


# -- measuring ------------------------------------------------------------------------------------------


def _requests(rec: RecordingObjectStore) -> dict[str, Any]:
    by_family: Counter[str] = Counter()
    for op, key, _size in rec.log:
        by_family[f"{op} {key_family(key)}"] += 1
    commits = sum(1 for op, key, _ in rec.log if op == "PUT" and "/manifest/" in key)
    # a failed GET is logged with size 0 (no object is ever empty here): the 404s of manifest probes
    misses = sum(1 for op, _key, size in rec.log if op == "GET" and size == 0)
    counts = rec.counts()
    return {"by_kind": counts, "total": sum(counts.values()), "by_kind_and_family": dict(sorted(by_family.items())),
            "manifest_commits": commits, "get_misses": misses}


class _SleepLog(ManualClock):
    """A clock that records pacing sleeps instead of sleeping."""

    def __init__(self) -> None:
        super().__init__(T0)
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def model_charges_misses(profile: str) -> bool:
    """Whether the latency model charges a round trip for a GET that fails (404), as S3 does."""
    clock = _SleepLog()
    store = LatencyObjectStore(MemoryObjectStore(clock=clock), profile, clock=clock, ids=IdSource(0))
    try:
        store.get("missing")
    except FileNotFoundError:
        pass
    return bool(clock.slept)


def _pass(store: s3stream.Store, rec: RecordingObjectStore, cfg: BenchConfig) -> dict[str, Any]:
    rec.reset()
    started, cpu_started = time.perf_counter(), time.process_time()
    report = store.run_retention()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    req = _requests(rec)
    uncharged = 0.0
    if not model_charges_misses(cfg.profile):
        uncharged = req["get_misses"] * LATENCY_PROFILES[cfg.profile].get.p50_ms * cfg.time_scale / 1000
    return {
        "wall_s": round(wall, 3),
        "process_cpu_s": round(cpu, 3),  # the rest of the wall time is (modelled) waiting on requests
        "uncharged_get_miss_latency_p50_s": round(uncharged, 3),
        "wall_ms_per_partition": round(wall * 1000 / cfg.partitions, 2),
        "requests": req,
        "requests_per_partition": round(req["total"] / cfg.partitions, 2),
        "partitions_checked": report.partitions_checked,
        "partitions_changed": report.partitions_changed,
        "segments_deleted": report.segments_deleted,
        "bytes_deleted": report.bytes_deleted,
        "by_reason": report.by_reason,
    }


def _check(store: s3stream.Store, cfg: BenchConfig) -> list[str]:
    """What must hold after the deleting pass; returns the problems found (empty when correct)."""
    expired = cfg.segments // 2
    problems = []
    for p in range(cfg.partitions):
        m = store.partition(TOPIC, p).manifest(refresh=True)  # not counted: each pass resets the counts
        if m.log_start_offset != expired * RECORDS_PER_SEGMENT or len(m.segments) != cfg.segments - expired:
            problems.append(f"partition {p}: log start {m.log_start_offset}, {len(m.segments)} segments left")
        if len(m.removed) != expired:
            problems.append(f"partition {p}: {len(m.removed)} removed objects pending, expected {expired}")
    return problems


def measure_passes(cfg: BenchConfig, *, work_dir: str) -> dict[str, Any]:
    """Build the store in memory, then measure the deleting, steady-state and warm deleting passes behind the
    latency model: ``setup``, the three passes, and the ``problems`` found."""
    clock = ManualClock(T0)
    name = f"bench-retention-{IdSource().ulid(T0).lower()}"
    url = f"memory://{name}"
    try:
        raw = MemoryObjectStore(name, clock=clock)
        setup = _build(cfg, url, raw, clock, f"{work_dir}/build")
        latency = LatencyObjectStore(MemoryObjectStore(name, clock=clock), cfg.profile, clock=clock,
                                     ids=IdSource(cfg.seed), time_scale=cfg.time_scale)
        rec = RecordingObjectStore(latency, log_size=10_000_000)
        with s3stream.open_store(url, object_store=rec, clock=clock, ids=IdSource(cfg.seed + 1), probe=False,
                                 wal_dir=f"{work_dir}/pass") as store:
            deleting = _pass(store, rec, cfg)
            problems = _check(store, cfg)
            steady = _pass(store, rec, cfg)
            clock.advance(cfg.segments // 4 * STEP_MS)  # another quarter of the segments expires
            warm = _pass(store, rec, cfg)
        if steady["segments_deleted"] != 0:
            problems.append(f"the steady-state pass deleted {steady['segments_deleted']} segments")
        if warm["segments_deleted"] != cfg.partitions * (cfg.segments // 4):
            problems.append(f"the warm deleting pass deleted {warm['segments_deleted']} segments")
    finally:
        MemoryObjectStore.drop_namespace(name)
    return {"setup": setup, "deleting_pass": deleting, "steady_state_pass": steady, "warm_deleting_pass": warm,
            "problems": problems}


def run(cfg: BenchConfig, *, work_dir: str) -> dict[str, Any]:
    """The standalone benchmark's result document (:func:`measure_passes` and the run's envelope)."""
    doc = Run.start("retention")
    out = measure_passes(cfg, work_dir=work_dir)
    problems = out.pop("problems")
    slug = f"{cfg.profile}{'-quick' if cfg.quick else ''}"
    target = {"spec": f"memory behind latency:{cfg.profile}", "kind": "memory", "latency_profile": cfg.profile,
              "time_scale": cfg.time_scale}
    return doc.document(slug=slug, target=target, machine=machine_info(work_dir), parameters=_config_dict(cfg),
                        body=out, problems=problems, notes=_notes(out))


def _config_dict(cfg: BenchConfig) -> dict[str, Any]:
    prof = LATENCY_PROFILES[cfg.profile]
    return {"profile": cfg.profile, "partitions": cfg.partitions, "segments_per_partition": cfg.segments,
            "segments_total": cfg.partitions * cfg.segments, "records_per_segment": RECORDS_PER_SEGMENT,
            "retention_ms": cfg.retention_ms, "expected_deleted": cfg.partitions * (cfg.segments // 2),
            "seed": cfg.seed, "time_scale": cfg.time_scale, "quick": cfg.quick,
            "latency_p50_ms": {op: getattr(prof, op).p50_ms for op in ("get", "put", "head", "list", "delete")},
            "latency_p99_ms": {op: getattr(prof, op).p99_ms for op in ("get", "put", "head", "list", "delete")}}


# -- reporting --------------------------------------------------------------------------------------------


def render_markdown(result: dict[str, Any]) -> str:
    """The summary of a standalone retention result."""
    c = result["parameters"]
    body = Markdown().heading("Passes").paragraph(
        f"{c['partitions']} partitions x {c['segments_per_partition']} sealed segments "
        f"({c['segments_total']} segments), retention.ms={c['retention_ms']} so "
        f"{c['expected_deleted']} segments expire (then another quarter, for the warm pass); "
        f"latency profile `{c['profile']}` (time scale {c['time_scale']}); the passes run in a process "
        "that does not write the partitions.")
    rows = []
    for label, key in PHASES:
        p = result[key]
        k = p["requests"]["by_kind"]
        rows.append([label, p["wall_s"], p["process_cpu_s"], p["wall_ms_per_partition"], p["requests"]["total"],
                     *(k[kind] for kind in KINDS), p["requests"]["manifest_commits"], p["partitions_changed"],
                     p["segments_deleted"]])
    body.table(["pass", "wall s", "CPU s", "ms/partition", "requests", "PUT", "GET", "HEAD", "LIST", "DELETE",
                "manifest commits", "partitions changed", "segments deleted"], rows)
    body.heading("Requests by kind and key family").bullets(
        f"{label}: " + ", ".join(f"{k}: {v}" for k, v in result[key]["requests"]["by_kind_and_family"].items())
        for label, key in PHASES)
    title = f"Retention benchmark: {c['profile']}{' (quick)' if c['quick'] else ''}"
    return render_result(result, title, body, verified="log starts and surviving segments as expected")


def _notes(result: dict[str, Any]) -> list[str]:
    """What the numbers mean, derived from what was measured."""
    out = []
    for label, key in PHASES:
        p = result[key]
        fam = p["requests"]["by_kind_and_family"]
        lists = {k.split(" ", 1)[1]: v for k, v in fam.items() if k.startswith("LIST ")}
        line = f"{label}: LIST by key family {lists}"
        if p["uncharged_get_miss_latency_p50_s"]:
            line += (f"; {p['requests']['get_misses']} GETs were 404s that the latency model does not charge "
                     f"(about {p['uncharged_get_miss_latency_p50_s']} s more at the p50 GET latency)")
        out.append(line + ".")
    out += ["Topics are found through the topic index (a probe, no LIST); LIST `manifest`: a fresh process finds "
            "each partition's latest manifest version with one LIST, then probes with GET; LIST `other` is the "
            "fresh process's first look at the topic index.",
            "Most GETs of a steady pass are 404 probes for a next manifest, topic-document or topic-index "
            "version (the commit protocol's \"is there a newer version?\"); the latency model charges them.",
            "Partitions are visited one after another, so the wall time is about the sum of the request "
            "latencies of all partitions."]
    return out


def make_config(*, profile: str = "s3-standard", quick: bool = False, partitions: int | None = None,
                segments: int | None = None, seed: int = 42, time_scale: float = 1.0) -> BenchConfig:
    """A run's shape from the command's options (100 partitions x 100 segments; 10 x 10 with ``quick``)."""
    partitions = partitions or (10 if quick else 100)
    segments = segments or (10 if quick else 100)
    if profile not in LATENCY_PROFILES:
        raise ValueError(f"unknown latency profile {profile!r}; known: {', '.join(sorted(LATENCY_PROFILES))}")
    if partitions < 1 or segments < 2:
        raise ValueError("need --partitions >= 1 and --segments >= 2")
    return BenchConfig(profile, partitions, segments, seed, time_scale, quick)


def run_standalone(cfg: BenchConfig, out_dir: Path, work_dir: Path | None = None) -> int:
    """Run, write ``out_dir/retention-<profile>[-quick].json`` and its ``.md``, print the summary; 1 if a check
    failed."""
    result = run_in_scratch(lambda work: run(cfg, work_dir=str(work)), prefix="s3stream-retention-bench-",
                            work_dir=work_dir,
                            write=lambda r: write_result(r, out_dir / f"retention-{r['slug']}.json",
                                                         render_markdown(r)))
    return 1 if result["problems"] else 0


def main(argv: list[str]) -> int:
    """``python -m benchmarks retention ARGV``, for a caller holding an argument list; its exit status."""
    from benchmarks.cli import invoke

    return invoke(["retention", *argv])


# -- the suite ----------------------------------------------------------------------------------------------

NAME = "retention"
PASSES = ("deleting_pass", "steady_state_pass", "warm_deleting_pass")


class _KeepOpen(ForwardingObjectStore):
    """The build closes its store (and so its ObjectStore) before it is done PUTting: keep the client open."""

    def close(self) -> None:
        pass


def _config(params: SuiteParams, profile: str) -> BenchConfig:
    """``retention_segments`` in total, spread over the partitions (>= 4 each, so the warm pass deletes)."""
    partitions = max(1, params.retention_partitions)
    segments = max(4, params.retention_segments // partitions)
    return BenchConfig(profile, partitions, segments, params.seed, 1.0, params.quick)


def _measure(store: s3stream.Store, rec: RecordingObjectStore) -> dict[str, Any]:
    """One retention pass with its wall time and its requests (what the standalone ``_pass`` reports, without
    the latency-model bookkeeping, which means nothing on a real store)."""
    rec.reset()
    started = time.perf_counter()
    report = store.run_retention()
    wall = time.perf_counter() - started
    return {"wall_s": wall, "requests": _requests(rec), "partitions_changed": report.partitions_changed,
            "segments_deleted": report.segments_deleted, "bytes_deleted": report.bytes_deleted}


def _run_on_target(ctx: SuiteContext, cfg: BenchConfig) -> dict[str, Any]:
    """:func:`measure_passes` against the target's store instead of an in-memory one."""
    clock = ManualClock(T0)
    url, build_objects = ctx.target.store(NAME)
    try:
        # _build only calls the ObjectStore protocol on its ``raw`` argument (typed MemoryObjectStore)
        setup = _build(cfg, url, cast(MemoryObjectStore, _KeepOpen(build_objects)), clock,
                       ctx.target.wal_dir(f"{NAME}-build"))
    finally:
        build_objects.close()
    _, pass_objects = ctx.target.store(NAME)   # a second client on the same root: a fresh process's view
    rec = RecordingObjectStore(pass_objects, log_size=10_000_000)
    with s3stream.open_store(url, object_store=rec, clock=clock, ids=IdSource(cfg.seed + 1),
                             wal_dir=ctx.target.wal_dir(f"{NAME}-pass"),
                             **{**ctx.params.open_options(), "probe": False}) as store:
        deleting = _measure(store, rec)
        problems = _check(store, cfg)
        steady = _measure(store, rec)
        clock.advance(cfg.segments // 4 * STEP_MS)  # another quarter of the segments expires
        warm = _measure(store, rec)
    if steady["segments_deleted"] != 0:
        problems.append(f"the steady-state pass deleted {steady['segments_deleted']} segments")
    if warm["segments_deleted"] != cfg.partitions * (cfg.segments // 4):
        problems.append(f"the warm deleting pass deleted {warm['segments_deleted']} segments")
    return {"setup": setup, "deleting_pass": deleting, "steady_state_pass": steady, "warm_deleting_pass": warm,
            "problems": problems}


def run_retention(ctx: SuiteContext) -> WorkloadResult:
    """Build, then measure the deleting, steady-state and warm deleting passes; raise if a pass was wrong."""
    started = time.perf_counter()
    target = ctx.target
    profile = target.spec.split(":", 1)[1] if target.kind == "latency" else None
    cfg = _config(ctx.params, profile or next(iter(LATENCY_PROFILES)))  # the profile is unused off latency
    label = f"retention: {cfg.partitions} partitions x {cfg.segments} segments"
    with ctx.progress.phase(label):
        out = measure_passes(cfg, work_dir=target.wal_dir(NAME)) if profile is not None else _run_on_target(ctx, cfg)
    if out["problems"]:
        raise RuntimeError("retention: wrong result: " + "; ".join(out["problems"][:10]))
    result = _result(cfg, out, profile, target.spec)
    result.seconds = time.perf_counter() - started
    return result


def _result(cfg: BenchConfig, out: dict[str, Any], profile: str | None, spec: str) -> WorkloadResult:
    result = WorkloadResult(NAME)
    deleting, steady, warm = (out[k] for k in PASSES)
    result.figure("deleting_pass_s", deleting["wall_s"], "s")
    result.figure("steady_pass_s", steady["wall_s"], "s")
    result.figure("warm_pass_s", warm["wall_s"], "s")
    result.figure("deleting_pass_requests", deleting["requests"]["total"], "requests")
    result.figure("steady_pass_requests", steady["requests"]["total"], "requests")
    result.figure("warm_pass_requests", warm["requests"]["total"], "requests")
    result.figure("steady_pass_list", steady["requests"]["by_kind"]["LIST"], "requests")
    result.figure("deleting_pass_manifest_commits", deleting["requests"]["manifest_commits"], "commits")
    deleted = deleting["segments_deleted"]
    result.figure("segments_deleted", deleted, "segments")
    result.figure("warm_segments_deleted", warm["segments_deleted"], "segments")
    result.figure("requests_per_deleted_segment", deleting["requests"]["total"] / max(1, deleted), "requests")
    result.requests = {kind: int(deleting["requests"]["by_kind"][kind]) for kind in KINDS}
    where = (f"in-memory objects behind the `{profile}` latency model (the standalone benchmark)"
             if profile is not None else f"the target's store ({spec}), built directly, then a second store")
    result.notes += [
        f"{cfg.partitions} partitions x {cfg.segments} sealed segments of {RECORDS_PER_SEGMENT} records on {where}; "
        f"retention.ms={cfg.retention_ms}, so {cfg.partitions * (cfg.segments // 2)} segments expire, then "
        f"{cfg.partitions * (cfg.segments // 4)} more for the warm pass",
        "the passes run in a store that does not write the partitions; requests = the deleting pass's, by kind",
        "verified: log start offsets and surviving segments after the deleting pass; nothing deleted by the "
        "steady pass; exactly the newly expired quarter deleted by the warm pass",
    ]
    return result
