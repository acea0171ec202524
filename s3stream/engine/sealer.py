"""The engine's sealer: seals rolled segments in the background, so appends never wait for a segment PUT.

Its unit of work is :meth:`Sealer.step` (seal one queued log's pending segments, re-queueing it after a
failure that may pass); the sealer threads run exactly that, and without background threads
(``background=manual``) the caller does, in its own thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from s3stream.base.clock import Clock
from s3stream.base.errors import Fenced
from s3stream.partition.host import HostedLog

__all__ = ["Sealer"]

log = logging.getLogger(__name__)


class Sealer:
    """Seals rolled segments of the logs asked for, on background threads or by :meth:`step`.

    ``seal_concurrency`` threads take logs from one queue; a log is never sealed by two threads at once
    (its seals must commit in order), so different partitions' seals overlap: one uploads while the next
    reads and encodes. ``Runtime.seal_slot`` bounds the seals in flight from every thread to the same number.
    """

    def __init__(self, clock: Clock, *, concurrency: int, background: bool = True) -> None:
        self._clock = clock
        self._concurrency = concurrency
        self._background = background  # False: no thread; step() is called by whoever drives the store
        self._cond = threading.Condition()
        self._queue: dict[str, HostedLog] = {}
        self._running: set[str] = set()  # logs a thread is sealing now
        self._failures: dict[str, int] = {}  # consecutive failed attempts per log (touched by its sealing thread)
        self._stopped = False
        self._threads: list[threading.Thread] = []

    def request(self, plog: HostedLog) -> None:
        """Seal ``plog``'s pending segments soon (a thread picks it up, or the next :meth:`step`)."""
        with self._cond:
            if self._stopped:
                return
            self._queue[plog.log_id] = plog
            if self._background and len(self._threads) < min(self._concurrency,
                                                              len(self._queue) + len(self._running)):
                thread = threading.Thread(target=self._run, name=f"s3stream-sealer-{len(self._threads)}",
                                          daemon=True)
                self._threads.append(thread)
                thread.start()
            self._cond.notify_all()

    def pending(self) -> list[str]:
        """The logs waiting for a seal (queued, not being sealed), in request order."""
        with self._cond:
            return list(self._queue)

    def drain(self, timeout_s: float | None = None) -> None:
        """Wait until every requested seal is done (or failed); without threads, seal them here."""
        deadline = None if timeout_s is None else self._clock.monotonic() + timeout_s
        with self._cond:
            while self._queue or self._running:
                if deadline is not None and self._clock.monotonic() > deadline:
                    return
                if not self._background:
                    self._cond.release()
                    try:
                        self.step()
                    finally:
                        self._cond.acquire()
                    continue
                self._cond.wait(0.05)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(5)

    def step(self) -> bool:
        """Seal the pending segments of the next queued log no thread is sealing; False when there is none.

        A failure that may pass puts the log back in the queue (after a backoff of pacing time); a fence
        lets go of the log.
        """
        with self._cond:
            plog = self._take_locked()
        if plog is None:
            return False
        self._seal(plog)
        return True

    def _take_locked(self) -> HostedLog | None:
        for log_id, plog in self._queue.items():
            if log_id not in self._running:
                del self._queue[log_id]
                self._running.add(log_id)
                return plog
        return None

    def _seal(self, plog: HostedLog) -> None:
        retry = False
        try:
            retry = _seal_safely(plog, self._failures, self._clock.sleep)
        finally:  # even when a BaseException (a simulated crash) ends the thread, drain() must not hang
            with self._cond:
                self._running.discard(plog.log_id)
                if retry and not self._stopped:
                    self._queue.setdefault(plog.log_id, plog)
                self._cond.notify_all()

    def _run(self) -> None:
        """A sealer thread: wait for a queued log no other thread seals, then seal it (as :meth:`step`)."""
        while True:
            with self._cond:
                plog = None
                while not self._stopped:
                    plog = self._take_locked()
                    if plog is not None:
                        break
                    self._cond.wait(1.0)
                if plog is None:
                    return
            self._seal(plog)


def _seal_safely(plog: HostedLog, failures: dict[str, int], sleep: Callable[[float], None]) -> bool:
    """Seal; return True when it should be retried later."""
    try:
        plog.seal_pending()  # the sealer is the log's background half
        failures.pop(plog.log_id, None)
        return False
    except Fenced as exc:
        log.error("sealing %s: %s", plog.log_id, exc)
        plog.detach()
        return False
    except Exception as exc:  # noqa: BLE001 - a failed seal is retried; the records stay readable
        n = failures.get(plog.log_id, 0) + 1
        failures[plog.log_id] = n
        log.warning("sealing %s failed (attempt %d): %s", plog.log_id, n, exc)
        sleep(min(0.1 * 2**n, 10.0))
        return n < 50
