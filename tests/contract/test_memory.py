"""The contract against the memory backend, the prefixed wrapper and the stacked test wrappers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from s3stream.base.ids import IdSource
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.objectstore.prefixed import PrefixedObjectStore
from s3stream.objectstore.protocol import ObjectStore
from s3stream.testing import FaultyObjectStore, LatencyObjectStore, RecordingObjectStore
from s3stream.testing.contract import ObjectStoreContract


class TestMemoryContract(ObjectStoreContract):
    offers_get_views = True

    @pytest.fixture
    def store(self) -> Iterator[ObjectStore]:
        yield MemoryObjectStore()


class TestPrefixedMemoryContract(ObjectStoreContract):
    offers_get_views = True

    @pytest.fixture
    def store(self) -> Iterator[ObjectStore]:
        inner = MemoryObjectStore()
        inner.put("outside/key", b"not visible through the prefix")
        inner.put("tenant-b", b"a sibling, sorting right after the prefix")
        yield PrefixedObjectStore(inner, "tenant")


class TestStackedWrappersContract(ObjectStoreContract):
    """Recording(Faulty(no rules)(Latency(time_scale=0)(memory))): wrappers must not bend the contract."""

    @pytest.fixture
    def store(self) -> Iterator[ObjectStore]:
        latency = LatencyObjectStore(MemoryObjectStore(), "s3-standard", ids=IdSource(1), time_scale=0.0)
        yield RecordingObjectStore(FaultyObjectStore(latency, ids=IdSource(2), rules=[]))
