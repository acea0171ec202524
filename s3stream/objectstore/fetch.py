"""One object's bytes by range, as the ``fetch(start, end)`` callable the segment reader takes."""

from __future__ import annotations

from collections.abc import Callable

from s3stream.objectstore.protocol import ByteRange, ObjectStore

__all__ = ["ranged_fetch"]


def ranged_fetch(store: ObjectStore, key: str) -> Callable[[int, int], memoryview]:
    """``fetch(start, end)``: bytes ``[start, end)`` of ``key`` by ``get_view`` (pooled memory on a local store)."""
    return lambda start, end: store.get_view(key, ByteRange(start, end))
