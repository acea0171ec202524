"""The retention workload: wall time and requests of retention passes over many partitions and segments.

It is :mod:`benchmarks.retention` with the suite's sizes (``retention_partitions`` partitions holding
``retention_segments`` sealed segments in total, half of them expired): a deleting pass in a fresh store
(cold caches), a steady-state pass (nothing to delete) and a warm deleting pass (another quarter expires).

* ``latency:<profile>`` targets run the standalone benchmark as is: in-memory objects behind that latency
  model, so building thousands of segments costs nothing and every pass pays the modelled latencies;
* other targets (``file``, ``seaweedfs``, ``s3://``) build the same log on the target's real store and run
  the passes in a second store opened on it, through :class:`RecordingObjectStore` (the standalone
  :func:`benchmarks.retention.run` only knows the in-memory store, hence the few lines of orchestration here).

Every pass is checked (log starts, surviving segments, segments deleted); a wrong result raises.
"""

from __future__ import annotations

import time
from typing import Any, cast

import s3stream
from benchmarks.retention import RECORDS_PER_SEGMENT, STEP_MS, T0, BenchConfig, _build, _check, _requests, run
from benchmarks.suite.model import SuiteContext, SuiteParams, WorkloadResult
from s3stream.clock import ManualClock
from s3stream.ids import IdSource
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.testing.forwarding import ForwardingObjectStore
from s3stream.testing.latency import LATENCY_PROFILES
from s3stream.testing.recording import KINDS, RecordingObjectStore

__all__ = ["run_retention"]

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
    """:func:`benchmarks.retention.run` against the target's store instead of an in-memory one."""
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
        out = run(cfg, work_dir=target.wal_dir(NAME)) if profile is not None else _run_on_target(ctx, cfg)
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
