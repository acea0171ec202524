"""The queue of encoded frames waiting for the WAL's syncer, and how a batch is cut from it.

Vocabulary: a queued entry is its 20-byte frame header and its payload, kept as two separate ``bytes``
so the payload is never copied into a frame buffer (both go to ``writev`` side by side). A *batch* is
the longest prefix of the queue whose frames fit a byte limit; it always holds at least one entry, so
an entry larger than the limit still goes out (alone).

Not thread-safe on purpose: the writer's lock guards it together with the seq counter, which is what
keeps queue order equal to seq order. Cutting a batch costs C-level work (``accumulate``/``bisect``
over at most ``limit / FRAME_HEADER_SIZE + 1`` sizes), never a Python loop per entry.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate, islice

from wal.frame import FRAME_HEADER_SIZE

__all__ = ["FrameQueue"]


class FrameQueue:
    """Frames (header, payload) in seq order, cut into batches by size."""

    __slots__ = ("_parts", "_sizes")

    def __init__(self) -> None:
        self._parts: list[bytes] = []  # header, payload, header, payload, ...
        self._sizes: list[int] = []  # frame size of each queued entry

    def __len__(self) -> int:
        return len(self._sizes)

    def push(self, header: bytes, payload: bytes) -> None:
        """Queue one frame after every frame already queued."""
        self._parts += (header, payload)
        self._sizes.append(len(header) + len(payload))

    def first_size(self) -> int:
        """Frame bytes of the oldest queued entry (the queue must not be empty)."""
        return self._sizes[0]

    def take(self, limit_bytes: int) -> tuple[list[bytes], int, int]:
        """Remove and return the longest prefix of at most ``limit_bytes`` (at least one entry).

        Returns:
            ``(parts, count, size_bytes)``: the header/payload chunks in write order, the number of
            entries, and their total frame bytes. The queue must not be empty.
        """
        ends = list(accumulate(islice(self._sizes, max(1, limit_bytes) // FRAME_HEADER_SIZE + 1)))
        count = max(1, bisect_right(ends, limit_bytes))
        if count == len(self._sizes):
            parts, self._parts, self._sizes = self._parts, [], []
        else:
            parts = self._parts[: 2 * count]
            del self._parts[: 2 * count]
            del self._sizes[:count]
        return parts, count, ends[count - 1]

    def clear(self) -> None:
        """Drop everything queued (the writer failed)."""
        self._parts, self._sizes = [], []
