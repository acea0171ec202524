"""One suite run: open the target, measure the raw limits, run each workload, write JSON + markdown + PNGs.

Order: resolve every requested workload first (a missing module fails before anything is measured),
open the target in a fresh scratch directory, raw limits, then the workloads in :data:`ALL_WORKLOADS`
order, each with its own progress phases under one run-wide bar and its console table as it finishes.
Nothing is caught silently: a workload that raises stops the run with :class:`WorkloadFailed` naming
it, and a figure that is not a finite number is :class:`SuiteError`. Output, all named by ``{slug}``
(the target slug, plus ``-quick`` for quick runs): ``{out_dir}/{slug}.json`` (everything),
``{out_dir}/{slug}.md`` (the summary) and ``{out_dir}/{slug}/*.png``.

Invariant: whatever happens, the target is closed (servers stopped, objects deleted) and the scratch
directory removed before the exception propagates.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console

from benchmarks.core.measure import machine_info
from benchmarks.core.progress import PhaseProgress
from benchmarks.core.rawlimits import RAW_PHASES, RAW_UNITS, measure_raw_limits
from benchmarks.core.result import Run, WorkloadResult, write_result
from benchmarks.core.targets import open_target, target_slug
from benchmarks.suite.context import ALL_WORKLOADS, QUICK, SuiteContext, SuiteParams
from benchmarks.suite.costmodel import price_table, suite_costs
from benchmarks.suite.plots import PlotsUnavailable, write_plots
from benchmarks.suite.references import references
from benchmarks.suite.registry import WorkloadFn, load_workloads
from benchmarks.suite.report import compute_ratios, print_summary, print_workload, render_markdown

__all__ = ["SuiteError", "WorkloadFailed", "run_suite", "suite_params", "suite_slug", "validate_result"]

# Progress phases each workload is expected to show (the run-wide bar is corrected as each finishes).
_PHASE_GUESS = {"ingest": 3, "e2e": 1, "catchup": 4, "compaction": 4, "retention": 3, "mixed": 1, "recovery": 3}

_NOTES = (
    "MB = 10^6 bytes of record payload (keys + values); MiB/GiB = 2^20/2^30 bytes. Latencies in ms.",
    "Ratios: a figure over what frames it (a raw limit of this run, the naive baseline, a reference line); "
    "each says whether higher or lower is better.",
    "Published reference lines were measured on AWS S3 in their own setting; on a local or modelled target "
    "they are context, not targets.",
)


class SuiteError(RuntimeError):
    """The run could not complete, or produced an invalid result."""


class WorkloadFailed(SuiteError):
    """A workload raised; the run stops there."""


def suite_params(target: str, *, quick: bool = False, **overrides: Any) -> SuiteParams:
    """Full-run defaults, or :data:`QUICK` ones; ``overrides`` that are not None win."""
    values = {**(QUICK if quick else {}), **{k: v for k, v in overrides.items() if v is not None}}
    return SuiteParams(target=target, quick=quick, **values)


def suite_slug(params: SuiteParams) -> str:
    """The name of a run's output files: the target slug, then the workloads run unless it ran all of them
    (a partial run never overwrites a full run's files), then ``-quick`` for quick runs."""
    partial = "" if set(params.workloads) == set(ALL_WORKLOADS) else "-" + "-".join(params.workloads)
    return target_slug(params.target) + partial + ("-quick" if params.quick else "")


class _SuiteProgress(PhaseProgress):
    """The shared progress display, titled for the suite, whose run-wide total can be corrected."""

    def __init__(self, console: Console, *, phases: int, enabled: bool) -> None:
        super().__init__(console, phases=phases, enabled=enabled)
        self._progress.update(self._overall, description="benchmark suite")

    def completed_phases(self) -> int:
        return int(next(t.completed for t in self._progress.tasks if t.id == self._overall))

    def set_total(self, phases: int) -> None:
        self._progress.update(self._overall, total=phases)


def _check_finite(where: str, values: Mapping[str, Any]) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise SuiteError(f"{where}: {name} is not a finite number ({value!r})")


def validate_result(result: Mapping[str, Any]) -> None:
    """Every figure, baseline figure, latency sample, raw limit, ratio and cost is a finite number."""
    _check_finite("raw limits", {k: v for k, v in result["raw_limits"].items() if k != "details"})
    for name, w in result["workloads"].items():
        _check_finite(f"workload {name}", w["figures"])
        _check_finite(f"workload {name} baseline", w["baseline"])
        for series, samples in w["latencies_ms"].items():
            bad = next((x for x in samples if not math.isfinite(x)), None)
            if bad is not None:
                raise SuiteError(f"workload {name}: latency sample of {series} is not finite ({bad!r})")
    for ratio in result["ratios"]:
        _check_finite(f"ratio {ratio['key']}", {"ratio": ratio["ratio"]})
    for sc in result["costs"].get("scenarios", []):
        for side in ("s3stream", "naive"):
            if side in sc:
                _check_finite(f"cost {sc['name']} {side}", sc[side])


def _run_workload(name: str, fn: WorkloadFn, ctx: SuiteContext) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        result = fn(ctx)
    except Exception as exc:
        raise WorkloadFailed(f"workload {name!r} failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(result, WorkloadResult):
        raise WorkloadFailed(f"workload {name!r} returned {type(result).__name__}, not a WorkloadResult")
    if result.seconds <= 0:
        result.seconds = time.perf_counter() - t0
    out = result.as_dict()
    out["name"] = name
    _check_finite(f"workload {name}", out["figures"])
    _check_finite(f"workload {name} baseline", out["baseline"])
    return out


def run_suite(params: SuiteParams, console: Console | None = None, *,
              workloads: Mapping[str, WorkloadFn] | None = None) -> dict[str, Any]:
    """Run the suite and write its files; returns the result dict (the JSON's content).

    ``workloads`` replaces the registry (tests); by default ``params.workloads`` are loaded from it.

    Raises:
        WorkloadUnavailable: a requested workload's module is missing (before anything runs).
        WorkloadFailed: a workload raised.
        SuiteError: a figure is not finite.
    """
    console = console or Console()
    fns = dict(workloads) if workloads is not None else load_workloads(params.workloads)
    price_table(params.prices)  # a bad --price fails before the run, not after it
    run = Run.start("suite")
    if params.work_dir is not None:
        params.work_dir.mkdir(parents=True, exist_ok=True)
    work_dir = Path(tempfile.mkdtemp(prefix="s3stream-suite-", dir=params.work_dir))
    done: dict[str, dict[str, Any]] = {}
    guess = sum(_PHASE_GUESS.get(n, 2) for n in fns)
    progress = _SuiteProgress(console, phases=2 + RAW_PHASES + guess, enabled=params.progress)
    try:
        with progress, contextlib.ExitStack() as stack:
            with progress.phase(f"open target {params.target}"):
                target = stack.enter_context(open_target(params.target, work_dir, seed=params.seed))
            machine = machine_info(str(work_dir))
            target_info = {"spec": params.target, "slug": target.slug, **target.description}
            raw = measure_raw_limits(target, params.raw_seconds, progress)
            _check_finite("raw limits", {k: v for k, v in raw.items() if k != "details"})
            refs = [r.as_dict() for r in references(params, raw)]
            ctx = SuiteContext(params=params, target=target, console=console, progress=progress, raw=raw)
            for name, fn in fns.items():
                done[name] = _run_workload(name, fn, ctx)
                left = sum(_PHASE_GUESS.get(n, 2) for n in fns if n not in done)
                progress.set_total(progress.completed_phases() + left + 1)
                print_workload(console, name, done[name], compute_ratios(raw, {name: done[name]}, refs))
            with progress.phase("close target"):
                stack.close()
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)

    ratios = compute_ratios(raw, done, refs)
    body = {"raw_limits": raw, "raw_units": RAW_UNITS, "workloads": done, "ratios": [r.as_dict() for r in ratios],
            "references": refs,
            "costs": suite_costs(done, prices=params.prices, flush_bytes=params.flush_bytes,
                                 flush_interval_ms=params.flush_interval_ms),
            "images": {}}
    result = run.document(slug=suite_slug(params), target=target_info, machine=machine,
                          parameters=params.as_dict(), body=body, notes=_NOTES)
    validate_result(result)
    return _write(result, params, console)


def _write(result: dict[str, Any], params: SuiteParams, console: Console) -> dict[str, Any]:
    slug = result["slug"]
    image_dir = params.out_dir / slug
    if image_dir.is_dir():
        for stale in image_dir.glob("*.png"):
            stale.unlink()
    try:
        result["images"] = write_plots(result, image_dir, slug)
    except PlotsUnavailable as exc:
        result["notes"].append(f"plots skipped: {exc}")
        console.print(f"[yellow]plots skipped:[/yellow] {exc}")
    path = write_result(result, params.out_dir / f"{slug}.json", render_markdown(result))
    print_summary(console, result)
    console.print(f"results: {path}, {path.with_suffix('.md')} and {image_dir}/")
    return result
