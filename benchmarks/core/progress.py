"""The run's progress bar: one line for the whole run, one for the phase in progress.

A phase's bar advances by elapsed time (timed phases) or by a ``completed()`` callable (phases bounded by
bytes); a ticker thread refreshes it five times a second. Disabled (no output at all) for tests.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskProgressColumn, TextColumn, TimeElapsedColumn

__all__ = ["PhaseProgress"]


class PhaseProgress:
    """``with PhaseProgress(console, phases=7) as p: with p.phase("raw: disk", seconds=5): ...``."""

    def __init__(self, console: Console, *, phases: int, enabled: bool = True) -> None:
        self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                  TaskProgressColumn(), TimeElapsedColumn(), console=console,
                                  disable=not enabled, transient=False)
        self._overall = self._progress.add_task("engine benchmark", total=phases)

    def __enter__(self) -> PhaseProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def log(self, message: str) -> None:
        """Print a line above the bars."""
        self._progress.console.log(message)

    @contextlib.contextmanager
    def phase(self, name: str, *, seconds: float | None = None, total: float | None = None,
              completed: Callable[[], float] | None = None) -> Iterator[None]:
        """Show ``name`` while the block runs; the bar tracks ``completed()`` of ``total``, or time."""
        start = time.perf_counter()
        measure = completed or (lambda: time.perf_counter() - start)
        bar_total = total if total is not None else seconds
        task = self._progress.add_task(name, total=bar_total)
        stop = threading.Event()

        def tick() -> None:
            while not stop.wait(0.2):
                self._progress.update(task, completed=measure())

        ticker = threading.Thread(target=tick, name="bench-progress", daemon=True)
        ticker.start()
        try:
            yield
        finally:
            stop.set()
            ticker.join()
            done = measure() if bar_total is None else bar_total
            self._progress.update(task, total=done, completed=done)
            self._progress.advance(self._overall)
