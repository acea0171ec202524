"""What every suite workload gets: the run's parameters and its context (the result shape is
:class:`benchmarks.core.result.WorkloadResult`).

A workload is a function ``run(ctx: SuiteContext) -> WorkloadResult`` registered in
:mod:`benchmarks.suite.registry`. It opens its own stores on ``ctx.target`` (a fresh root per store:
``ctx.target.store(name)``/``ctx.target.wal_dir(name)``), shows a progress bar through
``ctx.progress.phase(...)``, and returns figures (scalars), latency samples (for CDF plots), time
series (for throughput-over-time plots) and request counts (for requests/GiB and the cost model).
Workloads never write files: the runner does.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from benchmarks.core.progress import PhaseProgress
from benchmarks.core.targets import Target

__all__ = ["ALL_WORKLOADS", "QUICK", "SuiteContext", "SuiteParams"]

MiB = 1 << 20

# Workload names in the order a full run executes them.
ALL_WORKLOADS = ("ingest", "e2e", "catchup", "compaction", "retention", "mixed", "recovery")


@dataclass(frozen=True, slots=True, kw_only=True)
class SuiteParams:
    """The knobs of one suite run (every one lands in the result JSON). Sizes in bytes, times in s."""

    target: str
    workloads: tuple[str, ...] = ALL_WORKLOADS
    duration_s: float = 60.0            # per timed workload (ingest runs it once per ack mode)
    record_bytes: int = 1024
    partitions: int = 8
    producers: int = 4
    batch_records: int = 100
    flush_bytes: int = 8 * MiB
    flush_interval_ms: int = 250
    segment_bytes: int = 64 * MiB
    consumers: int = 2                   # tailing readers of e2e and mixed
    rate_mb_per_s: float | None = None   # offered load of e2e/mixed (None: a workload default)
    catchup_bytes: int = 256 * MiB       # cold data written, sealed, then read back
    compaction_bytes: int = 256 * MiB
    compaction_keys: int = 100_000
    retention_segments: int = 2_000
    retention_partitions: int = 20
    recovery_entries: int = 20_000       # local WAL entries (single-record appends) before the reopen
    recovery_partitions: int = 4
    raw_seconds: float = 5.0
    seed: int = 0
    quick: bool = False
    progress: bool = True
    work_dir: Path | None = None
    out_dir: Path = Path("benchmarks/results/suite")
    store_options: dict[str, str] = field(default_factory=dict)
    prices: dict[str, float] = field(default_factory=dict)   # overrides of costmodel.S3_STANDARD

    def open_options(self, **extra: Any) -> dict[str, Any]:
        """``open_store`` keyword options for a store of this run (flush settings applied)."""
        return {"flush_bytes": self.flush_bytes, "flush_interval_ms": self.flush_interval_ms,
                **self.store_options, **extra}

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["workloads"] = list(self.workloads)
        out["work_dir"] = None if self.work_dir is None else str(self.work_dir)
        out["out_dir"] = str(self.out_dir)
        return out


QUICK: dict[str, Any] = {
    "duration_s": 3.0, "catchup_bytes": 16 * MiB, "compaction_bytes": 16 * MiB, "compaction_keys": 5_000,
    "retention_segments": 200, "retention_partitions": 4, "raw_seconds": 1.0, "segment_bytes": 8 * MiB,
    "recovery_entries": 2_000,
}


@dataclass(slots=True)
class SuiteContext:
    """What a workload gets: the parameters, the open target, the progress display, the raw limits."""

    params: SuiteParams
    target: Target
    console: Console
    progress: PhaseProgress
    raw: dict[str, Any] = field(default_factory=dict)   # filled by the runner before workloads run
