"""The node's append drainer: one thread that writes the appends queued on its partitions, round by round.

A partition queues its appends; a *round* takes everything queued on it and writes it as one WAL entry, so
appends that arrive while a round is written (or while its entries await their fsync) share the next one.
A round runs in the appending thread for a blocking ``append`` that may start one at once (no hand-off on the
latency path), on this thread otherwise; partitions take turns here. The drainer also counts the partitions
with appends queued or a round running, so a flush or a close can wait until every queued append is written.

The drainer knows its partitions only as :class:`Drainable` (this layer never imports the partitions).
Without a thread (``background=manual``) requested partitions wait in the queue until someone calls
:meth:`AppendDrainer.step`, the same round the thread runs; :meth:`wait_idle` and :meth:`close` then step
inline, the local WAL's writes and fsyncs too (``disk_step``: a round waiting for a fsync goes on after it).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from s3stream.base.clock import Clock

__all__ = ["AppendDrainer", "Drainable"]

log = logging.getLogger(__name__)


class Drainable(Protocol):
    """A partition's queue of appends, as the drainer sees it."""

    @property
    def log_id(self) -> str: ...
    def drain_once(self) -> bool:
        """Write one round of queued appends; True when the next round may start at once (the drain goes on)."""
        ...


class AppendDrainer:
    """Runs queued drains on one thread (started on first use); counts the drains in progress anywhere."""

    def __init__(self, name: str, clock: Clock, *, background: bool = True,
                 disk_step: Callable[[], bool] | None = None) -> None:
        self._name = name
        self._background = background
        self._disk_step = disk_step  # manual mode: one write or fsync of the local WAL (False: none due)
        self._clock = clock
        self._cond = threading.Condition()
        self._queue: OrderedDict[str, Drainable] = OrderedDict()
        self._busy = 0  # partitions with appends queued or a round running (here or in an appending thread)
        self._stopped = False
        self._thread: threading.Thread | None = None

    def started(self) -> None:
        """A partition has appends queued (whoever drains them); :meth:`finished`: it has none left."""
        with self._cond:
            self._busy += 1

    def finished(self) -> None:
        with self._cond:
            self._busy -= 1
            if self._busy == 0:
                self._cond.notify_all()

    def request(self, queue: Drainable) -> None:
        """Run ``queue``'s next rounds (it is :meth:`started`) on the drainer thread; inline once stopped."""
        with self._cond:
            stopped = self._stopped
            if not stopped:
                self._queue[queue.log_id] = queue
                if self._thread is None and self._background:
                    self._thread = threading.Thread(target=self._run, name=f"s3stream-append-{self._name}",
                                                    daemon=True)
                    self._thread.start()
                self._cond.notify_all()
        if stopped:  # the node is closing: the drain fails its appends (Closed) in the caller
            while queue.drain_once():
                pass

    def wait_idle(self, timeout_s: float | None = None) -> bool:
        """Wait until no drain is in progress (every queued append is in the local WAL and the uploader)."""
        deadline = None if timeout_s is None else self._clock.monotonic() + timeout_s
        with self._cond:
            while self._busy:
                remaining = None if deadline is None else deadline - self._clock.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                if not self._background:  # manual mode: this thread is the drainer, and the disk
                    self._cond.release()
                    try:
                        progressed = self.step() or (self._disk_step is not None and self._disk_step())
                    finally:
                        self._cond.acquire()
                    if progressed:
                        continue
                self._cond.wait(0.1 if remaining is None else min(0.1, remaining))
        return True

    def close(self, timeout_s: float) -> None:
        """Finish the queued drains (at most ``timeout_s``), then stop the thread."""
        self.wait_idle(timeout_s)
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
        with self._cond:  # whatever is still queued drains in this thread (its appends fail: Closed)
            left = list(self._queue.values())
            self._queue.clear()
        for queue in left:
            while queue.drain_once():
                pass

    def step(self) -> bool:
        """Run one drain round of the next requested partition (they take turns); False when none is queued."""
        with self._cond:
            if not self._queue:
                return False
            _, queue = self._queue.popitem(last=False)
        self._round(queue)
        return True

    def _round(self, queue: Drainable) -> None:
        try:
            more = queue.drain_once()
        except BaseException as exc:  # noqa: BLE001 - the drain failed its appends already; go on
            log.warning("append drain of %s stopped: %r", queue.log_id, exc)
            more = False
        if more:
            with self._cond:  # behind the other partitions waiting: they take turns
                self._queue.setdefault(queue.log_id, queue)

    def _run(self) -> None:
        """The drainer thread: wait for a requested partition, then run :meth:`step`."""
        while True:
            with self._cond:
                while not self._queue and not self._stopped:
                    self._cond.wait()
                if not self._queue:
                    return
            self.step()
