"""The one ObjectStore port: S3-shaped, small, with atomic conditional put as a required verb.

Every backend (memory, a local directory, S3) implements exactly this; wrappers (latency model, fault
injection, request recording) implement it too and delegate. One contract suite
(``s3stream.testing.contract``) runs against each backend.

Contract:

* ``put(key, data, if_none_match=True)`` creates the key only if it does not exist, atomically with
  respect to every other writer of the same store; otherwise :class:`PreconditionFailed`.
* ``put(key, data, if_match=etag)`` replaces the object only if its current ETag is ``etag``;
  a mismatch raises :class:`PreconditionFailed`; a missing key raises :class:`PreconditionFailed`
  or :class:`ObjectNotFound` (stores differ: AWS 404, Ceph 412) and never succeeds.
* ``get(key, byte_range)`` returns the bytes of the range, clipped to the object's end;
  a missing key raises :class:`ObjectNotFound`. ``ByteRange(start, end)`` is half-open ``[start, end)``;
  ``end=None`` means to the end; ``suffix`` fetches the last ``n`` bytes.
* ``list(prefix, start_after)`` yields every key under ``prefix`` (strictly after ``start_after``)
  in lexicographic order of the key, with its size and modification time. Callers that need an order
  other than lexicographic parse the keys; no caller trusts LIST alone for what is referenced.
* ``delete(key)`` is idempotent: deleting a missing key succeeds.
* Keys are ``/``-separated relative paths of printable characters; no ``..`` segments, no leading ``/``.
* Errors: :class:`ObjectNotFound`, :class:`PreconditionFailed`, :class:`Throttled`,
  :class:`TransientError` (outcome unknown for writes), :class:`StoreAccessError`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["ByteRange", "ListEntry", "ObjectMeta", "ObjectStore"]


@dataclass(frozen=True, slots=True)
class ByteRange:
    """A byte range: ``[start, end)`` from the object's start, or its last ``suffix`` bytes."""

    start: int = 0
    end: int | None = None
    suffix: int | None = None

    def __post_init__(self) -> None:
        if self.suffix is not None:
            if self.suffix <= 0 or self.start != 0 or self.end is not None:
                raise ValueError("ByteRange: suffix must be > 0 and excludes start/end")
        elif self.start < 0 or (self.end is not None and self.end < self.start):
            raise ValueError(f"ByteRange: invalid range [{self.start}, {self.end})")

    @classmethod
    def last(cls, n: int) -> ByteRange:
        """The last ``n`` bytes of the object (or all of it when it is shorter)."""
        return cls(suffix=n)

    def resolve(self, size: int) -> tuple[int, int]:
        """The concrete ``[start, end)`` within an object of ``size`` bytes (clipped)."""
        if self.suffix is not None:
            return max(0, size - self.suffix), size
        end = size if self.end is None else min(self.end, size)
        start = min(self.start, size)
        return start, max(start, end)


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    """What a put or head returns."""

    key: str
    size: int
    etag: str
    last_modified_ms: int


@dataclass(frozen=True, slots=True)
class ListEntry:
    """One key of a listing."""

    key: str
    size: int
    last_modified_ms: int


@runtime_checkable
class ObjectStore(Protocol):
    """An S3-shaped object store. Implementations are thread-safe."""

    @property
    def url(self) -> str:
        """A display form of where the data lives (never contains credentials)."""
        ...

    def put(self, key: str, data: bytes | bytearray | memoryview, *, if_none_match: bool = False,
            if_match: str | None = None) -> ObjectMeta:
        """Write ``data`` at ``key``; conditional forms as in the module docstring."""
        ...

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        """Read the whole object or a byte range of it."""
        ...

    def head(self, key: str) -> ObjectMeta:
        """Size, ETag and modification time of ``key``; raises ObjectNotFound."""
        ...

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ListEntry]:
        """Every key under ``prefix`` in lexicographic order (paginated lazily)."""
        ...

    def delete(self, key: str) -> None:
        """Delete ``key``; a missing key is not an error."""
        ...

    def close(self) -> None:
        """Release connections and files."""
        ...
