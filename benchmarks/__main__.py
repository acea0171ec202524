"""The benchmark command line: ``python -m benchmarks engine --target ... --duration 60 --out ...``.

Exit status: 0 when every figure meets its target, 1 when some figure misses it (the result files are
written either way), 2 for a usage error or a run that could not complete.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from benchmarks.params import MiB, make_params
from benchmarks.report import print_table
from benchmarks.targets import target_slug
from s3stream.errors import S3StreamError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="s3stream benchmarks: figures measured against raw limits of the same run.")


@app.callback()
def main() -> None:
    """s3stream benchmarks (see benchmarks/README.md)."""


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


if __name__ == "__main__":
    app(prog_name="python -m benchmarks")
