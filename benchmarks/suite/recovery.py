"""The recovery workload: what reopening a store costs after a clean close and after a crash.

It is :mod:`benchmarks.recovery` on the suite's target with the suite's sizes (``recovery_entries``
single-record appends over ``recovery_partitions`` partitions; the suite's flush settings and store options):
a clean close, a crash (the writer process killed with entries both published and only local), and the crash
again without the WAL's trim point. Each reopen is timed and its requests counted; every acknowledged record
is checked, and a wrong result raises.

The baseline is the replay before issue 24 (item 2) as a model, not a run: it read every entry of the local
WAL (no trim point, the active file is never deleted) and made one GET per entry.
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks.recovery import LABELS, RecoveryConfig, measure
from benchmarks.suite.model import SuiteContext, WorkloadResult

__all__ = ["run_recovery"]

NAME = "recovery"
RECORD_BYTES = 100  # small appends: the entries, not the bytes, are what the old replay paid for


def run_recovery(ctx: SuiteContext) -> WorkloadResult:
    """Measure every scenario; raise if an acknowledged record was lost, duplicated or moved."""
    started = time.perf_counter()
    p = ctx.params
    cfg = RecoveryConfig(entries=p.recovery_entries, partitions=p.recovery_partitions, record_bytes=RECORD_BYTES,
                         quick=p.quick, options=p.open_options())
    scenarios = measure(ctx.target, cfg, ctx.progress.phase)
    problems = [f"{LABELS[name]}: {problem}" for name, s in scenarios.items() for problem in s["problems"]]
    if problems:
        raise RuntimeError("recovery: wrong result: " + "; ".join(problems[:10]))
    result = _result(cfg, scenarios)
    result.seconds = time.perf_counter() - started
    return result


def _result(cfg: RecoveryConfig, scenarios: dict[str, Any]) -> WorkloadResult:
    result = WorkloadResult(NAME)
    for name, s in scenarios.items():
        opened = s["open"]
        result.figure(f"{name}_open_s", opened["open_s"], "s")
        result.figure(f"{name}_open_requests", opened["requests"]["total"], "requests")
        result.figure(f"{name}_requests_per_partition", opened["requests_per_partition"], "requests")
        result.figure(f"{name}_entries_read", s["local_wal"]["to_read"], "entries")
        result.figure(f"{name}_second_open_requests", s["reopen"]["requests"]["total"], "requests")
        result.baseline[f"{name}_open_requests"] = float(s["local_wal"]["entries"])  # it read every entry
    crash = scenarios["crash"]["open"]["requests"]["by_kind"]
    result.notes += [
        f"{cfg.entries:,} single-record appends ({cfg.record_bytes}-byte values, ack=wal) over {cfg.partitions} "
        f"partitions by a child process; a crashing writer flushes, appends {cfg.unpublished:,} more and is killed "
        "(SIGKILL); crash_no_trim_point also removes the WAL's trim point record before the reopen",
        "requests: the open's, counted by a recording wrapper; crash open by kind: "
        + ", ".join(f"{kind} {n}" for kind, n in crash.items()),
        "baseline (a model): the replay before issue 24 item 2, one GET per local WAL entry, all of which it read "
        "(even after a clean close)",
        "verified: every acknowledged record exactly once at its offset, after the reopen and after a second one",
    ]
    return result
