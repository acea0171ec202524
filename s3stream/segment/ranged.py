"""A read-only file over ranged fetches, so ``pyarrow.parquet`` can read an object it never downloads whole.

:class:`RangedFile` is an ``io.RawIOBase`` (seek/tell/read/readinto) over a ``fetch(start, end) -> bytes``
callable (half-open ``[start, end)``, bytes of the object at that range). It keeps a small LRU cache of
fetched *extents* (contiguous byte ranges):

* callers that know which bytes they will need (the segment reader knows row-group byte ranges from the
  footer) :meth:`prefetch` them with one fetch, or :meth:`prime` bytes they already hold (the footer tail);
* a read that misses the cache fetches at least the requested bytes plus a read-ahead window that starts
  at 64 KiB and doubles while misses are sequential, up to ``block_bytes``.

Invariants: the object is immutable and exactly ``size`` bytes long, so cached bytes never go stale; a fetch
that returns a different length than asked raises :class:`CorruptData` (the object is not what the caller
believes). A failing fetch is re-raised untouched and also kept in :attr:`fetch_error`, because pyarrow may
wrap exceptions raised inside its reads; the reader uses it to surface the original error.
Not thread-safe: the owner serializes access (pyarrow reads through it with ``pre_buffer=False``).
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from s3stream.errors import CorruptData

_COUNTER_LOCK = threading.Lock()
_POOL_LOCK = threading.Lock()
_POOL: ThreadPoolExecutor | None = None
_FETCH_THREADS = 8


def _fetch_pool() -> ThreadPoolExecutor:
    """One process-wide pool for concurrent read-ahead fetches (threads are created on demand)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=_FETCH_THREADS, thread_name_prefix="s3stream-fetch")
        return _POOL

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

__all__ = ["Fetch", "RangedFile"]

#: ``fetch(start, end)`` returns the object's bytes ``[start, end)``.
Fetch = Callable[[int, int], bytes]

_MIN_READAHEAD = 64 << 10


class RangedFile(io.RawIOBase):
    """A seekable, read-only file whose bytes come from ranged fetches through an extent cache."""

    def __init__(self, fetch: Fetch, size: int, *, source: str, block_bytes: int = 1 << 20,
                 cache_bytes: int | None = None) -> None:
        super().__init__()
        if size < 0 or block_bytes <= 0:
            raise ValueError("RangedFile: size must be >= 0 and block_bytes > 0")
        self._fetch = fetch
        self._size = size
        self._source = source
        self._block_bytes = block_bytes
        self._cache_bytes = cache_bytes if cache_bytes is not None else 4 * block_bytes
        self._extents: OrderedDict[int, bytes] = OrderedDict()
        self._cached = 0
        self._pos = 0
        self._readahead = min(_MIN_READAHEAD, block_bytes)
        self._last_miss_end = -1
        self.fetch_count = 0
        self.fetched_bytes = 0
        self.fetch_error: BaseException | None = None

    # -- io.RawIOBase -------------------------------------------------------------------------------------

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}.get(whence)
        if base is None:
            raise ValueError(f"invalid whence {whence}")
        if base + offset < 0:
            raise ValueError("negative seek position")
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def size(self) -> int:
        """The object's length in bytes."""
        return self._size

    def read(self, size: int | None = -1) -> bytes:
        end = self._size if size is None or size < 0 else min(self._size, self._pos + size)
        if end <= self._pos:
            return b""
        data = self._read_range(self._pos, end)
        self._pos = end
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")
        data = self.read(len(view))
        view[: len(data)] = data
        return len(data)

    # -- cache --------------------------------------------------------------------------------------------

    def covers(self, start: int, end: int) -> bool:
        """Whether ``[start, end)`` is held by one cached extent."""
        return self._find(start, end) is not None

    def prime(self, start: int, data: bytes) -> None:
        """Insert bytes the caller already holds (``data`` is the object's ``[start, start+len)``)."""
        if start < 0 or start + len(data) > self._size:
            raise ValueError("RangedFile.prime: range outside the object")
        self._insert(start, data)

    def prefetch(self, start: int, end: int) -> None:
        """Make ``[start, end)`` cached with at most one fetch (none if it already is)."""
        start, end = max(0, start), min(self._size, end)
        if end > start and not self.covers(start, end):
            self._insert(start, self.fetch(start, end))

    def prefetch_many(self, spans: list[tuple[int, int]]) -> None:
        """Make every span cached, fetching the missing ones concurrently (sequential read-ahead).

        Object stores answer one request at a time with a first-byte latency of tens of milliseconds;
        fetching the next few row groups at once keeps a sequential reader bandwidth-bound instead.
        """
        todo = [(max(0, a), min(self._size, b)) for a, b in spans]
        todo = [(a, b) for a, b in todo if b > a and not self.covers(a, b)]
        if len(todo) <= 1:
            for a, b in todo:
                self._insert(a, self.fetch(a, b))
            return
        results = list(_fetch_pool().map(lambda span: (span[0], self.fetch(*span)), todo))
        for start, data in results:
            self._insert(start, data)

    def clear(self) -> None:
        """Drop every cached extent."""
        self._extents.clear()
        self._cached = 0

    def fetch(self, start: int, end: int) -> bytes:
        """One fetch of ``[start, end)``, counted and length-checked (short read: CorruptData)."""
        try:
            data = self._fetch(start, end)
        except BaseException as e:
            self.fetch_error = e
            raise
        with _COUNTER_LOCK:
            self.fetch_count += 1
            self.fetched_bytes += len(data)
        if len(data) != end - start:
            err = CorruptData(f"fetch [{start}, {end}) returned {len(data)} bytes: object is not "
                              f"{self._size} bytes long", source=self._source)
            self.fetch_error = err
            raise err
        return bytes(data)

    def _find(self, start: int, end: int) -> int | None:
        """The start of a cached extent holding ``[start, end)`` (marked recently used), or None."""
        for ext_start, data in reversed(self._extents.items()):
            if ext_start <= start and end <= ext_start + len(data):
                self._extents.move_to_end(ext_start)
                return ext_start
        return None

    def _insert(self, start: int, data: bytes) -> None:
        old = self._extents.pop(start, None)
        if old is not None:
            self._cached -= len(old)
        self._extents[start] = data
        self._cached += len(data)
        while self._cached > self._cache_bytes and len(self._extents) > 1:
            _, dropped = self._extents.popitem(last=False)
            self._cached -= len(dropped)

    def _read_range(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)``: cached prefixes are served, each miss fetches from where it starts."""
        parts: list[bytes] = []
        pos = start
        while pos < end:
            ext = self._find(pos, pos + 1)
            if ext is None:
                ext = pos
                self._insert(pos, self.fetch(pos, self._miss_end(pos, end)))
            data = self._extents[ext]
            take = min(end, ext + len(data)) - pos
            parts.append(data[pos - ext: pos - ext + take])
            pos += take
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _miss_end(self, start: int, end: int) -> int:
        """Where a miss at ``start`` stops: the read-ahead window doubles while misses are sequential."""
        if start == self._last_miss_end:
            self._readahead = min(self._readahead * 2, self._block_bytes)
        else:
            self._readahead = min(_MIN_READAHEAD, self._block_bytes)
        self._last_miss_end = min(self._size, max(end, start + self._readahead))
        return self._last_miss_end
