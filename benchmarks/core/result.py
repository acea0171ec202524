"""The result model every workload uses, and the one way result files are written.

A run of any workload (``python -m benchmarks <workload>``) writes one **result document**: a JSON file that
holds everything measured, and a markdown summary beside it (same name, ``.md``) rendered from the document
alone by :mod:`benchmarks.core.markdown`, so ``python -m benchmarks render`` can redo it. Every document
has the same envelope (:meth:`Run.document`), in this order:

* ``schema`` (``s3stream-benchmark-<workload>/1``), ``benchmark`` (the workload), ``slug`` (what the file is
  named by: target, size, ``-quick``), ``started_at``, ``finished_at``, ``wall_seconds``;
* ``target`` (``spec`` and what it resolved to), ``machine``, ``versions`` (with the git commit), and the
  run's ``parameters``, every one of them;
* the workload's own measurements, under top-level keys of its choosing (``raw_limits``, ``measurements``,
  ``workloads``, ``deleting_pass``, ``scenarios``, ...);
* ``figures``: the judged :class:`Figure` s (none for workloads that only count), ``problems`` (wrong results
  the workload's own checks found), ``passed`` (no problem, every figure within its target) and ``notes``.

The method behind every judged figure: **a ratio to a raw limit measured in the same run**, on the same
machine and target (fsync'd disk bandwidth, concurrent PUT or ranged GET bandwidth, fsync latency, the raw
rewrite of the same segments), or to a bound computed from the run's own settings. Absolute numbers from a
shared machine say little; the ratio says how much of what the hardware and the object store can do
s3stream gets.

:class:`WorkloadResult` is what one suite workload measured (named figures with units, latency samples, time
series, request counts, the naive baseline, notes); the suite's document holds one per workload.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.core.measure import versions
from s3stream.base.clock import SystemClock

__all__ = [
    "RESULTS_DIR",
    "Figure",
    "Run",
    "Series",
    "WorkloadResult",
    "downsample",
    "iso",
    "schema",
    "verdict",
    "write_result",
]

#: Where result files go by default (``benchmarks/results``).
RESULTS_DIR = Path(__file__).resolve().parents[1] / "results"


def schema(benchmark: str) -> str:
    """The ``schema`` of a workload's result document."""
    return f"s3stream-benchmark-{benchmark}/1"


def iso(ms: int) -> str:
    """Epoch milliseconds as an ISO 8601 UTC timestamp (seconds)."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds")


@dataclass(frozen=True, slots=True)
class Figure:
    """One s3stream number judged against the raw limit (or bound) of the same run: ``ratio = value /
    reference``, and the verdict compares the ratio with the target (``>= 0.5`` for throughputs, ``<= 2``
    for latencies, ``<= 1`` for bounds)."""

    name: str
    title: str
    value: float
    unit: str
    reference: float
    reference_label: str
    ratio: float
    target: str
    passed: bool
    details: dict[str, Any]

    @classmethod
    def judge(cls, name: str, title: str, value: float, unit: str, reference: float, reference_label: str, *,
              at_least: float | None = None, at_most: float | None = None,
              details: dict[str, Any] | None = None) -> Figure:
        """Build a figure whose ratio must be ``>= at_least`` or ``<= at_most``."""
        ratio = value / reference if reference > 0 else float("inf")
        if at_least is not None:
            passed, target = ratio >= at_least, f"ratio >= {at_least:g}"
        elif at_most is not None:
            passed, target = ratio <= at_most, f"ratio <= {at_most:g}"
        else:
            raise ValueError("a figure needs at_least or at_most")
        return cls(name, title, round(value, 3), unit, round(reference, 3), reference_label, round(ratio, 3),
                   target, passed, details or {})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Figure:
        """A figure read back from a result document (engine files before the result model said ``key``)."""
        values = dict(data)
        if "key" in values:
            values["name"] = values.pop("key")
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


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
    """What one suite workload measured.

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


@dataclass(frozen=True, slots=True)
class Run:
    """The envelope of one result document: started with the workload, filled in when it is done."""

    benchmark: str
    started_ms: int
    t0: float

    @classmethod
    def start(cls, benchmark: str) -> Run:
        return cls(benchmark, SystemClock().now_ms(), time.perf_counter())

    def document(self, *, slug: str, target: Mapping[str, Any], machine: Mapping[str, Any],
                 parameters: Mapping[str, Any], body: Mapping[str, Any], figures: Sequence[Figure] = (),
                 problems: Sequence[str] = (), notes: Sequence[str] = ()) -> dict[str, Any]:
        """The result document: the envelope, the workload's ``body``, then its verdict."""
        return {
            "schema": schema(self.benchmark),
            "benchmark": self.benchmark,
            "slug": slug,
            "started_at": iso(self.started_ms),
            "finished_at": iso(SystemClock().now_ms()),
            "wall_seconds": round(time.perf_counter() - self.t0, 1),
            "target": dict(target),
            "machine": dict(machine),
            "versions": versions(),
            "parameters": dict(parameters),
            **body,
            **verdict(figures, problems),
            "notes": list(notes),
        }


def verdict(figures: Sequence[Figure], problems: Sequence[str]) -> dict[str, Any]:
    """``figures``, ``problems`` and ``passed`` of a document (re-judged documents replace these)."""
    return {"figures": [f.as_dict() for f in figures], "problems": list(problems),
            "passed": not problems and all(f.passed for f in figures)}


def write_result(doc: Mapping[str, Any], path: Path, markdown: str) -> Path:
    """Write ``path`` (the JSON document) and the markdown summary beside it (same name, ``.md``); the JSON
    path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    path.with_suffix(".md").write_text(markdown)
    return path
