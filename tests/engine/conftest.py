"""Fixtures of the engine tests: a unique memory:// namespace per test, dropped afterwards."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from s3stream.objectstore.memory import MemoryObjectStore

_COUNTER = itertools.count()


@pytest.fixture
def mem_url(request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"engine-{next(_COUNTER)}-{request.node.name[:40]}".replace("[", "-").replace("]", "")
    name = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)
    MemoryObjectStore.drop_namespace(name)
    yield f"memory://{name}"
    MemoryObjectStore.drop_namespace(name)
