"""Fixtures for the WAL tests: a memory storage and a writer factory that cleans up.

tests/wal deliberately has no ``__init__.py``: with one (and no ``tests/__init__.py``) pytest's importlib
mode names this package ``wal``, the name of the real package under test. Without it the modules are
``tests.wal.*``, and shared helpers are imported from ``tests.wal.wal_testkit``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from wal import MemoryWalStorage, WalError, WalWriter


@pytest.fixture
def mem() -> MemoryWalStorage:
    return MemoryWalStorage("test")


@pytest.fixture
def make_writer() -> Iterator[Callable[..., WalWriter]]:
    """A WalWriter factory whose writers are closed at teardown (errors from crashed ones ignored)."""
    made: list[WalWriter] = []

    def make(*args: object, **kwargs: object) -> WalWriter:
        writer = WalWriter(*args, **kwargs)  # type: ignore[arg-type]
        made.append(writer)
        return writer

    yield make
    for writer in made:
        try:
            writer.close()
        except WalError:  # a writer on a crashed storage may fail its final fsync
            pass
