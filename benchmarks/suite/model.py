"""The shapes every suite workload shares: its parameters, its run context and its result.

A workload is a function ``run(ctx: SuiteContext) -> WorkloadResult`` registered in
:mod:`benchmarks.suite.registry`. It opens its own stores on ``ctx.target`` (a fresh root per store:
``ctx.target.store(name)``/``ctx.target.wal_dir(name)``), shows a progress bar through
``ctx.progress.phase(...)``, and returns figures (scalars), latency samples (for CDF plots), time
series (for throughput-over-time plots) and request counts (for requests/GiB and the cost model).
Workloads never write files: the runner does.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from benchmarks.progress import PhaseProgress
from benchmarks.targets import Target

__all__ = ["Series", "SuiteContext", "SuiteParams", "WorkloadResult", "downsample"]

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


@dataclass(frozen=True, slots=True)
class Series:
    """A time series: ``t_s`` seconds since the workload started, ``values`` in ``unit``."""

    name: str
    unit: str
    t_s: list[float]
    values: list[float]

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "unit": self.unit, "t_s": [round(t, 3) for t in self.t_s],
                "values": [round(v, 4) for v in self.values]}


@dataclass(slots=True)
class WorkloadResult:
    """What one workload measured.

    * ``figures``: named scalars (``"ack_wal_p99_ms": 12.3``); finite numbers only;
    * ``units``: the unit of each figure (``"ms"``, ``"MB/s"``, ``"records/s"``, ...);
    * ``latencies_ms``: named latency samples, for CDFs (downsampled to <= 5,000 points each);
    * ``series``: throughput or lag over time;
    * ``requests``: object-store requests by kind (``PUT``, ``GET``, ``HEAD``, ``LIST``, ``DELETE``)
      made by the s3stream code under test, and ``payload_bytes`` ingested by it (for requests/GiB
      and the cost model); empty when the workload does not ingest;
    * ``baseline``: the same figures for the naive baseline where the workload has one;
    * ``notes``: one-line facts a reader needs (what was run, verification outcome).
    """

    name: str
    figures: dict[str, float] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    latencies_ms: dict[str, list[float]] = field(default_factory=dict)
    series: list[Series] = field(default_factory=list)
    requests: dict[str, int] = field(default_factory=dict)
    payload_bytes: int = 0
    seconds: float = 0.0
    baseline: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def figure(self, name: str, value: float, unit: str) -> None:
        """Record one figure; a NaN or infinite value is a bug in the workload, so it raises."""
        if not math.isfinite(value):
            raise ValueError(f"{self.name}: figure {name} is not finite ({value})")
        self.figures[name] = float(value)
        self.units[name] = unit

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "figures": {k: round(v, 6) for k, v in self.figures.items()},
                "units": self.units,
                "latencies_ms": {k: [round(x, 4) for x in downsample(v)] for k, v in self.latencies_ms.items()},
                "series": [s.as_dict() for s in self.series], "requests": self.requests,
                "payload_bytes": self.payload_bytes, "seconds": round(self.seconds, 3),
                "baseline": {k: round(v, 6) for k, v in self.baseline.items()}, "notes": self.notes}


def downsample(samples: list[float], limit: int = 5000) -> list[float]:
    """Sorted samples thinned to ``limit`` evenly spaced ranks (keeps min and max) for CDF plots."""
    ordered = sorted(samples)
    if len(ordered) <= limit:
        return ordered
    step = (len(ordered) - 1) / (limit - 1)
    return [ordered[round(i * step)] for i in range(limit)]


@dataclass(slots=True)
class SuiteContext:
    """What a workload gets: the parameters, the open target, the progress display, the raw limits."""

    params: SuiteParams
    target: Target
    console: Console
    progress: PhaseProgress
    raw: dict[str, Any] = field(default_factory=dict)   # filled by the runner before workloads run
