"""A wrapper that places every key of an ObjectStore under a fixed prefix.

``PrefixedObjectStore(inner, "tenant-a")`` stores key ``k`` as ``tenant-a/k`` in ``inner`` and strips
the prefix back in listings, so several stores (or tests) share one bucket or directory without
seeing each other's keys. The S3 backend has its own ``prefix`` argument (one request fewer to build);
this wrapper gives the same to memory and local stores.

Invariant: keys and prefixes the caller passes are validated before the prefix is added, so a
caller can never address a key outside the prefix (``..`` segments are refused).
"""

from __future__ import annotations

from collections.abc import Iterator

from s3stream.objectstore.keys import validate_key, validate_prefix
from s3stream.objectstore.protocol import DEFAULT_PART_BYTES, ByteRange, GetViews, ListEntry, ObjectMeta, ObjectStore
from s3stream.objectstore.upload import ForwardedUpload

__all__ = ["PrefixedObjectStore"]


class PrefixedObjectStore:
    """Delegates to ``inner`` with ``prefix + "/"`` added to every key."""

    def __init__(self, inner: ObjectStore, prefix: str) -> None:
        prefix = prefix.strip("/")
        if prefix:
            validate_key(prefix)
        self._inner = inner
        self._prefix = prefix
        self._base = prefix + "/" if prefix else ""

    @property
    def inner(self) -> ObjectStore:
        """The wrapped store."""
        return self._inner

    @property
    def prefix(self) -> str:
        """The prefix, without a trailing ``/`` ('' for none)."""
        return self._prefix

    @property
    def url(self) -> str:
        return f"{self._inner.url.rstrip('/')}/{self._prefix}" if self._prefix else self._inner.url

    def _key(self, key: str) -> str:
        return self._base + validate_key(key)

    def put(self, key: str, data: bytes | bytearray | memoryview, *, if_none_match: bool = False,
            if_match: str | None = None) -> ObjectMeta:
        meta = self._inner.put(self._key(key), data, if_none_match=if_none_match, if_match=if_match)
        return ObjectMeta(key, meta.size, meta.etag, meta.last_modified_ms)

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        return self._inner.get(self._key(key), byte_range)

    def get_view(self, key: str, byte_range: ByteRange | None = None) -> memoryview:
        return self._inner.get_view(self._key(key), byte_range)

    @property
    def get_views(self) -> GetViews | None:
        """The inner store's ``get_views`` under the prefix, if it has one."""
        inner: GetViews | None = getattr(self._inner, "get_views", None)
        if inner is None:
            return None
        return lambda key, ranges: inner(self._key(key), ranges)

    def head(self, key: str) -> ObjectMeta:
        meta = self._inner.head(self._key(key))
        return ObjectMeta(key, meta.size, meta.etag, meta.last_modified_ms)

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ListEntry]:
        validate_prefix(prefix)
        after = None if start_after is None else self._base + start_after
        cut = len(self._base)
        return (ListEntry(e.key[cut:], e.size, e.last_modified_ms)
                for e in self._inner.list(self._base + prefix, start_after=after))

    def delete(self, key: str) -> None:
        self._inner.delete(self._key(key))

    def open_upload(self, key: str, *, part_bytes: int = DEFAULT_PART_BYTES) -> ForwardedUpload:
        inner = self._inner.open_upload(self._key(key), part_bytes=part_bytes)
        return ForwardedUpload(key, part_bytes, put=None, inner=inner)

    def close(self) -> None:
        self._inner.close()
