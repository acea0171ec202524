"""Injected time: the only module that reads the system clock.

Two kinds of time are used and kept apart:

* **wall time** (``now_ms``): record timestamps, roll (ROLL-1..3), retention (RET-7), compaction lags,
  tombstone horizons, GC grace. Tests freeze it with :class:`ManualClock`.
* **pacing time** (``monotonic``/``sleep``/``wait``): when background I/O happens (flush interval,
  retry backoff, group commit). :class:`ManualClock` keeps real pacing by default so a test never
  deadlocks waiting for a timer nobody advances; semantics never depend on pacing. With
  ``pacing="manual"`` (for a store in ``background=manual`` mode, driven step by step from one thread)
  pacing time is the wall time too: ``advance`` moves both, and ``sleep``/``wait`` pass time instead of
  blocking, so a seeded run never depends on the machine's speed.
"""

from __future__ import annotations

import threading
import time
from typing import Literal, Protocol, runtime_checkable

__all__ = ["Clock", "ManualClock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """Source of wall time (for semantics) and pacing time (for background I/O)."""

    def now_ms(self) -> int:
        """Wall-clock milliseconds since the Unix epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin that never go backwards (for deadlines and latency)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block the calling thread for ``seconds`` of pacing time."""
        ...

    def wait(self, event: threading.Event, seconds: float | None) -> bool:
        """Wait until ``event`` is set or ``seconds`` of pacing time passed; return ``event.is_set()``."""
        ...


class SystemClock:
    """The real clock."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def wait(self, event: threading.Event, seconds: float | None) -> bool:
        return event.wait(seconds)


class ManualClock(SystemClock):
    """A wall clock that only moves when told to; pacing stays real unless ``pacing="manual"`` (see the
    module docstring)."""

    def __init__(self, start_ms: int = 0, *, pacing: Literal["real", "manual"] = "real") -> None:
        if pacing not in ("real", "manual"):
            raise ValueError(f"ManualClock: pacing must be 'real' or 'manual', not {pacing!r}")
        self._now_ms = int(start_ms)
        self._lock = threading.Lock()
        self._manual_pacing = pacing == "manual"
        self._mono = 0.0  # pacing seconds with manual pacing (never goes back, unlike set())

    def monotonic(self) -> float:
        if not self._manual_pacing:
            return time.monotonic()
        with self._lock:
            return self._mono

    def sleep(self, seconds: float) -> None:
        if not self._manual_pacing:
            super().sleep(seconds)
        elif seconds > 0:
            self._pass(seconds)

    def wait(self, event: threading.Event, seconds: float | None) -> bool:
        if not self._manual_pacing:
            return event.wait(seconds)
        if not event.is_set() and seconds is not None and seconds > 0:
            self._pass(seconds)  # nobody else moves time: the wait passes it (None would never end)
        return event.is_set()

    def _pass(self, seconds: float) -> None:
        with self._lock:
            self._mono += seconds
            self._now_ms += int(seconds * 1000)

    def now_ms(self) -> int:
        with self._lock:
            return self._now_ms

    def advance(self, ms: int) -> int:
        """Move wall time forward by ``ms`` (must be >= 0) and return the new time."""
        if ms < 0:
            raise ValueError("ManualClock.advance: ms must be >= 0")
        with self._lock:
            self._now_ms += int(ms)
            self._mono += int(ms) / 1000.0
            return self._now_ms

    def set(self, ms: int) -> None:
        """Set wall time to ``ms`` (may move backwards, to test clock skew)."""
        with self._lock:
            self._now_ms = int(ms)

    def __repr__(self) -> str:
        return f"ManualClock({self.now_ms()})"
