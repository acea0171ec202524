"""How a benchmark process starts: as s3stream's own processes run, and stoppable by SIGTERM with cleanup.

A benchmark owns servers (SeaweedFS) and scratch directories of several GiB that ``with`` blocks stop and
remove. Python's default SIGTERM kills the process without running them, so ``timeout`` or a CI runner
stopping a run left a SeaweedFS server running and its data on disk; as :class:`SystemExit` the signal
unwinds the main thread through every ``finally`` first.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

from s3stream.base.allocator import tune_allocator

__all__ = ["TERMINATED_EXIT_STATUS", "exit_on_sigterm", "start_benchmark_process"]

#: Exit status of a run stopped by SIGTERM (128 + 15, as a shell reports it).
TERMINATED_EXIT_STATUS = 128 + signal.SIGTERM


def _exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(TERMINATED_EXIT_STATUS)


def exit_on_sigterm() -> None:
    """Make SIGTERM a :class:`SystemExit` (signal handlers belong to the main thread: elsewhere, nothing)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _exit)


def start_benchmark_process() -> None:
    """Measure as s3stream's own processes run (:func:`s3stream.base.allocator.tune_allocator`); SIGTERM cleans up."""
    tune_allocator()
    exit_on_sigterm()
