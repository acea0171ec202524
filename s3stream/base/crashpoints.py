"""Named crash points in the commit paths, so tests can stop the process at each step.

Code calls ``crash_points.hit("seal.after_segment_put")`` at each step of a multi-object protocol.
Tests arm a point; when it is hit, :class:`SimulatedCrash` (a BaseException, so ordinary ``except
Exception`` handlers cannot swallow it) propagates and the test then reopens the store from the bucket
and the local WAL, as a restarted process would. Unarmed points cost one dict lookup.

Known points (grep for ``hit(`` to see where each sits):
``flush.before_put``, ``flush.after_put``, ``flush.before_trim``, ``seal.after_segment_put``,
``seal.after_manifest_commit``, ``manifest.before_put``, ``manifest.after_put``, ``clean.output_put``,
``retention.after_commit``, ``gc.after_delete``, ``clean.after_outputs_put``, ``clean.after_swap``.
"""

from __future__ import annotations

import threading

__all__ = ["CrashPoints", "SimulatedCrash"]


class SimulatedCrash(BaseException):
    """Raised at an armed crash point; the component must be treated as dead afterwards."""

    def __init__(self, point: str) -> None:
        super().__init__(f"simulated crash at {point}")
        self.point = point


class CrashPoints:
    """A registry of armed points; thread-safe. ``after`` skips that many hits before crashing."""

    def __init__(self) -> None:
        self._armed: dict[str, int] = {}
        self._hits: dict[str, int] = {}
        self._lock = threading.Lock()
        self._crashed = False
        self._fired: str | None = None

    def arm(self, point: str, *, after: int = 0) -> None:
        """Crash at the ``after + 1``-th hit of ``point``."""
        with self._lock:
            self._armed[point] = after

    def disarm(self, point: str | None = None) -> None:
        """Disarm one point, or all."""
        with self._lock:
            if point is None:
                self._armed.clear()
            else:
                self._armed.pop(point, None)

    @property
    def crashed(self) -> bool:
        """Whether a point fired: the simulated process is dead, so its close must write nothing more."""
        with self._lock:
            return self._crashed

    @property
    def fired(self) -> str | None:
        """The point that fired (None: none did)."""
        with self._lock:
            return self._fired

    def hits(self, point: str) -> int:
        """How often ``point`` was reached."""
        with self._lock:
            return self._hits.get(point, 0)

    def hit(self, point: str) -> None:
        """Mark ``point`` reached; raise SimulatedCrash if it is armed and due."""
        with self._lock:
            self._hits[point] = self._hits.get(point, 0) + 1
            remaining = self._armed.get(point)
            if remaining is None:
                return
            if remaining > 0:
                self._armed[point] = remaining - 1
                return
            del self._armed[point]
            self._crashed = True
            self._fired = point
        raise SimulatedCrash(point)


#: The default, never-armed registry used when a component is given none.
NO_CRASH = CrashPoints()
