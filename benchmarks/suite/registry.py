"""Workload name -> the function that runs it, imported only when a run asks for it.

Lazy imports keep ``python -m benchmarks suite --workloads ingest`` from importing (and failing on) the
other workloads' modules, and turn a missing or broken module into one clear error before anything runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable

from benchmarks.core.result import WorkloadResult
from benchmarks.suite.context import ALL_WORKLOADS, SuiteContext

__all__ = ["WORKLOADS", "WorkloadFn", "WorkloadUnavailable", "load_workload", "load_workloads", "parse_workloads"]

WorkloadFn = Callable[[SuiteContext], WorkloadResult]

# name -> (module, function); the order of ALL_WORKLOADS is the order of a full run.
WORKLOADS: dict[str, tuple[str, str]] = {
    "ingest": ("benchmarks.ingest", "run_ingest"),
    "e2e": ("benchmarks.e2e", "run_e2e"),
    "catchup": ("benchmarks.catchup", "run_catchup"),
    "compaction": ("benchmarks.compaction", "run_compaction"),
    "retention": ("benchmarks.retention", "run_retention"),
    "mixed": ("benchmarks.mixed", "run_mixed"),
    "recovery": ("benchmarks.recovery", "run_recovery"),
}
assert tuple(WORKLOADS) == ALL_WORKLOADS


class WorkloadUnavailable(RuntimeError):
    """A workload name is unknown, or its module cannot be imported or lacks its function."""


def parse_workloads(spec: str | Iterable[str]) -> tuple[str, ...]:
    """``"ingest,e2e"`` (or a list) -> names in run order, duplicates dropped; ``all`` means every one."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    names = [s.strip() for s in items if s.strip()]
    if not names or names == ["all"]:
        return ALL_WORKLOADS
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise WorkloadUnavailable(f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(ALL_WORKLOADS)}")
    return tuple(n for n in ALL_WORKLOADS if n in names)


def load_workload(name: str) -> WorkloadFn:
    """The run function of workload ``name``."""
    if name not in WORKLOADS:
        raise WorkloadUnavailable(f"unknown workload {name!r}; known: {', '.join(ALL_WORKLOADS)}")
    module_name, attr = WORKLOADS[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise WorkloadUnavailable(f"workload {name!r}: cannot import {module_name} "
                                  f"({type(exc).__name__}: {exc})") from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise WorkloadUnavailable(f"workload {name!r}: {module_name} has no function {attr}()")
    run: WorkloadFn = fn
    return run


def load_workloads(names: Iterable[str]) -> dict[str, WorkloadFn]:
    """Every named workload's function, in the given order (fails on the first unavailable one)."""
    return {name: load_workload(name) for name in names}
