"""The queue of encoded frames waiting for the WAL's syncer, the batches cut from it, and their waiters.

Vocabulary: a queued entry is its 20-byte frame header, its payload (kept as two separate ``bytes`` so
the payload is never copied into a frame buffer; both go to ``writev`` side by side) and its *waiter*:
the future of an ``append_async``, or the pre-acquired lock a blocking ``append`` sleeps on. A *batch*
is the longest prefix of the queue whose frames fit a byte limit; it always holds at least one entry, so
an entry larger than the limit still goes out (alone). An empty batch is the syncer's "roll first".

Not thread-safe on purpose: the writer's lock guards the queue together with the seq counter, which is
what keeps queue order equal to seq order. Cutting a batch costs C-level work (``accumulate``/``bisect``
and list slicing over at most ``limit / FRAME_HEADER_SIZE + 1`` entries), never a Python loop per entry.
"""

from __future__ import annotations

from _thread import LockType
from bisect import bisect_right
from concurrent.futures import Future
from dataclasses import dataclass
from itertools import accumulate, islice

from wal.frame import FRAME_HEADER_SIZE
from wal.recovery import WalFile

__all__ = ["Batch", "FrameQueue", "Waiter", "wake"]

Waiter = Future[int] | LockType  # append_async's future, or the held gate of a blocking append


@dataclass(slots=True)
class Batch:
    """Entries ``[first_seq, first_seq + count)`` for one write and one fsync into ``file``."""

    first_seq: int
    parts: list[bytes]
    waiters: list[Waiter]
    size_bytes: int
    file: WalFile

    @property
    def count(self) -> int:
        """How many entries; 0 asks the syncer to roll to a new file first."""
        return len(self.waiters)


class FrameQueue:
    """Frames (header, payload) and their waiters in seq order, cut into batches by size."""

    __slots__ = ("_parts", "_sizes", "_waiters")

    def __init__(self) -> None:
        self._parts: list[bytes] = []  # header, payload, header, payload, ...
        self._sizes: list[int] = []  # frame size of each queued entry
        self._waiters: list[Waiter] = []

    def __len__(self) -> int:
        return len(self._sizes)

    def push(self, header: bytes, payload: bytes, waiter: Waiter) -> None:
        """Queue one frame after every frame already queued."""
        self._parts += (header, payload)
        self._sizes.append(len(header) + len(payload))
        self._waiters.append(waiter)

    def first_size(self) -> int:
        """Frame bytes of the oldest queued entry (the queue must not be empty)."""
        return self._sizes[0]

    def take(self, limit_bytes: int, first_seq: int, file: WalFile) -> Batch:
        """Remove and return the longest prefix of at most ``limit_bytes`` (at least one entry).

        ``first_seq`` is the seq of the oldest queued entry; the queue must not be empty.
        """
        ends = list(accumulate(islice(self._sizes, max(1, limit_bytes) // FRAME_HEADER_SIZE + 1)))
        count = max(1, bisect_right(ends, limit_bytes))
        if count == len(self._sizes):
            parts, waiters = self._parts, self._waiters
            self._parts, self._sizes, self._waiters = [], [], []
        else:
            parts, waiters = self._parts[: 2 * count], self._waiters[:count]
            del self._parts[: 2 * count], self._sizes[:count], self._waiters[:count]
        return Batch(first_seq, parts, waiters, ends[count - 1], file)

    def clear(self) -> list[Waiter]:
        """Drop everything queued (the writer failed) and return the waiters to fail."""
        waiters = self._waiters
        self._parts, self._sizes, self._waiters = [], [], []
        return waiters


def wake(waiters: list[Waiter], first_seq: int, error: BaseException | None = None) -> None:
    """Resolve the waiters of seqs ``first_seq, first_seq + 1, ...``.

    Futures get their seq, or a fresh copy of ``error``; a blocking appender's gate opens either way
    (it then reads the outcome from the writer). Must run outside the writer's lock: future callbacks
    run here.
    """
    for seq, waiter in enumerate(waiters, first_seq):
        if not isinstance(waiter, Future):
            waiter.release()
        elif error is None:
            waiter.set_result(seq)
        else:
            copy = type(error)(*error.args)
            copy.__cause__ = error.__cause__
            waiter.set_exception(copy)
