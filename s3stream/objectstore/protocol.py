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
* ``get_view(key, byte_range)`` is ``get`` for bulk readers (segment row groups): the same bytes and
  errors, as a read-only ``memoryview`` of a buffer the backend chooses, so it can spare an allocation
  or a copy. The local backend reads into Arrow's pooled memory: a fresh multi-MiB ``bytes`` is new
  pages from the kernel each time (a fault and a zeroing per 4 KiB, measured as most of the page
  faults of a cleaning round); the memory backend shares its stored bytes.
* ``get_views(key, ranges)`` is optional (:data:`GetViews`; read it with ``getattr(store, "get_views",
  None)``): several ranges of one object as views, what ``get_view`` returns for each, in one call on the
  caller's thread. A store offers it only where a request costs no latency, just its per-call work (the
  local directory: one ``open`` for all the ranges; memory), so a reader wanting many small ranges calls
  it instead of fanning GETs out to threads; wrappers offer it exactly when their inner store does (an
  attribute that is None otherwise). Stores where a request waits on a network do not offer it.
* ``list(prefix, start_after)`` yields every key under ``prefix`` (strictly after ``start_after``)
  in lexicographic order of the key, with its size and modification time. Callers that need an order
  other than lexicographic parse the keys; no caller trusts LIST alone for what is referenced.
* ``delete(key)`` is idempotent: deleting a missing key succeeds.
* ``open_upload(key, part_bytes=...)`` starts an unconditional write of an object whose size is not known
  up front (a segment being encoded). :meth:`Upload.write` cuts the byte stream into parts of exactly
  ``part_bytes`` (the last may be shorter) and sends a part as soon as a byte beyond it is written, so an
  upload holds at most one part in memory; an object of at most one part is sent as one plain PUT at
  :meth:`Upload.complete`. Nothing is visible under the key until ``complete`` returns (then, like an
  unconditional put, the object replaces any previous one); ``abort`` (also leaving a ``with`` block
  without completing, and any failed ``write``/``complete``) discards what was sent, so nothing becomes
  visible. ``part_bytes`` >= 1; the S3 backend requires S3's minimum part of 5 MiB.
* Keys are ``/``-separated relative paths of printable characters; no ``..`` segments, no leading ``/``.
* Errors: :class:`ObjectNotFound`, :class:`PreconditionFailed`, :class:`Throttled`,
  :class:`TransientError` (outcome unknown for writes), :class:`StoreAccessError`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol, Self, TypeVar, runtime_checkable

__all__ = ["DEFAULT_PART_BYTES", "Body", "ByteRange", "GetViews", "ListEntry", "ObjectMeta", "ObjectStore", "Upload"]

#: A GET's result, for code shared by :meth:`ObjectStore.get` (bytes) and :meth:`ObjectStore.get_view`.
Body = TypeVar("Body", bytes, memoryview)

#: The part size of :meth:`ObjectStore.open_upload` when none is given (S3's minimum part is 5 MiB).
DEFAULT_PART_BYTES = 8 << 20


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


#: The optional ``get_views(key, ranges)`` verb (see the module docstring).
GetViews = Callable[[str, Sequence[ByteRange]], list[memoryview]]


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


class Upload(Protocol):
    """One object being written in parts (see ``open_upload`` in the module docstring); one thread uses it."""

    @property
    def key(self) -> str:
        """The key the object is written to."""
        ...

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Append ``data``; every part completed by it (and followed by a byte) is sent now."""
        ...

    def complete(self) -> ObjectMeta:
        """Send the rest and make the object visible; on failure the upload is aborted."""
        ...

    def abort(self) -> None:
        """Discard the upload (idempotent; no-op after ``complete``); best effort on the server side."""
        ...

    def __enter__(self) -> Self:
        ...

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        """Abort unless ``complete`` returned."""
        ...


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

    def get_view(self, key: str, byte_range: ByteRange | None = None) -> memoryview:
        """What :meth:`get` returns, as a read-only view of a buffer of the backend's choosing."""
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

    def open_upload(self, key: str, *, part_bytes: int = DEFAULT_PART_BYTES) -> Upload:
        """Start a streamed, unconditional write of ``key`` in parts of ``part_bytes``."""
        ...

    def close(self) -> None:
        """Release connections and files."""
        ...
