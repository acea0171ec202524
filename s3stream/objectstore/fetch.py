"""One object's bytes by range, as the ``fetch(start, end)`` callable the segment reader takes, and (where the
store serves several ranges at once without request latency) the ``fetch_many(spans)`` one."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from s3stream.objectstore.protocol import ByteRange, GetViews, ObjectStore

__all__ = ["ranged_fetch", "ranged_fetch_many"]


def ranged_fetch(store: ObjectStore, key: str) -> Callable[[int, int], memoryview]:
    """``fetch(start, end)``: bytes ``[start, end)`` of ``key`` by ``get_view`` (pooled memory on a local store)."""
    return lambda start, end: store.get_view(key, ByteRange(start, end))


def ranged_fetch_many(store: ObjectStore, key: str) -> Callable[[Sequence[tuple[int, int]]], list[memoryview]] | None:
    """``fetch_many(spans)``: the bytes of each span of ``key`` in one ``get_views`` call, or None when the
    store does not offer it (its requests wait on a network: fetch them concurrently instead)."""
    get_views: GetViews | None = getattr(store, "get_views", None)
    if get_views is None:
        return None
    return lambda spans: get_views(key, [ByteRange(start, end) for start, end in spans])
