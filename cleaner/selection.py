"""Which partition to clean, and which offsets: rules CLEAN-SEL-1..5 and CLEAN-RANGE-1..2, as pure functions.

Input per partition is a :class:`LogSnapshot` built from its manifest: the sealed segments (the only
ones that can ever be cleaned; the active segment and rolled-but-unsealed ones never are), the log
start offset, the log end offset (= high watermark = last stable offset: this store has no
transactions), the cleaner checkpoint, the topic config and ``now``.

Vocabulary (docs/design/kafka-rules.md): ``first_dirty`` is where this round's offset map starts;
``first_uncleanable`` (U) is the segment-aligned upper bound of the round; the ratio is
``cleanable_bytes / (clean_bytes + cleanable_bytes)`` compared with a strict ``>``.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["LogSnapshot", "LogToClean", "SegmentFacts", "choose_filthiest", "plan_log"]


@dataclass(frozen=True, slots=True)
class SegmentFacts:
    """What selection needs of a sealed segment."""

    base_offset: int
    end_offset: int
    size_bytes: int
    largest_timestamp: int
    first_batch_max_timestamp: int


@dataclass(frozen=True, slots=True)
class LogSnapshot:
    """One compacted partition at one instant (``active_base`` = first offset not in a sealed segment)."""

    log_id: str
    segments: tuple[SegmentFacts, ...]
    active_base: int
    log_start_offset: int
    log_end_offset: int
    checkpoint: int | None
    min_cleanable_dirty_ratio: float
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    tombstone_horizon_ms: int | None = None   # earliest tombstone horizon in cleaned data (opt-in idle rule)
    tombstone_cleanup_on_idle: bool = False


@dataclass(frozen=True, slots=True)
class LogToClean:
    """The plan for one partition (CLEAN-SEL-5 quantities and the round's range)."""

    log_id: str
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    cleanable_bytes: int
    max_compaction_delay_ms: int
    checkpoint_reset: bool          # CLEAN-SEL-2(b): the stored checkpoint was invalid; rewrite it now
    tombstones_due: bool = False    # opt-in: only expired tombstone horizons make it eligible

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes > 0 else 0.0

    @property
    def need_compaction_now(self) -> bool:
        return self.max_compaction_delay_ms > 0


def _first_dirty(s: LogSnapshot) -> tuple[int, bool]:
    """CLEAN-RANGE-1: the checkpoint, or the log start when it is missing or out of range (then reset it)."""
    if s.checkpoint is None:
        return s.log_start_offset, False
    if s.checkpoint < s.log_start_offset or s.checkpoint > s.log_end_offset:
        return s.log_start_offset, True
    return s.checkpoint, False


def _containing(segments: Sequence[SegmentFacts], offset: int) -> int:
    """Index of the segment whose range contains ``offset`` (or the first one after it)."""
    ends = [seg.end_offset for seg in segments]
    return bisect.bisect_right(ends, offset)


def _overlapping(segments: Sequence[SegmentFacts], start: int, end: int) -> Iterable[SegmentFacts]:
    """Segments overlapping ``[start, end)`` (Kafka's ``logSegments(from, to)``); none when start >= end."""
    if start >= end:
        return ()
    return (seg for seg in segments if seg.base_offset < end and seg.end_offset > start)


def _uncleanable_offset(s: LogSnapshot, first_dirty: int, now_ms: int) -> int:
    """CLEAN-RANGE-2: never the active segment, never past the high watermark, never within min lag."""
    bound = min(s.log_end_offset, s.active_base)
    if s.min_compaction_lag_ms > 0:
        cutoff = now_ms - s.min_compaction_lag_ms
        for seg in s.segments[_containing(s.segments, first_dirty):]:
            if seg.largest_timestamp > cutoff:
                bound = min(bound, seg.base_offset)
                break
    return max(first_dirty, bound)


def _segment_aligned(s: LogSnapshot, uncleanable: int) -> int:
    """CLEAN-SEL-5: the base of the sealed segment containing ``uncleanable``, else the active base."""
    i = _containing(s.segments, uncleanable)
    if i < len(s.segments) and s.segments[i].base_offset <= uncleanable:
        return s.segments[i].base_offset
    if i < len(s.segments):
        return s.segments[i].base_offset
    return s.active_base


def _max_compaction_delay(s: LogSnapshot, first_dirty: int, now_ms: int) -> int:
    """CLEAN-SEL-4: how far past max.compaction.lag.ms the earliest dirty sealed segment is (0 if not)."""
    stamps = [seg.first_batch_max_timestamp for seg in s.segments[_containing(s.segments, first_dirty):]
              if seg.first_batch_max_timestamp > 0]
    if not stamps:
        return 0
    earliest = min(stamps)
    clean_until = now_ms - max(s.max_compaction_lag_ms, 0)
    return clean_until - earliest if earliest < clean_until else 0


def plan_log(s: LogSnapshot, now_ms: int) -> LogToClean:
    """The cleaning plan of one partition: range, byte counts, max-lag delay (CLEAN-SEL-2(a)..(d), CLEAN-SEL-5)."""
    first_dirty, reset = _first_dirty(s)
    first_uncleanable = _segment_aligned(s, _uncleanable_offset(s, first_dirty, now_ms))
    clean = sum(seg.size_bytes for seg in s.segments if seg.base_offset < first_dirty)
    cleanable = sum(seg.size_bytes for seg in _overlapping(
        s.segments, min(first_dirty, first_uncleanable), first_uncleanable))
    due = (s.tombstone_cleanup_on_idle and s.tombstone_horizon_ms is not None
           and s.tombstone_horizon_ms <= now_ms)
    return LogToClean(s.log_id, first_dirty, first_uncleanable, clean, cleanable,
                      _max_compaction_delay(s, first_dirty, now_ms), reset, due)


def _eligible(plan: LogToClean, min_ratio: float) -> bool:
    """CLEAN-SEL-3: max lag with something cleanable, or a dirty ratio strictly above the minimum."""
    if plan.need_compaction_now and plan.cleanable_bytes > 0:
        return True
    if plan.cleanable_ratio > min_ratio:
        return True
    return plan.tombstones_due


def choose_filthiest(snapshots: Iterable[LogSnapshot], now_ms: int, *,
                     skip: frozenset[str] = frozenset()) -> tuple[LogToClean | None, list[LogToClean]]:
    """CLEAN-SEL-2/3: the eligible partition with the highest ratio, and every computed plan.

    Partitions in ``skip`` (in progress, uncleanable) are not considered. Plans with
    ``checkpoint_reset`` must have their checkpoint rewritten even when not chosen (CLEAN-SEL-2(b)).
    """
    plans: list[LogToClean] = []
    best: LogToClean | None = None
    for s in snapshots:
        if s.log_id in skip:
            continue
        plan = plan_log(s, now_ms)
        plans.append(plan)
        if plan.total_bytes == 0 and not plan.tombstones_due:
            continue
        if not _eligible(plan, s.min_cleanable_dirty_ratio):
            continue
        if best is None or plan.cleanable_ratio > best.cleanable_ratio:
            best = plan
    return best, plans
