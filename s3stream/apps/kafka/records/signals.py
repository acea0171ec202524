"""Wake long-polling fetches when records land in a partition they wait on (no polling loop).

The produce path calls :meth:`AppendSignals.notify` on the event loop once an append is acknowledged (and
the store's high-watermark watchers through ``loop.call_soon_threadsafe`` after an fsync). A
fetch that has less than ``min_bytes`` registers a :class:`Watch` on all its partitions *before* it reads
(so an append landing between its read and its wait still wakes it), and waits on it for what is left of
``max_wait_ms``. Loop-only: no locks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable

__all__ = ["AppendSignals", "TopicPartition", "Watch"]

TopicPartition = tuple[str, int]


class Watch:
    """One registration on some partitions: :meth:`wait` returns once any of them is appended to."""

    def __init__(self, signals: AppendSignals, keys: list[TopicPartition]) -> None:
        self._signals = signals
        self._keys = keys
        loop = signals.loop = asyncio.get_running_loop()
        self.future: asyncio.Future[None] = loop.create_future()
        for key in keys:
            signals.waiters.setdefault(key, set()).add(self.future)

    async def wait(self, seconds: float) -> bool:
        """True once an append landed (maybe before this call), False after ``seconds``."""
        if self.future.done():
            return True
        if seconds <= 0:
            return False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.future), seconds)
        return self.future.done()

    def close(self) -> None:
        waiters = self._signals.waiters
        for key in self._keys:
            found = waiters.get(key)
            if found is not None:
                found.discard(self.future)
                if not found:
                    del waiters[key]
        if not self.future.done():
            self.future.cancel()


class AppendSignals:
    def __init__(self) -> None:
        self.waiters: dict[TopicPartition, set[asyncio.Future[None]]] = {}
        #: the event loop the waiters live on (set by the first watch), for wake-ups from other threads
        self.loop: asyncio.AbstractEventLoop | None = None

    def notify(self, topic: str, partition: int) -> None:
        """Records were appended to ``topic``/``partition``: wake every fetch watching it."""
        found = self.waiters.pop((topic, partition), None)
        if found:
            for fut in found:
                if not fut.done():
                    fut.set_result(None)

    def watch(self, partitions: Iterable[TopicPartition]) -> Watch:
        """Start watching ``partitions`` (call :meth:`Watch.close` when done)."""
        return Watch(self, list(dict.fromkeys(partitions)))
