"""The producers' own batches, as fetch serves them to caught-up consumers: no decode, no encode.

After an append is acknowledged its batch bytes (base offset and leader epoch rewritten, both outside the
CRC, without a copy: :func:`~.batch.rebased`) are exactly what the log holds at ``[base, base + count)``,
when the topic keeps the producer's timestamps (CreateTime) and the batch's offset deltas are 0..n-1 (checked
at decode). Per partition the batches are kept in offset order; a fetch takes the batch holding its offset and
the ones that follow it without a gap. Batches encoded from the partition's unsealed records are kept here
too (read before the producer's batch was acknowledged). Bounded in bytes over all partitions; the oldest go
first. Thread-safe.
"""

from __future__ import annotations

import bisect
import threading
from collections import deque
from dataclasses import dataclass, field

from s3stream.apps.kafka.records.batch import Batch

__all__ = ["PartitionKey", "TailCache"]

#: (topic id, partition): a topic deleted and re-created has a new id, so it never sees the old batches
PartitionKey = tuple[str, int]


@dataclass(slots=True)
class _Partition:
    bases: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    data: list[Batch] = field(default_factory=list)


class TailCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._parts: dict[PartitionKey, _Partition] = {}
        self._order: deque[tuple[PartitionKey, int]] = deque()  # (partition, base) in insertion order
        self._bytes = 0

    @property
    def nbytes(self) -> int:
        return self._bytes

    def put(self, key: PartitionKey, base: int, end: int, data: Batch) -> None:
        """Keep the batch for offsets ``[base, end)``, unless a kept batch overlaps it (a retried duplicate)."""
        size = len(data)
        if size > self.max_bytes // 4:
            return
        with self._lock:
            part = self._parts.get(key)
            if part is None:
                part = self._parts[key] = _Partition()
            i = bisect.bisect_right(part.bases, base)
            if (i and part.ends[i - 1] > base) or (i < len(part.bases) and part.bases[i] < end):
                return
            part.bases.insert(i, base)
            part.ends.insert(i, end)
            part.data.insert(i, data)
            self._order.append((key, base))
            self._bytes += size
            while self._bytes > self.max_bytes and self._order:
                self._evict(*self._order.popleft())

    def get(self, key: PartitionKey, offset: int, max_bytes: int, *, end: int | None = None
            ) -> tuple[list[Batch], int] | None:
        """The batches from the one holding ``offset`` on, while contiguous, within ``max_bytes`` (at least
        one) and wholly below ``end``, and the offset after the last; None when no kept batch holds ``offset``."""
        limit = end if end is not None else 1 << 63
        with self._lock:
            part = self._parts.get(key)
            if part is None:
                return None
            i = bisect.bisect_right(part.bases, offset) - 1
            if i < 0 or part.ends[i] <= offset or part.ends[i] > limit:
                return None
            out = [part.data[i]]
            total = len(part.data[i])
            last = part.ends[i]
            for j in range(i + 1, len(part.bases)):
                nxt = part.data[j]
                if part.bases[j] != last or total + len(nxt) > max_bytes or part.ends[j] > limit:
                    break
                out.append(nxt)
                total += len(nxt)
                last = part.ends[j]
            return out, last

    def drop(self, key: PartitionKey) -> None:
        """Forget a partition (its writer changed: what was kept may no longer be the log)."""
        with self._lock:
            part = self._parts.pop(key, None)
            if part is not None:
                self._bytes -= sum(len(d) for d in part.data)

    def _evict(self, key: PartitionKey, base: int) -> None:
        part = self._parts.get(key)
        if part is None:
            return
        i = bisect.bisect_left(part.bases, base)
        if i < len(part.bases) and part.bases[i] == base:
            self._bytes -= len(part.data[i])
            del part.bases[i], part.ends[i], part.data[i]
            if not part.bases:
                del self._parts[key]
