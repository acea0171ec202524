"""The delete policy as a pure planner: rules RET-1..9 of docs/design/kafka-rules.md over a snapshot and ``now``.

Input: the partition's segments oldest first — sealed ones (with object keys) followed by the
unsealed active segment (``key=None``) — the log start offset, the log end offset (= high watermark:
a record is committed once acknowledged), the policy and limits, and ``now``.

Output: a :class:`RetentionPlan`: which whole segments to delete (always a prefix: RET-3, RET-9), why, the
new log start offset (RET-4), and whether the active segment must be rolled first (RET-4: when every segment
is deletable, the log keeps a new empty active segment).

Order (RET-1): log-start-offset breach (RET-5), then size (RET-6), then time (RET-7), each recomputed on what the
previous step left. ``compact`` alone runs only RET-5. Nothing here reads a clock or does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["Deletion", "RetentionPlan", "SegmentSnapshot", "plan_retention"]

Reason = Literal["log_start_offset", "retention_bytes", "retention_ms"]


@dataclass(frozen=True, slots=True)
class SegmentSnapshot:
    """What retention needs to know of a segment; ``key`` is None for the unsealed active segment."""

    base_offset: int
    end_offset: int            # exclusive
    size_bytes: int
    largest_timestamp: int     # max record timestamp, or the segment's mtime when it has none (ROLL-5)
    record_count: int
    key: str | None = None


@dataclass(frozen=True, slots=True)
class Deletion:
    segment: SegmentSnapshot
    reason: Reason


@dataclass(frozen=True, slots=True)
class RetentionPlan:
    deletions: tuple[Deletion, ...]
    new_log_start_offset: int
    roll_first: bool

    @property
    def keys(self) -> tuple[str, ...]:
        """Object keys of the sealed segments to drop."""
        return tuple(d.segment.key for d in self.deletions if d.segment.key is not None)

    @property
    def bytes_deleted(self) -> int:
        return sum(d.segment.size_bytes for d in self.deletions)

    def by_reason(self) -> dict[str, tuple[int, int]]:
        """reason -> (segments, bytes)."""
        out: dict[str, tuple[int, int]] = {}
        for d in self.deletions:
            n, b = out.get(d.reason, (0, 0))
            out[d.reason] = (n + 1, b + d.segment.size_bytes)
        return out


def plan_retention(segments: Sequence[SegmentSnapshot], *, log_start_offset: int, log_end_offset: int,
                   policy: frozenset[str], retention_ms: int, retention_bytes: int, now_ms: int) -> RetentionPlan:
    """Plan one retention pass (rules RET-1..9). ``segments`` must be contiguous, oldest first."""
    remaining = list(segments)
    deletions: list[Deletion] = []
    steps: list[tuple[Reason, Callable[[list[SegmentSnapshot]], int]]] = [
        ("log_start_offset", lambda segs: _walk(segs, log_end_offset, lambda s, nxt: (
            nxt is not None and nxt.base_offset <= log_start_offset)))]
    if "delete" in policy:
        steps.append(("retention_bytes", lambda segs: _size_breach(segs, log_end_offset, retention_bytes)))
        steps.append(("retention_ms", lambda segs: _time_breach(segs, log_end_offset, retention_ms, now_ms)))
    for reason, step in steps:
        n = step(remaining)
        deletions.extend(Deletion(s, reason) for s in remaining[:n])
        remaining = remaining[n:]
    if not deletions:
        return RetentionPlan((), log_start_offset, False)
    roll_first = any(d.segment.key is None for d in deletions)
    new_start = max(log_start_offset, remaining[0].base_offset if remaining else log_end_offset)
    return RetentionPlan(tuple(deletions), min(new_start, log_end_offset), roll_first)


def _walk(segs: Sequence[SegmentSnapshot], high_watermark: int,
          predicate: Callable[[SegmentSnapshot, SegmentSnapshot | None], bool]) -> int:
    """RET-3: how many segments from the oldest are deletable (a prefix; stop at the first that is not)."""
    n = 0
    for i, seg in enumerate(segs):
        nxt = segs[i + 1] if i + 1 < len(segs) else None
        upper_bound = nxt.base_offset if nxt is not None else high_watermark
        is_last_and_empty = nxt is None and seg.record_count == 0 and seg.size_bytes == 0
        if high_watermark < upper_bound or is_last_and_empty or not predicate(seg, nxt):
            break
        n += 1
    return n


def _size_breach(segs: Sequence[SegmentSnapshot], high_watermark: int, retention_bytes: int) -> int:
    """RET-6: delete oldest segments while what stays is still >= retention.bytes (a lower bound)."""
    total = sum(s.size_bytes for s in segs)
    if retention_bytes < 0 or total < retention_bytes:
        return 0
    diff = total - retention_bytes

    def predicate(seg: SegmentSnapshot, _nxt: SegmentSnapshot | None) -> bool:
        nonlocal diff
        if diff - seg.size_bytes >= 0:
            diff -= seg.size_bytes
            return True
        return False

    return _walk(segs, high_watermark, predicate)


def _time_breach(segs: Sequence[SegmentSnapshot], high_watermark: int, retention_ms: int, now_ms: int) -> int:
    """RET-7: delete while ``now - largest_timestamp > retention.ms``; a future timestamp blocks the rest."""
    if retention_ms < 0:
        return 0
    return _walk(segs, high_watermark, lambda s, _n: now_ms - s.largest_timestamp > retention_ms)
