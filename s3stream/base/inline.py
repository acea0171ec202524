"""An executor that runs each task in the submitting thread, for a store without background threads.

``background=manual`` hands it out where the engine would use a pool (manifest probes): the task then
runs at once, in the caller's thread and order, so a single-threaded run is deterministic; the caller still
gets a ``Future`` and the code using it does not branch on the mode.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import ParamSpec, TypeVar

__all__ = ["InlineExecutor"]

_P = ParamSpec("_P")
_T = TypeVar("_T")


class InlineExecutor(Executor):
    """``submit`` runs the task now and returns its settled future; refuses work after ``shutdown``."""

    def __init__(self) -> None:
        self._shutdown = False
        self._lock = threading.Lock()

    def submit(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> Future[_T]:
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")  # as ThreadPoolExecutor
        future: Future[_T] = Future()
        future.set_running_or_notify_cancel()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - the future carries it, as a pool's would
            future.set_exception(exc)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
