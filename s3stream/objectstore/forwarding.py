"""A pass-through ObjectStore: the base of wrappers that intercept one verb and forward the rest
(:class:`~s3stream.objectstore.metered.MeteredObjectStore`, and the tests' hooks).

``get_view`` goes through :meth:`get`, so a subclass that overrides ``get`` sees every read (one that
only observes forwards ``get_view`` to the inner store itself). ``open_upload`` forwards too, with small
objects (at most one part) sent through :meth:`put`, so a subclass that intercepts ``put`` also sees
those; larger ones stream to the inner store's upload.
"""

from __future__ import annotations

from collections.abc import Iterator

from s3stream.objectstore.protocol import DEFAULT_PART_BYTES, ByteRange, ListEntry, ObjectMeta, ObjectStore
from s3stream.objectstore.upload import ForwardedUpload

__all__ = ["ForwardingObjectStore"]


class ForwardingObjectStore:
    """Forwards every verb to ``inner``; subclasses override the verbs they want to observe or change."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner

    @property
    def url(self) -> str:
        return self.inner.url

    def put(self, key: str, data: bytes | bytearray | memoryview, *, if_none_match: bool = False,
            if_match: str | None = None) -> ObjectMeta:
        return self.inner.put(key, data, if_none_match=if_none_match, if_match=if_match)

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        return self.inner.get(key, byte_range)

    def get_view(self, key: str, byte_range: ByteRange | None = None) -> memoryview:
        """Through :meth:`get`, so a subclass that intercepts ``get`` sees bulk reads too."""
        return memoryview(self.get(key, byte_range))

    def head(self, key: str) -> ObjectMeta:
        return self.inner.head(key)

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ListEntry]:
        return self.inner.list(prefix, start_after=start_after)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def open_upload(self, key: str, *, part_bytes: int = DEFAULT_PART_BYTES) -> ForwardedUpload:
        return ForwardedUpload(key, part_bytes, put=lambda data: self.put(key, data),
                               inner=self.inner.open_upload(key, part_bytes=part_bytes))

    def close(self) -> None:
        self.inner.close()
