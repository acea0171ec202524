"""The benchmark command line: ``python -m benchmarks engine|run --target ... --duration 60``.

``engine``: exit status 0 when every figure meets its target, 1 when some figure misses it (the result
files are written either way), 2 for a usage error or a run that could not complete. ``run`` (the suite):
0 when every workload ran and wrote its figures, 2 for a usage error or a run that could not complete
(the failing workload is named). Either, stopped by SIGTERM: 143, after stopping the servers it started
and removing its scratch directory.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from benchmarks.params import MiB, make_params
from benchmarks.process import start_benchmark_process
from benchmarks.report import print_table
from benchmarks.targets import target_slug
from s3stream.errors import S3StreamError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="s3stream benchmarks: figures measured against raw limits of the same run.")


@app.callback()
def main() -> None:
    """s3stream benchmarks (see benchmarks/README.md)."""
    start_benchmark_process()  # as s3stream's own processes run; SIGTERM cleans up


def _options(values: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise typer.BadParameter(f"store option {item!r} is not NAME=VALUE", param_hint="--option")
        out[name.strip()] = value.strip()
    return out


@app.command()
def engine(
    target: Annotated[str, typer.Option(help="seaweedfs | file | latency:<profile> | s3://BUCKET/PREFIX?...")],
    duration: Annotated[float | None, typer.Option(help="Sustained-ingest seconds (default 60; 5 with --quick).")]
    = None,
    out: Annotated[Path | None, typer.Option(help="Result JSON (default benchmarks/results/engine-<target>.json); "
                                                  "the markdown summary goes beside it.")] = None,
    quick: Annotated[bool, typer.Option(help="A few seconds per phase, 128 MiB PUT-cost runs.")] = False,
    partitions: Annotated[int, typer.Option(help="Partitions of the sustained-ingest topic.")] = 8,
    producers: Annotated[int, typer.Option(help="Producer threads.")] = 4,
    batch_records: Annotated[int, typer.Option(help="Records per append (1 KiB each).")] = 500,
    many_partitions: Annotated[int, typer.Option(help="Partitions of the second PUT-cost run.")] = 1000,
    cost_mib: Annotated[int | None, typer.Option(help="MiB ingested by each PUT-cost run (default 1024).")] = None,
    segment_mib: Annotated[int | None, typer.Option(help="segment.bytes of the benchmark topics in MiB "
                                                         "(default 64; 8 with --quick).")] = None,
    option: Annotated[list[str] | None, typer.Option("--option", "-o",
                                                     help="Store option NAME=VALUE (repeatable).")] = None,
    profile: Annotated[bool, typer.Option(help="Sample every thread's stack during sustained ingest.")] = False,
    work_dir: Annotated[Path | None, typer.Option(help="Scratch parent dir (its disk holds the WAL).")] = None,
    keep_work_dir: Annotated[bool, typer.Option(help="Keep the scratch dir (WALs, local objects).")] = False,
    progress: Annotated[bool, typer.Option(help="Show the progress bar.")] = True,
) -> None:
    """Measure the storage engine against raw disk and object-store limits of the same run."""
    from benchmarks.engine import run_engine_benchmark

    console = Console() if sys.stdout.isatty() else Console(width=160)
    out_path = out or Path("benchmarks/results") / f"engine-{target_slug(target)}.json"
    overrides: dict[str, object] = {"partitions": partitions, "producers": producers,
                                    "batch_records": batch_records, "many_partitions": many_partitions,
                                    "store_options": _options(option or []), "profile": profile,
                                    "work_dir": work_dir, "keep_work_dir": keep_work_dir, "progress": progress}
    if cost_mib is not None:
        overrides["cost_bytes"] = cost_mib * MiB
    if segment_mib is not None:
        overrides["segment_bytes"] = segment_mib * MiB
    try:
        params = make_params(target, out_path, quick=quick, duration_s=duration, **overrides)
        result = run_engine_benchmark(params, console)
    except S3StreamError as exc:
        console.print(f"[red]benchmark failed:[/red] {type(exc).__name__}: {exc}")
        raise typer.Exit(2) from exc
    raise typer.Exit(0 if result["passed"] else 1)


@app.command()
def run(
    target: Annotated[str, typer.Option(help="seaweedfs | file | latency:<profile> | s3://BUCKET/PREFIX?...")],
    workloads: Annotated[str, typer.Option(help="Comma list of ingest,e2e,catchup,compaction,retention,mixed,"
                                                "recovery (default all).")] = "all",
    duration: Annotated[float | None, typer.Option(help="Seconds per timed workload phase (default 60; 3 with "
                                                        "--quick).")] = None,
    quick: Annotated[bool, typer.Option(help="Smoke-sized run: seconds per phase, 16 MiB data sets.")] = False,
    record_bytes: Annotated[int | None, typer.Option(help="Bytes per record value (default 1024).")] = None,
    partitions: Annotated[int | None, typer.Option(help="Partitions of the workload topics (default 8).")] = None,
    producers: Annotated[int | None, typer.Option(help="Producer threads (default 4).")] = None,
    batch_records: Annotated[int | None, typer.Option(help="Records per append (default 100).")] = None,
    flush_bytes: Annotated[int | None, typer.Option(help="flush.bytes of every store (default 8 MiB).")] = None,
    flush_interval_ms: Annotated[int | None, typer.Option(help="flush.interval.ms of every store (default 250).")]
    = None,
    segment_mib: Annotated[int | None, typer.Option(help="segment.bytes of the topics in MiB (default 64; 8 with "
                                                         "--quick).")] = None,
    consumers: Annotated[int | None, typer.Option(help="Tailing readers of e2e and mixed (default 2).")] = None,
    rate: Annotated[float | None, typer.Option(help="Offered load of e2e/mixed in MB/s (default: the workload's).")]
    = None,
    seed: Annotated[int, typer.Option(help="Seed of every random choice.")] = 0,
    price: Annotated[list[str] | None, typer.Option("--price", help="Cost-model price NAME=VALUE (repeatable; "
                                                    "put, get, head, list, delete per 1,000 requests, storage per "
                                                    "GB-month).")] = None,
    option: Annotated[list[str] | None, typer.Option("--option", "-o",
                                                     help="Store option NAME=VALUE (repeatable).")] = None,
    raw_seconds: Annotated[float | None, typer.Option(help="Seconds per raw-limit measurement (default 5; 1 with "
                                                           "--quick).")] = None,
    catchup_mib: Annotated[int | None, typer.Option(help="MiB written then read back by catchup.")] = None,
    compaction_mib: Annotated[int | None, typer.Option(help="MiB of keyed records compacted.")] = None,
    retention_segments: Annotated[int | None, typer.Option(help="Sealed segments the retention workload "
                                                                "builds.")] = None,
    recovery_entries: Annotated[int | None, typer.Option(help="Local WAL entries the recovery workload reopens "
                                                              "(default 20,000; 2,000 with --quick).")] = None,
    out_dir: Annotated[Path, typer.Option(help="Where {slug}.json, {slug}.md and {slug}/*.png go.")]
    = Path("benchmarks/results/suite"),
    work_dir: Annotated[Path | None, typer.Option(help="Scratch parent dir (its disk holds the WAL).")] = None,
    progress: Annotated[bool, typer.Option(help="Show the progress bar.")] = True,
) -> None:
    """Run the benchmark suite: raw limits, then each workload; JSON, markdown and PNG plots."""
    from benchmarks.suite.costmodel import parse_price
    from benchmarks.suite.registry import WorkloadUnavailable, parse_workloads
    from benchmarks.suite.runner import SuiteError, run_suite, suite_params

    console = Console() if sys.stdout.isatty() else Console(width=160)
    try:
        names = parse_workloads(workloads)
        prices = dict(parse_price(p) for p in price or [])
    except (WorkloadUnavailable, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    sizes = {"segment_bytes": segment_mib, "catchup_bytes": catchup_mib, "compaction_bytes": compaction_mib}
    params = suite_params(
        target, quick=quick, workloads=names, duration_s=duration, record_bytes=record_bytes, partitions=partitions,
        producers=producers, batch_records=batch_records, flush_bytes=flush_bytes,
        flush_interval_ms=flush_interval_ms, consumers=consumers, rate_mb_per_s=rate, seed=seed, prices=prices,
        store_options=_options(option or []), raw_seconds=raw_seconds, retention_segments=retention_segments,
        recovery_entries=recovery_entries, out_dir=out_dir, work_dir=work_dir, progress=progress,
        **{k: v * MiB for k, v in sizes.items() if v is not None})
    try:
        run_suite(params, console)
    except (SuiteError, WorkloadUnavailable, S3StreamError) as exc:
        console.print(f"[red]suite failed:[/red] {exc}")
        raise typer.Exit(2) from exc


@app.command()
def render(
    result: Annotated[Path, typer.Argument(help="A result JSON written by `engine`.", exists=True, dir_okay=False)],
) -> None:
    """Re-judge the figures of a result JSON and rewrite it and its markdown (same measurements)."""
    import json

    from benchmarks.report import rejudge, write_results

    console = Console() if sys.stdout.isatty() else Console(width=160)
    data = rejudge(json.loads(result.read_text()))
    md = write_results(data, result)
    print_table(console, data)
    console.print(f"rewrote {result} and {md}")
    raise typer.Exit(0 if data["passed"] else 1)


@app.command()
def summary(
    results: Annotated[list[Path], typer.Argument(help="Suite result JSON files (one table row each).",
                                                  exists=True, dir_okay=False)],
) -> None:
    """Print the README's markdown table of suite results, generated from the result files."""
    from benchmarks.suite.summary import summary_table

    print(summary_table(results), end="")


if __name__ == "__main__":
    app(prog_name="python -m benchmarks")
