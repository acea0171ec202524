"""Resolving a future that another thread may resolve first (a publish racing a deadline or a failure)."""

from __future__ import annotations

from concurrent.futures import Future, InvalidStateError
from typing import TypeVar

__all__ = ["settle"]

T = TypeVar("T")


def settle(future: Future[T] | None, result: T | None = None, *, error: BaseException | None = None) -> None:
    """Set ``future``'s result (or ``error``) unless it is resolved already; the first resolution wins."""
    if future is None or future.done():
        return
    try:
        if error is None:
            future.set_result(result)  # type: ignore[arg-type]  # None only for Future[None]-like callers
        else:
            future.set_exception(error)
    except InvalidStateError:  # resolved by another thread in between
        pass
