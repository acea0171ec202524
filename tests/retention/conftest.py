"""Fixtures of the retention tests: a unique memory:// bucket, a manual clock, an open store."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

import s3stream
from s3stream import ManualClock
from s3stream.objectstore.memory import MemoryObjectStore

from .store_kit import T0, open_at

_COUNTER = itertools.count()


@pytest.fixture
def mem_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh, uniquely named memory bucket, dropped after the test."""
    raw = f"retention-{next(_COUNTER)}-{request.node.name[:40]}"
    name = "".join(c if c.isalnum() or c in "-_." else "-" for c in raw)
    MemoryObjectStore.drop_namespace(name)
    yield f"memory://{name}"
    MemoryObjectStore.drop_namespace(name)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def store(mem_url: str, tmp_path: Path, clock: ManualClock) -> Iterator[s3stream.Store]:
    """An open store on ``mem_url`` with its WAL under ``tmp_path/wal``; closed after the test."""
    st = open_at(mem_url, tmp_path / "wal", clock)
    yield st
    st.close()
