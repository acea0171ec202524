"""The one benchmark command line: ``python -m benchmarks <workload> [OPTIONS]`` (``--help`` lists them all).

Commands, as ``--help`` groups them:

* **Workloads** that run alone and write their own result files (``benchmarks/results/<workload>-<slug>``):
  ``engine``, ``compaction``, ``retention``, ``recovery``, ``spark-compaction``, ``small-appends``;
* **Suite**: ``suite`` runs the raw limits and then every suite workload against one target into one result
  (``benchmarks/results/suite/<slug>``); ``ingest``, ``e2e``, ``catchup`` and ``mixed`` run one suite workload
  that way (``compaction``, ``retention`` and ``recovery`` run in the suite with ``suite --workloads NAME``);
* **Result files**: ``render`` rewrites a result's markdown (and the engine's verdicts) from its JSON,
  ``summary`` prints the README's table of suite results.

Every command measures in a fresh scratch directory and leaves nothing behind. Exit status: 0 when the run
completed (and, for workloads with targets, met them), 1 when a target was missed or a check failed (the files
are written either way), 2 for a usage error, a wrong result or a run that could not complete, 143 when stopped
by SIGTERM (after stopping the servers it started and removing its scratch directory).
"""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from benchmarks.core.process import exit_on_sigterm, start_benchmark_process
from benchmarks.core.result import RESULTS_DIR
from s3stream.base.errors import S3StreamError

__all__ = ["STANDALONE", "SUITE_COMMANDS", "app", "invoke"]

MiB = 1 << 20

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="s3stream benchmarks: every figure a ratio to a raw limit measured in the same run "
                       "(see benchmarks/README.md).")

_WORKLOADS, _SUITE, _FILES = "Workloads (standalone)", "Suite", "Result files"

#: Workloads that run alone, with their own result files.
STANDALONE = ("engine", "compaction", "retention", "recovery", "spark-compaction", "small-appends", "kafka")
#: Suite workloads with a command of their own (the others are standalone workloads too).
SUITE_COMMANDS = ("ingest", "e2e", "catchup", "mixed")


@app.callback()
def main() -> None:
    """s3stream benchmarks (see benchmarks/README.md)."""
    exit_on_sigterm()  # a stopped run still stops its servers and removes its scratch directory


def invoke(argv: Sequence[str]) -> int:
    """Run ``python -m benchmarks ARGV`` in this process; its exit status."""
    try:
        code = app(args=list(argv), prog_name="python -m benchmarks", standalone_mode=False)
    except typer.TyperException as exc:  # a usage error, as the command line would report it
        show = getattr(exc, "show", None)
        if callable(show):
            show()
        return int(exc.exit_code)
    return code if isinstance(code, int) else 0


def _console() -> Console:
    return Console() if sys.stdout.isatty() else Console(width=160)


def _options(values: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise typer.BadParameter(f"store option {item!r} is not NAME=VALUE", param_hint="--option")
        out[name.strip()] = value.strip()
    return out


TargetOpt = Annotated[str, typer.Option(help="file | seaweedfs | latency:<profile> | s3://BUCKET/PREFIX?...")]
StoreOpts = Annotated[list[str] | None, typer.Option("--option", "-o", help="Store option NAME=VALUE (repeatable).")]
WorkDirOpt = Annotated[Path | None, typer.Option(help="Scratch parent dir (its disk holds the WAL).")]
OutDirOpt = Annotated[Path, typer.Option(help="Where the result JSON and its markdown summary go.")]


# ------------------------------------------------------------------------------------------ standalone workloads


@app.command(rich_help_panel=_WORKLOADS, help=(
    "The storage engine: ingest, ack latency, PUTs per GiB, sequential read and memory, each judged "
    "against a raw disk or object-store limit of the same run (exit 1 when a target is missed)."))
def engine(
    target: TargetOpt,
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
    option: StoreOpts = None,
    profile: Annotated[bool, typer.Option(help="Sample every thread's stack during sustained ingest.")] = False,
    work_dir: WorkDirOpt = None,
    keep_work_dir: Annotated[bool, typer.Option(help="Keep the scratch dir (WALs, local objects).")] = False,
    progress: Annotated[bool, typer.Option(help="Show the progress bar.")] = True,
) -> None:
    from benchmarks.core.targets import target_slug
    from benchmarks.engine.params import make_params
    from benchmarks.engine.run import run_engine_benchmark

    start_benchmark_process()
    console = _console()
    out_path = out or RESULTS_DIR / f"engine-{target_slug(target)}.json"
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


@app.command(rich_help_panel=_WORKLOADS, help=(
    "Compaction: one cleaner pass over a compacted partition against the raw rewrite limit of the "
    "same segments and a per-record Python baseline (also a suite workload: suite --workloads "
    "compaction)."))
def compaction(
    quick: Annotated[bool, typer.Option(help="48 MiB in 4 MiB segments, 5000 keys (a smoke run).")] = False,
    gib: Annotated[float, typer.Option(help="GiB of records in the partition.")] = 1.0,
    keys: Annotated[int, typer.Option(help="Distinct keys.")] = 100_000,
    record_bytes: Annotated[int, typer.Option(help="Logical bytes per record.")] = 1024,
    segment_mib: Annotated[int, typer.Option(help="segment.bytes in MiB.")] = 64,
    baseline_segments: Annotated[int, typer.Option(help="Segments the baseline cleans (0: all of them).")] = 0,
    dedupe_mib: Annotated[int, typer.Option(help="log.cleaner.dedupe.buffer.size in MiB.")] = 128,
    repeat: Annotated[int, typer.Option(help="Interleaved repetitions; the best of each phase counts (at most 2 "
                                             "with --quick).")] = 3,
    seed: Annotated[int, typer.Option(help="Seed of the keys and values.")] = 7,
    profile: Annotated[bool, typer.Option(help="cProfile the cleaner pass into the results.")] = False,
    out_dir: OutDirOpt = RESULTS_DIR,
    work_dir: WorkDirOpt = None,
) -> None:
    from benchmarks import compaction as bench

    start_benchmark_process()
    try:
        cfg = bench.make_config(quick=quick, gib=gib, keys=keys, record_bytes=record_bytes, segment_mib=segment_mib,
                                baseline_segments=baseline_segments, dedupe_mib=dedupe_mib, repeat=repeat, seed=seed,
                                profile=profile)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    raise typer.Exit(bench.run_standalone(cfg, out_dir, work_dir))


@app.command(rich_help_panel=_WORKLOADS, help=(
    "Retention: requests, manifest commits and wall time of retention passes over many sealed "
    "segments, behind an S3 latency model (also a suite workload: suite --workloads retention)."))
def retention(
    profile: Annotated[str, typer.Option(help="Latency model of the passes: s3-standard, s3-express or lan.")]
    = "s3-standard",
    quick: Annotated[bool, typer.Option(help="A small run: 10 partitions x 10 segments.")] = False,
    partitions: Annotated[int | None, typer.Option(help="Partitions (default 100).")] = None,
    segments: Annotated[int | None, typer.Option(help="Sealed segments per partition (default 100).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the modelled latencies.")] = 42,
    time_scale: Annotated[float, typer.Option(help="Multiply every modelled latency.")] = 1.0,
    out_dir: OutDirOpt = RESULTS_DIR,
    work_dir: WorkDirOpt = None,
) -> None:
    from benchmarks import retention as bench

    try:
        cfg = bench.make_config(profile=profile, quick=quick, partitions=partitions, segments=segments, seed=seed,
                                time_scale=time_scale)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    raise typer.Exit(bench.run_standalone(cfg, out_dir, work_dir))


@app.command(rich_help_panel=_WORKLOADS, help=(
    "Recovery: what opening a store costs after a clean close and after crashes that left a full "
    "local WAL (also a suite workload: suite --workloads recovery)."))
def recovery(
    target: TargetOpt = "file",
    quick: Annotated[bool, typer.Option(help="2,000 entries.")] = False,
    entries: Annotated[int | None, typer.Option(help="Appends (local WAL entries) before the stop (default "
                                                     "20,000).")] = None,
    partitions: Annotated[int, typer.Option(help="Partitions the appends go round-robin to.")] = 4,
    record_bytes: Annotated[int, typer.Option(help="Bytes per record value.")] = 100,
    option: StoreOpts = None,
    out_dir: OutDirOpt = RESULTS_DIR,
    work_dir: WorkDirOpt = None,
) -> None:
    from benchmarks import recovery as bench

    try:
        cfg = bench.make_config(quick=quick, entries=entries, partitions=partitions, record_bytes=record_bytes,
                                options=_options(option or []))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    raise typer.Exit(bench.run_standalone(target, cfg, out_dir, work_dir))


@app.command("small-appends", rich_help_panel=_WORKLOADS, help=(
    "Small appends: process CPU per one-record append_async and appends/s from 16 threads (issue 25 bounds: "
    "<= 150 us, >= 10,000/s), blocking appends beside them, where the CPU goes by thread."))
def small_appends(
    target: TargetOpt = "file",
    quick: Annotated[bool, typer.Option(help="4,000 async and 800 blocking appends per phase.")] = False,
    appends: Annotated[int | None, typer.Option(help="Appends per async phase (default 40,000; a fifth as many per "
                                                     "blocking phase).")] = None,
    window: Annotated[int, typer.Option(help="Async appends in flight per phase (split over its threads).")] = 256,
    value_bytes: Annotated[int, typer.Option(help="Bytes per record value.")] = 100,
    option: StoreOpts = None,
    out_dir: OutDirOpt = RESULTS_DIR,
    work_dir: WorkDirOpt = None,
) -> None:
    from benchmarks import small_appends as bench

    try:
        cfg = bench.make_config(quick=quick, appends=appends, window=window, value_bytes=value_bytes,
                                options=_options(option or []))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    raise typer.Exit(bench.run_standalone(target, cfg, out_dir, work_dir))


@app.command(rich_help_panel=_WORKLOADS, help=(
    "Kafka: the Kafka server against the Python API on the same store: confluent-kafka produce (acks=all) "
    "against append_arrow_async, consumer catch-up against read_arrow, added end-to-end p99 at half load."))
def kafka(
    target: TargetOpt = "file",
    quick: Annotated[bool, typer.Option(help="24 MiB per produce path, 3 s of end to end per path.")] = False,
    mib: Annotated[int | None, typer.Option(help="MiB each produce path writes (default 512).")] = None,
    partitions: Annotated[int, typer.Option(help="Partitions of each topic.")] = 4,
    record_bytes: Annotated[int, typer.Option(help="Bytes per record value.")] = 1024,
    linger_ms: Annotated[int, typer.Option(help="linger.ms of the Kafka producer (and the Python API's batching "
                                                "in the end-to-end phase).")] = 10,
    api_threads: Annotated[int, typer.Option(help="Python API producer threads.")] = 4,
    api_batch_records: Annotated[int, typer.Option(help="Records per Python API append (0: the Kafka producer's "
                                                        "measured mean batch).")] = 0,
    api_inflight_mib: Annotated[int, typer.Option(help="MiB of Python API appends in flight (all threads).")] = 32,
    e2e_seconds: Annotated[float | None, typer.Option(help="Seconds of end to end per path (default 30).")] = None,
    option: StoreOpts = None,
    server_option: Annotated[list[str] | None, typer.Option("--server-option", help="Kafka server option "
                                                            "NAME=VALUE (repeatable).")] = None,
    out_dir: OutDirOpt = RESULTS_DIR,
    work_dir: WorkDirOpt = None,
) -> None:
    from benchmarks import kafka as bench

    try:
        cfg = bench.make_config(quick=quick, mib=mib, partitions=partitions, record_bytes=record_bytes,
                                linger_ms=linger_ms, api_threads=api_threads, api_batch_records=api_batch_records,
                                api_inflight_mib=api_inflight_mib, e2e_seconds=e2e_seconds,
                                options=_options(option or []), broker_options=_options(server_option or []))
    except (ValueError, S3StreamError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    raise typer.Exit(bench.run_standalone(target, cfg, out_dir, work_dir))


@app.command("spark-compaction", rich_help_panel=_WORKLOADS, help=(
    "Spark compaction: the distributed job against the in-process cleaner on the same data, and "
    "where the job's parallelism starts to pay (exit 2 when their logs differ)."))
def spark_compaction(
    quick: Annotated[bool, typer.Option(help="4 partitions x 3 segments x 4000 records of 256 B.")] = False,
    partitions: Annotated[int, typer.Option(help="Compacted partitions.")] = 8,
    segments: Annotated[int, typer.Option(help="Sealed segments per partition.")] = 4,
    records: Annotated[int, typer.Option(help="Records per segment.")] = 20_000,
    record_bytes: Annotated[int, typer.Option(help="Logical bytes per record.")] = 512,
    keys: Annotated[int, typer.Option(help="Distinct keys per partition.")] = 50_000,
    master: Annotated[str, typer.Option(help="Spark master.")] = "local[2]",
    seed: Annotated[int, typer.Option(help="Seed of the keys and values.")] = 7,
    out_dir: OutDirOpt = RESULTS_DIR,
    work_dir: WorkDirOpt = None,
) -> None:
    from benchmarks import spark_compaction as bench

    cfg = bench.make_config(quick=quick, partitions=partitions, segments=segments, records=records,
                            record_bytes=record_bytes, keys=keys, master=master, seed=seed)
    raise typer.Exit(bench.run_standalone(cfg, out_dir, work_dir))


# ------------------------------------------------------------------------------------------ the suite


@app.command(rich_help_panel=_SUITE, help=(
    "The suite: raw limits, then each workload against one target, the naive baseline, reference "
    "lines and a cost model, in one result (JSON, markdown, PNG plots)."))
def suite(
    target: TargetOpt,
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
    option: StoreOpts = None,
    raw_seconds: Annotated[float | None, typer.Option(help="Seconds per raw-limit measurement (default 5; 1 with "
                                                           "--quick).")] = None,
    catchup_mib: Annotated[int | None, typer.Option(help="MiB written then read back by catchup.")] = None,
    compaction_mib: Annotated[int | None, typer.Option(help="MiB of keyed records compacted.")] = None,
    retention_segments: Annotated[int | None, typer.Option(help="Sealed segments the retention workload "
                                                                "builds.")] = None,
    recovery_entries: Annotated[int | None, typer.Option(help="Local WAL entries the recovery workload reopens "
                                                              "(default 20,000; 2,000 with --quick).")] = None,
    out_dir: Annotated[Path, typer.Option(help="Where {slug}.json, {slug}.md and {slug}/*.png go.")]
    = RESULTS_DIR / "suite",
    work_dir: WorkDirOpt = None,
    progress: Annotated[bool, typer.Option(help="Show the progress bar.")] = True,
) -> None:
    from benchmarks.suite.costmodel import parse_price
    from benchmarks.suite.registry import WorkloadUnavailable, parse_workloads
    from benchmarks.suite.runner import SuiteError, run_suite, suite_params

    start_benchmark_process()
    console = _console()
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


_SUITE_HELP = {
    "ingest": "Ingest: saturating producers with ack=wal, then ack=s3, then the naive baseline (throughput, "
              "latency, requests per GiB).",
    "e2e": "End to end: a rate-limited producer and tailing readers on another node and the same one; every "
           "record verified once.",
    "catchup": "Catch-up: a cold store reads back sealed data, against the raw ranged GET and the naive "
               "baseline.",
    "mixed": "Mixed: producers, tailing consumers, the cleaner and retention at once on a compact,delete topic.",
}


def _suite_workload_command(name: str) -> Callable[..., None]:
    """``suite --workloads NAME`` as a command of its own: the suite's options, bar ``--workloads``."""

    def command(**options: Any) -> None:
        suite(workloads=name, **options)

    signature = inspect.signature(suite, eval_str=True)
    command.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[p for p in signature.parameters.values() if p.name != "workloads"])
    command.__annotations__ = {k: v for k, v in suite.__annotations__.items() if k != "workloads"}
    command.__name__ = name
    return command


for _name in SUITE_COMMANDS:
    app.command(_name, rich_help_panel=_SUITE, help=f"{_SUITE_HELP[_name]} A suite run of this one workload, with "
                f"the raw limits (= suite --workloads {_name}).")(_suite_workload_command(_name))


# ------------------------------------------------------------------------------------------ result files

# benchmark -> (module, markdown renderer, re-judge function or None)
_RENDERERS: dict[str, tuple[str, str, str | None]] = {
    "engine": ("benchmarks.engine.figures", "render_markdown", "rejudge"),
    "suite": ("benchmarks.suite.report", "render_markdown", None),
    "compaction": ("benchmarks.compaction", "render_markdown", None),
    "retention": ("benchmarks.retention", "render_markdown", None),
    "recovery": ("benchmarks.recovery", "render_markdown", None),
    "spark-compaction": ("benchmarks.spark_compaction", "render_markdown", None),
}


@app.command(rich_help_panel=_FILES, help=(
    "Rewrite a result's markdown summary from its JSON (the engine's figures re-judged from its "
    "stored measurements too); exit 1 when an engine target is missed."))
def render(
    result: Annotated[Path, typer.Argument(help="A result JSON written by any workload.", exists=True,
                                           dir_okay=False)],
) -> None:
    import importlib

    from benchmarks.core.result import write_result

    doc = json.loads(result.read_text())
    benchmark = doc.get("benchmark")
    if benchmark not in _RENDERERS:
        raise typer.BadParameter(f"{result} is not a result document of a known workload ({benchmark!r})")
    module_name, markdown_fn, rejudge_fn = _RENDERERS[benchmark]
    module = importlib.import_module(module_name)
    console = _console()
    try:
        if rejudge_fn is not None:
            doc = getattr(module, rejudge_fn)(doc)
        markdown = getattr(module, markdown_fn)(doc)
    except KeyError as exc:
        console.print(f"[red]cannot render {result}:[/red] it has no {exc} (written before the result model?)")
        raise typer.Exit(2) from exc
    write_result(doc, result, markdown)
    if benchmark == "engine":
        from benchmarks.engine.figures import print_table

        print_table(console, doc)
    console.print(f"rewrote {result} and {result.with_suffix('.md')}")
    raise typer.Exit(0 if doc.get("passed", True) else 1)


@app.command(rich_help_panel=_FILES, help=(
    "Print the README's markdown table of suite results, generated from the result files."))
def summary(
    results: Annotated[list[Path], typer.Argument(help="Suite result JSON files (one table row each).",
                                                  exists=True, dir_okay=False)],
) -> None:
    from benchmarks.suite.summary import summary_table

    print(summary_table(results), end="")
