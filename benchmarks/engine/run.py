"""The engine benchmark, phase by phase: raw limits, ingest, latency, PUT costs, reads, then the report.

Phases, in order, all against one target opened once (:func:`~benchmarks.core.targets.open_target`):

1. open the target (start ``weed mini`` for ``seaweedfs``);
2. raw limits (:mod:`~benchmarks.core.rawlimits`): fsync'd disk bandwidth and fsync latency of the WAL
   directory's disk, concurrent and single-stream PUTs and ranged GETs;
3. sustained ingest, ack latency at half load, peak RSS (:mod:`~benchmarks.engine.sustained`);
4. PUTs per GiB for 1 partition and for ``many_partitions`` (:mod:`~benchmarks.engine.costs`);
5. sequential read of the 1-partition log from a fresh store (:mod:`~benchmarks.engine.costs`);
6. close the target (stop the server, delete what the run wrote) and write the results.

Invariant: whatever happens (an error, Ctrl-C), the target is closed and the run's scratch directory
removed (unless ``keep_work_dir``) before the exception propagates; nothing is left running.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console

from benchmarks.core.measure import machine_info
from benchmarks.core.progress import PhaseProgress
from benchmarks.core.rawlimits import disk_write_bandwidth, fsync_latency, get_bandwidth, put_bandwidth
from benchmarks.core.result import Run, write_result
from benchmarks.core.targets import Target, open_target
from benchmarks.engine.costs import measure_put_cost, sequential_read
from benchmarks.engine.figures import build_figures, print_table, render_markdown
from benchmarks.engine.params import Params
from benchmarks.engine.sustained import measure_ingest

__all__ = ["run_engine_benchmark"]

_PHASES = 13


def _raw_limits(target: Target, params: Params, progress: PhaseProgress) -> dict[str, Any]:
    """Measure every raw limit of the machine's WAL disk and of ``target``."""
    wal_disk = Path(target.wal_dir("raw"))
    with progress.phase("raw: fsync'd disk write bandwidth", seconds=params.raw_seconds):
        disk = disk_write_bandwidth(wal_disk, params.raw_seconds, params.disk_block_bytes)
    with progress.phase("raw: fsync latency (4 KiB)", seconds=params.fsync_seconds):
        fsync = fsync_latency(wal_disk, params.fsync_seconds)
    with progress.phase(f"raw: PUT bandwidth ({params.put_threads} threads)", seconds=params.raw_seconds):
        put, keys = put_bandwidth(target.raw, threads=params.put_threads, object_bytes=params.put_object_bytes,
                                  seconds=params.raw_seconds)
    with progress.phase("raw: PUT bandwidth (1 thread)", seconds=params.raw_seconds):
        put_single, more_keys = put_bandwidth(target.raw, threads=1, object_bytes=params.put_object_bytes,
                                              seconds=params.raw_seconds, key_prefix="put1")
    keys += more_keys
    with progress.phase(f"raw: ranged GET bandwidth ({params.put_threads} threads)", seconds=params.raw_seconds):
        get = get_bandwidth(target.raw, keys, threads=params.put_threads, object_bytes=params.put_object_bytes,
                            range_bytes=params.get_range_bytes, seconds=params.raw_seconds)
    with progress.phase("raw: ranged GET bandwidth (1 thread)", seconds=params.raw_seconds):
        single = get_bandwidth(target.raw, keys, threads=1, object_bytes=params.put_object_bytes,
                               range_bytes=params.get_range_bytes, seconds=params.raw_seconds)
    return {
        "disk_fsync_write": {**disk.as_dict(), "block_bytes": params.disk_block_bytes, "directory": str(wal_disk)},
        "fsync_latency": {**fsync.as_dict(), "block_bytes": 4096},
        "put": {**put.as_dict(), "object_bytes": params.put_object_bytes},
        "put_single": {**put_single.as_dict(), "object_bytes": params.put_object_bytes},
        "ranged_get": {**get.as_dict(), "range_bytes": params.get_range_bytes},
        "ranged_get_single": {**single.as_dict(), "range_bytes": params.get_range_bytes},
    }


def _measure(target: Target, params: Params, progress: PhaseProgress) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every phase against an open target: (raw limits, measurements)."""
    raw = _raw_limits(target, params, progress)
    ingest = measure_ingest(target, params, progress)
    one = measure_put_cost(target, params, 1, progress, roll_at_end=True)
    many = measure_put_cost(target, params, params.many_partitions, progress, roll_at_end=False)
    read, read_profile = sequential_read(target, params, one.store_name, progress)
    profiles = dict(ingest.profiles)
    if read_profile is not None:
        profiles["sequential_read"] = read_profile
    measurements = {"ingest": ingest.sustained, "latency": ingest.latency, "memory": ingest.memory,
                    "put_cost_one": one.details, "put_cost_many": many.details, "read": read,
                    "profiles": profiles}
    return raw, measurements


def run_engine_benchmark(params: Params, console: Console | None = None) -> dict[str, Any]:
    """Run the whole benchmark, write ``params.out`` (JSON) and its ``.md``, print the table; return the result."""
    console = console or Console()
    run = Run.start("engine")
    if params.work_dir is not None:
        params.work_dir.mkdir(parents=True, exist_ok=True)
    work_dir = Path(tempfile.mkdtemp(prefix="s3stream-bench-", dir=params.work_dir))
    try:
        with PhaseProgress(console, phases=_PHASES, enabled=params.progress) as progress, \
                contextlib.ExitStack() as stack:
            with progress.phase(f"open target {params.target}"):
                target = stack.enter_context(open_target(params.target, work_dir, seed=params.seed))
            machine = machine_info(str(work_dir))
            target_info = {"spec": params.target, "slug": target.slug, **target.description}
            raw, measurements = _measure(target, params, progress)
            with progress.phase("close target"):
                stack.close()
    finally:
        if not params.keep_work_dir:
            shutil.rmtree(work_dir, ignore_errors=True)
    settings = params.settings()
    settings_dict = {name: getattr(settings, name) for name in settings.__dataclass_fields__}
    settings_dict["default_topic_config"] = dict(settings.default_topic_config)
    kept = {k: v for k, v in measurements.items() if k != "profiles"}
    body = {"store_settings": settings_dict, "raw_limits": raw, "measurements": kept,
            "profiles": measurements["profiles"] or None}
    result = run.document(slug=target_info["slug"], target=target_info, machine=machine,
                          parameters=params.as_dict(), body=body, figures=build_figures(raw, kept, settings_dict))
    write_result(result, params.out, render_markdown(result))
    print_table(console, result)
    console.print(f"results: {params.out} and {params.out.with_suffix('.md')}")
    return result
