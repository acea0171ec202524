"""The engine's figures (each judged against a raw limit of the same run), its console table and its summary.

:func:`build_figures` turns the raw limits and the measurements of a run into the six judged
:class:`~benchmarks.core.result.Figure` s; :func:`rejudge` does it again from a stored result document, so
the verdicts always follow from the stored measurements alone. :func:`render_markdown` is the engine's
part of the summary (raw limits, PUTs by kind, the workload, the sampled profiles) for
:mod:`benchmarks.core.markdown`.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks.core.markdown import FIGURE_HEADER, Markdown, figure_rows, render_result
from benchmarks.core.result import Figure, verdict
from s3stream.write.seal import SEAL_READ_BYTES

__all__ = ["build_figures", "print_table", "rejudge", "render_markdown"]

MiB = 1 << 20
#: Memory allowed above the process's baseline RSS and the configured buffers (interpreter arenas,
#: thread stacks, Arrow and boto3 scratch, one WAL object being encoded).
FIXED_MEMORY_OVERHEAD = 128 * MiB


def _probe_text(lat: dict[str, Any]) -> str:
    parts = []
    appenders = lat.get("appenders_fsync_during_phase_ms")
    if appenders and appenders.get("count"):
        parts.append(f"{appenders['threads']} writers each writing {appenders['block_bytes'] // 1024} KiB + fdatasync "
                     f"every {appenders['interval_ms']:.1f} ms (the appenders' pattern, the judged reference) took p50 "
                     f"{appenders['p50_ms']:.2f} / p99 {appenders['p99_ms']:.2f} / max {appenders['max_ms']:.2f} ms "
                     f"({appenders['count']} samples)")
    probe = lat.get("fsync_during_phase_ms")
    if probe and probe.get("count"):
        ratio = lat["ack_latency_ms"]["p99_ms"] / probe["p99_ms"] if probe["p99_ms"] > 0 else float("inf")
        parts.append(f"one writer's 4 KiB write + fdatasync every 5 ms took p50 {probe['p50_ms']:.2f} / p99 "
                     f"{probe['p99_ms']:.2f} / max {probe['max_ms']:.2f} ms ({probe['count']} samples; the ack p99 "
                     f"is {ratio:.2f}x that p99, context)")
    sized = lat.get("append_sized_fsync_during_phase_ms")  # results written before the appenders' probe
    if sized and sized.get("count"):
        parts.append(f"one writer's append-sized {sized['block_bytes'] // 1024} KiB write + fdatasync took p50 "
                     f"{sized['p50_ms']:.2f} / p99 {sized['p99_ms']:.2f} / max {sized['max_ms']:.2f} ms "
                     f"({sized['count']} samples, context)")
    return "; meanwhile, on the same disk, separate processes' " + ", and ".join(parts) if parts else ""


def _fsync_reference(idle_p99_ms: float, lat: dict[str, Any]) -> tuple[float, str]:
    """The raw fsync p99 an append's latency is judged against: the disk's, probed by a separate process
    while the phase ran (same disk, same load: benchmarks.core.fsyncprobe) with the appenders' count, size and
    pace; for older results, the single 4 KiB writer of the phase, or else the idle figure."""
    appenders = lat.get("appenders_fsync_during_phase_ms")
    if appenders and appenders.get("count"):
        return float(appenders["p99_ms"]), (
            f"raw write + fdatasync p99 ({appenders['threads']} x {appenders['block_bytes'] // 1024} KiB at the "
            f"appends' pace, same disk during the phase; idle 4 KiB {idle_p99_ms:.3g} ms)")
    during = lat.get("fsync_during_phase_ms")
    if during and during.get("count"):
        return float(during["p99_ms"]), f"raw fsync p99 (4 KiB, same disk during the phase; idle {idle_p99_ms:.3g} ms)"
    return idle_p99_ms, "raw fsync p99 (4 KiB, idle disk)"


def build_figures(raw: dict[str, Any], m: dict[str, Any], settings: dict[str, Any]) -> list[Figure]:
    """The six figures of the engine benchmark from the raw limits and the measurements ``m``."""
    disk, put = raw["disk_fsync_write"]["mb_per_s"], raw["put"]["mb_per_s"]
    ingest, lat, memory = m["ingest"], m["latency"], m["memory"]
    fsync_p99 = raw["fsync_latency"]["latency_ms"]["p99_ms"]
    # each of the seal_concurrency seals in flight holds one upload part and prefetches two read chunks
    seals = settings.get("seal_concurrency", 1)
    configured = (settings["buffer_bytes"] + settings["cache_bytes"] + settings["flush_bytes"]
                  + seals * (settings.get("segment_upload_part_bytes", 0) + 2 * SEAL_READ_BYTES))
    # seal worker processes (if any) bring their own interpreter: its RSS once started, measured per worker
    helpers = memory.get("helper_processes_baseline_rss_bytes", 0)
    memory_limit = memory["baseline_rss_bytes"] + helpers + configured + FIXED_MEMORY_OVERHEAD
    figures = [
        Figure.judge("ingest_throughput", "Sustained ingest, ack=wal, flushed to target",
                     ingest["payload_mb_per_s"], "MB/s", min(disk, put), "min(raw fsync'd disk, raw PUT)",
                     at_least=0.5, details=_ingest_details(ingest, put)),
        Figure.judge("ack_latency_p99", "Append ack latency p99 at half load", lat["ack_latency_ms"]["p99_ms"],
                     "ms", *_fsync_reference(fsync_p99, lat), at_most=2.0,
                     details={"p50_ms": lat["ack_latency_ms"]["p50_ms"], "p999_ms": lat["ack_latency_ms"]["p999_ms"],
                              "achieved_payload_mb_per_s": lat["payload_mb_per_s"],
                              "offered_payload_mb_per_s": lat["offered_payload_mb_per_s"],
                              "idle_fsync_p99_ms": fsync_p99,
                              "fsync_4k_during_phase_p99_ms": (lat.get("fsync_during_phase_ms") or {}).get("p99_ms")}),
    ]
    for key in ("put_cost_one", "put_cost_many"):
        cost = m[key]
        figures.append(Figure.judge(
            f"puts_per_gib_{cost['partitions']}p", f"Data PUTs per GiB, {cost['partitions']} partition(s)",
            cost["data_puts_per_gib"], "PUT/GiB", cost["bound_per_gib"], "1.1*(GiB/flush.bytes) + seals/GiB",
            at_most=1.0, details={"puts": cost["puts"], "all_puts_per_gib": cost["all_puts_per_gib"]}))
    figures += [
        Figure.judge("sequential_read", "Sequential read of sealed segments (cold store)",
                     m["read"]["payload_mb_per_s"], "MB/s", raw["ranged_get"]["mb_per_s"],
                     f"raw ranged GET ({raw['ranged_get']['threads']} threads)", at_least=0.5,
                     details={"single_stream_get_mb_per_s": raw["ranged_get_single"]["mb_per_s"]}),
        Figure.judge("peak_rss", "Peak RSS during sustained ingest", memory["peak_rss_bytes"] / MiB, "MiB",
                     memory_limit / MiB, "baseline (+ seal workers' baselines) + buffer + cache + flush "
                     "+ seals x (part + prefetch) + 128 MiB", at_most=1.0,
                     details={"baseline_rss_mib": round(memory["baseline_rss_bytes"] / MiB, 1),
                              "seal_workers_baseline_rss_mib": round(helpers / MiB, 1),
                              "configured_buffers_mib": round(configured / MiB, 1)}),
    ]
    return figures


def _ingest_details(ingest: dict[str, Any], raw_put_mb_per_s: float) -> dict[str, Any]:
    """Context of the ingest figure: rates, and how much of the raw PUT bandwidth the engine's PUTs used."""
    out = {"records_per_s": ingest["records_per_s"], "acked_payload_mb_per_s": ingest["acked_payload_mb_per_s"]}
    if "object_put_mb_per_s" in ingest:
        out["object_put_mb_per_s"] = ingest["object_put_mb_per_s"]
        out["object_bytes_put_per_payload_byte"] = ingest["object_bytes_put_per_payload_byte"]
        out["raw_put_bandwidth_used"] = round(ingest["object_put_mb_per_s"] / raw_put_mb_per_s, 3)
    return out


def print_table(console: Console, result: dict[str, Any]) -> None:
    """Print the figures table (and the raw limits) with rich."""
    figures = [Figure.from_dict(f) for f in result["figures"]]
    table = Table(title=f"s3stream engine benchmark: {result['target']['spec']}", show_lines=False)
    for h in FIGURE_HEADER:
        table.add_column(h, overflow="fold")
    for row in figure_rows(figures):
        style = "green" if row[-1] == "PASS" else "red"
        table.add_row(*row[:-1], f"[{style}]{row[-1]}[/{style}]")
    console.print(table)
    raw = Table(title="Raw limits (same run, same machine, same target)")
    for h in ("Raw limit", "Value", "Detail"):
        raw.add_column(h)
    for row in _raw_rows(result["raw_limits"]):
        raw.add_row(*row)
    console.print(raw)


def _raw_rows(raw: dict[str, Any]) -> list[list[str]]:
    lat = raw["fsync_latency"]["latency_ms"]
    put_lat = raw["put"]["latency_ms"]
    single = raw["put_single"]
    return [
        ["fsync'd sequential disk write", f"{raw['disk_fsync_write']['mb_per_s']:.1f} MB/s",
         f"{raw['disk_fsync_write']['block_bytes'] // MiB} MiB blocks, fdatasync each"],
        ["fsync latency (4 KiB append)", f"p50 {lat['p50_ms']:.3f} ms / p99 {lat['p99_ms']:.3f} ms",
         f"{lat['count']} samples"],
        ["concurrent PUT", f"{raw['put']['mb_per_s']:.1f} MB/s",
         f"{raw['put']['threads']} threads x {raw['put']['object_bytes'] // MiB} MiB; "
         f"p50 {put_lat['p50_ms']:.1f} ms / p99 {put_lat['p99_ms']:.1f} ms"],
        ["single-stream PUT", f"{single['mb_per_s']:.1f} MB/s",
         f"1 thread x {single['object_bytes'] // MiB} MiB; p50 {single['latency_ms']['p50_ms']:.1f} ms (context only)"],
        ["concurrent ranged GET", f"{raw['ranged_get']['mb_per_s']:.1f} MB/s",
         f"{raw['ranged_get']['threads']} threads x {raw['ranged_get']['range_bytes'] // MiB} MiB ranges"],
        ["single-stream ranged GET", f"{raw['ranged_get_single']['mb_per_s']:.1f} MB/s",
         f"1 thread x {raw['ranged_get_single']['range_bytes'] // MiB} MiB ranges (context only)"],
    ]


def render_markdown(result: dict[str, Any]) -> str:
    """The summary of an engine result: figures, raw limits, PUTs by kind, the workload, the profiles."""
    params, m = result["parameters"], result["measurements"]
    body = Markdown()
    body.heading("Raw limits").table(["Raw limit", "Value", "Detail"], _raw_rows(result["raw_limits"]))
    body.heading("PUTs by kind").table(
        ["Run", "GiB", "ingest MB/s", "WAL objects", "segments", "manifests", "other",
         "one-time: fence / claims / WAL", "data PUT/GiB", "bound/GiB"],
        [_put_row(m[k]) for k in ("put_cost_one", "put_cost_many")])
    body.heading("Workload").paragraph(_workload_text(params, m, result["raw_limits"]["put"]["mb_per_s"]))
    for phase, profile in (result.get("profiles") or {}).items():
        body.heading(f"Profile: {phase.replace('_', ' ')} (sampled stacks)").paragraph(_profile_text(profile))
    run = f"{'quick' if params['quick'] else 'full'} run, ingest {params['duration_s']:g} s"
    return render_result(result, f"s3stream engine benchmark: `{result['target']['spec']}`", body,
                         facts=[("Run length", run)])


def _put_row(cost: dict[str, Any]) -> list[str]:
    p, once = cost["puts"], cost["one_time_puts"]
    return [f"{cost['partitions']} partition(s)", f"{cost['record_bytes_ingested'] / (1 << 30):.3f}",
            f"{cost['ingest_payload_mb_per_s']:.1f}", str(p["wal_object"]), str(p["segment"]), str(p["manifest"]),
            str(p["other"]), f"{once['fence']} / {once['manifest']} / {once['wal_object']}",
            f"{cost['data_puts_per_gib']:.1f}", f"{cost['bound_per_gib']:.1f}"]


def _workload_text(params: dict[str, Any], m: dict[str, Any], raw_put_mb_per_s: float) -> str:
    ing, lat, read = m["ingest"], m["latency"], m["read"]
    return "\n".join([
        f"- Sustained ingest: {params['producers']} producer threads, {params['partitions']} partitions, "
        f"batches of {params['batch_records']} x {params['record_bytes']} B records; "
        f"{ing['records_per_s']:,.0f} records/s flushed ({ing['acked_records_per_s']:,.0f} acked/s), "
        f"{ing.get('wal_objects_put', '?')} WAL objects, {ing.get('sealed_segments', '?')} segments sealed, "
        f"{ing.get('object_bytes_put_per_payload_byte', '?')} object bytes PUT per payload byte "
        f"({ing.get('object_put_mb_per_s', '?')} MB/s of PUTs, "
        f"{ing.get('object_put_mb_per_s', 0) / max(raw_put_mb_per_s, 1e-9):.0%} of the raw PUT "
        "bandwidth); "
        f"process CPU {ing['cpu'].get('process_cpu_cores', '?')} cores"
        + (f" (seal workers {ing['cpu']['helper_processes_cpu_cores']})" if "helper_processes_cpu_cores" in ing["cpu"]
           else "")
        + f", machine {ing['cpu'].get('machine_busy_cores', '?')} cores busy.",
        f"- Ack latency at half load: batches of {lat['batch_records']} records, offered "
        f"{lat['offered_payload_mb_per_s']} MB/s, achieved {lat['payload_mb_per_s']} MB/s, "
        f"p50 {lat['ack_latency_ms']['p50_ms']:.2f} / p99 {lat['ack_latency_ms']['p99_ms']:.2f} / "
        f"p999 {lat['ack_latency_ms']['p999_ms']:.2f} ms over {lat['ack_latency_ms']['count']} appends"
        + _probe_text(lat) + ".",
        f"- Sequential read: {read['records']:,} records in {read['read_calls']} read_arrow calls of "
        f"<= {read['read_max_bytes'] // MiB} MiB from {read['sealed_segments']} sealed segments; "
        f"{read['object_mb_per_s']} MB/s of object bytes; process CPU {read['cpu'].get('process_cpu_cores', '?')} "
        "cores.",
        _memory_text(m["memory"]),
        "- MB = 10^6 bytes of record payload (keys + values); PUT costs are per GiB of record bytes "
        "(payload + 21 B per record, the unit of flush.bytes).",
    ])


_HARNESS_ROLES = frozenset({"bench-rss", "bench-progress", "bench-profiler"})


def _memory_text(mem: dict[str, Any]) -> str:
    text = (f"- Memory: peak RSS {mem['peak_rss_bytes'] / MiB:.0f} MiB ({mem['method']}), baseline before the "
            f"store opened {mem['baseline_rss_bytes'] / MiB:.0f} MiB")
    if mem.get("helper_processes_peak_rss_bytes"):
        text += (f", of which seal worker processes {mem['helper_processes_peak_rss_bytes'] / MiB:.0f} MiB "
                 f"(their baselines once started {mem.get('helper_processes_baseline_rss_bytes', 0) / MiB:.0f} MiB)")
    if "arrow_allocated_sampled_peak_bytes" in mem:
        text += (f"; Arrow pool ({mem['arrow_memory_pool']}) peak {mem['arrow_allocated_sampled_peak_bytes'] / MiB:.0f}"
                 " MiB")
    gauges = mem.get("gauge_peaks_bytes") or {}
    if gauges:
        text += "; engine peaks: " + ", ".join(f"{k} {v / MiB:.0f} MiB" for k, v in gauges.items())
    return text + " (sampled every 20 ms)." if gauges or "arrow_allocated_sampled_peak_bytes" in mem else text + "."


def _profile_text(profile: dict[str, Any], top: int = 8) -> str:
    lines = [f"Sampled every {profile['interval_ms']:g} ms; share of each thread role's samples "
             "(wall-clock: a blocked thread shows its innermost Python frame)."]
    for role, info in profile["threads_by_role"].items():
        if role in _HARNESS_ROLES or (info["top_self"] and info["top_self"][0][1] >= 99.0
                                      and "threading.py:wait" in info["top_self"][0][0]):
            continue  # the harness's helpers, and threads that only waited
        items = ", ".join(f"`{fn}` {pct}%" for fn, pct in info["top_self"][:top])
        lines.append(f"- **{role}** ({info['samples']} samples), self: {items}")
    return "\n".join(lines)


def rejudge(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` with its figures and verdict rebuilt from its raw limits and measurements."""
    figures = build_figures(result["raw_limits"], result["measurements"], result["store_settings"])
    return {**result, **verdict(figures, result.get("problems", []))}
