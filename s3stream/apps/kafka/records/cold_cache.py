"""Batches encoded from sealed segments, for consumers reading the same old data (least recently used out).

A sealed segment's key names immutable content (compaction writes new segments under new keys), so the
batches encoded from ``[first, end)`` of segment ``key`` stay right for as long as anyone asks for them; a
fetch at any offset inside the range gets them (clients skip the records before their offset). Entries are
only looked up for segments the partition still has, and never for an offset below its log start (the
caller checks both). Bounded in bytes; thread-safe.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from s3stream.apps.kafka.records.batch import Batch

__all__ = ["ColdCache"]


@dataclass(frozen=True, slots=True)
class _Entry:
    batches: list[Batch]
    bases: list[int]  # each batch's base offset (the first is the range's first offset)
    size: int


@dataclass(slots=True)
class _Segment:
    firsts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)


class ColdCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._segments: dict[str, _Segment] = {}
        self._lru: OrderedDict[tuple[str, int], _Entry] = OrderedDict()
        self._bytes = 0

    @property
    def nbytes(self) -> int:
        return self._bytes

    def get(self, segment: str, offset: int, max_bytes: int) -> tuple[list[Batch], int] | None:
        """From the cached range of ``segment`` holding ``offset``: the batch holding it and those after it
        within ``max_bytes`` (at least one), and the offset after the last one returned."""
        with self._lock:
            seg = self._segments.get(segment)
            if seg is None:
                return None
            i = bisect.bisect_right(seg.firsts, offset) - 1
            if i < 0 or seg.ends[i] <= offset:
                return None
            key = (segment, seg.firsts[i])
            self._lru.move_to_end(key)
            entry = self._lru[key]
            range_end = seg.ends[i]
        j = max(0, bisect.bisect_right(entry.bases, offset) - 1)
        out = [entry.batches[j]]
        total = len(out[0])
        k = j + 1
        while k < len(entry.batches) and total + len(entry.batches[k]) <= max_bytes:
            out.append(entry.batches[k])
            total += len(entry.batches[k])
            k += 1
        return out, entry.bases[k] if k < len(entry.bases) else range_end

    def covered_end(self, segment: str, offset: int) -> int | None:
        """The end of the kept range of ``segment`` holding ``offset``; None when none holds it."""
        with self._lock:
            seg = self._segments.get(segment)
            if seg is None:
                return None
            i = bisect.bisect_right(seg.firsts, offset) - 1
            return seg.ends[i] if i >= 0 and seg.ends[i] > offset else None

    def put(self, segment: str, first: int, end: int, batches: Sequence[Batch], bases: list[int]) -> None:
        """Keep ``batches`` (base offsets ``bases``), which hold every record of ``segment`` in ``[first, end)``."""
        size = sum(len(b) for b in batches)
        if not batches or size > self.max_bytes // 4:
            return
        with self._lock:
            seg = self._segments.get(segment)
            if seg is None:
                seg = self._segments[segment] = _Segment()
            i = bisect.bisect_right(seg.firsts, first)
            if (i and seg.ends[i - 1] > first) or (i < len(seg.firsts) and seg.firsts[i] < end):
                return  # overlaps a range read meanwhile
            seg.firsts.insert(i, first)
            seg.ends.insert(i, end)
            self._lru[(segment, first)] = _Entry(list(batches), [first, *bases[1:]], size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                (old_segment, old_first), old_entry = self._lru.popitem(last=False)
                self._bytes -= old_entry.size
                old = self._segments[old_segment]
                j = bisect.bisect_left(old.firsts, old_first)
                del old.firsts[j], old.ends[j]
                if not old.firsts:
                    del self._segments[old_segment]
