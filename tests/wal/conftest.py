"""Fixtures for the WAL tests: storages and a writer factory that cleans up.

tests/wal has no ``__init__.py`` on purpose: with pytest's default import mode and no ``tests/__init__.py``
a package named ``wal`` here would shadow the real ``wal`` package. Test modules are therefore named
``test_wal_*.py`` (unique basenames); shared helpers live in ``wal_testkit.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from wal import MemoryWalStorage, WalWriter


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
        except Exception:
            pass
