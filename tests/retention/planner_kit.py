"""Builders for pure planner tests: contiguous segment snapshots and a ``plan`` shorthand.

A log is described oldest first as ``(record_count, size_bytes, largest_timestamp)`` triples; the
last one is the active segment (``key=None``) unless ``sealed_all`` is set. Offsets are dense, so
segment ``i`` covers ``[base_i, base_i + record_count_i)``.
"""

from __future__ import annotations

from collections.abc import Sequence

from s3stream.policy.retention import RetentionPlan, SegmentSnapshot, plan_retention

NOW = 1_700_000_000_000
DELETE = frozenset({"delete"})
COMPACT = frozenset({"compact"})
BOTH = frozenset({"compact", "delete"})


def build(specs: Sequence[tuple[int, int, int]], *, active: bool = True) -> list[SegmentSnapshot]:
    """Contiguous snapshots from ``(record_count, size_bytes, largest_timestamp)``; the last is active."""
    out: list[SegmentSnapshot] = []
    base = 0
    for i, (count, size, ts) in enumerate(specs):
        is_active = active and i == len(specs) - 1
        key = None if is_active else f"seg-{base:05d}"
        out.append(SegmentSnapshot(base, base + count, size, ts, count, key))
        base += count
    return out


def uniform(n: int, *, records: int = 5, size: int = 50, ts: int = NOW - 10_000,
            active: bool = True) -> list[SegmentSnapshot]:
    """``n`` equal segments of ``records`` records and ``size`` bytes each, all at timestamp ``ts``."""
    return build([(records, size, ts)] * n, active=active)


def leo(segs: Sequence[SegmentSnapshot]) -> int:
    return segs[-1].end_offset if segs else 0


def plan(segs: Sequence[SegmentSnapshot], *, lso: int = 0, end: int | None = None,
         policy: frozenset[str] = DELETE, ms: int = -1, nbytes: int = -1, now: int = NOW) -> RetentionPlan:
    """``plan_retention`` with every limit disabled unless given."""
    return plan_retention(segs, log_start_offset=lso, log_end_offset=leo(segs) if end is None else end,
                          policy=policy, retention_ms=ms, retention_bytes=nbytes, now_ms=now)


def deleted_bases(p: RetentionPlan) -> list[int]:
    return [d.segment.base_offset for d in p.deletions]


def reasons(p: RetentionPlan) -> list[str]:
    return [d.reason for d in p.deletions]
