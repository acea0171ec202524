"""A read-only file over ranged fetches, so ``pyarrow.parquet`` can read an object it never downloads whole.

:class:`RangedFile` is an ``io.RawIOBase`` (seek/tell/read/readinto, and ``read_buffer`` for pyarrow) over
a ``fetch(start, end)`` callable (half-open ``[start, end)``: the object's bytes at that range, as ``bytes``
or a ``memoryview``; ``s3stream.objectstore.fetch.ranged_fetch`` reads an object with ``get_view``).
It keeps a small LRU cache of fetched *extents* (contiguous byte ranges) and of *pending extents*: fetches
running in the background on the process-wide fetch pool, one future per span:

* callers that know which bytes they will need (the segment reader knows row-group byte ranges from the
  footer) start them with :meth:`fetch_async` (concurrently, on the pool), or
  :meth:`prime` bytes they already hold (the footer tail);
* a read that needs bytes of a pending extent waits for that fetch (:meth:`wait` does it explicitly);
* a read that misses both fetches at least the requested bytes plus a read-ahead window that starts at
  64 KiB and doubles while misses are sequential, up to ``block_bytes``.

Memory: cached plus in-flight bytes stay within ``cache_bytes``: speculative fetches
(``fetch_async(required=False)``) are started only when they fit, after evicting extents that end below
the caller's position; required fetches evict the least recently used extents instead (they may exceed
the bound by what one read needs). Fetches still running when their extents were dropped count until
they finish.

Errors: the object is immutable and exactly ``size`` bytes long, so cached bytes never go stale; a fetch
that returns a different length than asked raises :class:`CorruptData` (the object is not what the caller
believes). A failing fetch is re-raised untouched when (and only when) its bytes are needed, and is also
kept in :attr:`fetch_error`, because pyarrow may wrap exceptions raised inside its reads; the reader uses
it to surface the original error. A failed pending extent is forgotten, so a later read fetches again.
Not thread-safe: the owner serializes access. pyarrow's pre-buffered reads call it from pyarrow's I/O
thread, but only while the owner's thread waits inside that pyarrow call; the fetches themselves run on
the fetch pool and touch no state but the counters.
"""

from __future__ import annotations

import io
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from s3stream.base.errors import CorruptData

_COUNTER_LOCK = threading.Lock()
_POOL_LOCK = threading.Lock()
_POOL: ThreadPoolExecutor | None = None
_FETCH_THREADS = 8


def _forget_pool_in_child() -> None:
    """A forked child has none of the parent's threads: it starts a pool (and a lock) of its own."""
    global _POOL, _POOL_LOCK
    _POOL, _POOL_LOCK = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


def fetch_pool() -> ThreadPoolExecutor:
    """One process-wide pool for concurrent read-ahead fetches (threads are created on demand).

    Tasks on it must never wait for other tasks on it (a full pool would deadlock). A store without
    background threads (``background=manual``) hands its readers an executor of its own instead
    (``executor=``: an inline one, so a read's fetches run in the caller's thread and order).
    """
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=_FETCH_THREADS, thread_name_prefix="s3stream-fetch")
        return _POOL


def fetches(executor: Executor | None) -> Executor:
    """Where a reader's background fetches run: ``executor``, else the process-wide :func:`fetch_pool`."""
    return executor if executor is not None else fetch_pool()


if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

__all__ = ["Extent", "Fetch", "FetchMany", "RangedFile", "fetch_pool", "fetches"]

#: The object's bytes of one range: kept as fetched (a view holds its buffer alive).
Extent = bytes | memoryview
#: ``fetch(start, end)`` returns the object's bytes ``[start, end)``.
Fetch = Callable[[int, int], Extent]
#: ``fetch_many(spans)`` returns the bytes of each span, in one call on the caller's thread.
FetchMany = Callable[[Sequence[tuple[int, int]]], Sequence[Extent]]


_MIN_READAHEAD = 64 << 10


class RangedFile(io.RawIOBase):
    """A seekable, read-only file whose bytes come from ranged fetches through an extent cache."""

    def __init__(self, fetch: Fetch, size: int, *, source: str, block_bytes: int = 1 << 20,
                 cache_bytes: int | None = None, fetch_many: FetchMany | None = None,
                 executor: Executor | None = None) -> None:
        super().__init__()
        self._executor = executor  # background fetches (None: the process-wide fetch pool)
        if size < 0 or block_bytes <= 0:
            raise ValueError("RangedFile: size must be >= 0 and block_bytes > 0")
        self._fetch = fetch
        self._fetch_many = fetch_many
        self._size = size
        self._source = source
        self._block_bytes = block_bytes
        self._cache_bytes = cache_bytes if cache_bytes is not None else 4 * block_bytes
        self._extents: OrderedDict[int, Extent] = OrderedDict()
        self._cached = 0
        self._pending: dict[int, tuple[int, Future[Extent]]] = {}  # start -> (end, fetch in flight)
        self._pending_bytes = 0
        self._orphans: list[tuple[int, Future[Extent]]] = []  # dropped while running: (bytes, future)
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
        if whence == io.SEEK_SET:
            base = 0
        elif whence == io.SEEK_CUR:
            base = self._pos
        elif whence == io.SEEK_END:
            base = self._size
        else:
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
        return data if isinstance(data, bytes) else bytes(data)

    def read_buffer(self, size: int = -1) -> memoryview:
        """Like :meth:`read`, without copying bytes out of a cached extent (pyarrow uses this when present)."""
        start = self._pos
        end = self._size if size < 0 else min(self._size, start + size)
        if end <= start:
            return memoryview(b"")
        ext = self._find(start, end)
        view = (memoryview(self._extents[ext])[start - ext: end - ext] if ext is not None
                else memoryview(self._read_range(start, end)))
        self._pos = end
        return view

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")
        data = self.read_buffer(len(view))
        view[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self.clear()
        super().close()

    # -- cache --------------------------------------------------------------------------------------------

    @property
    def cache_bytes(self) -> int:
        """The bound on cached plus in-flight bytes."""
        return self._cache_bytes

    @property
    def cached_bytes(self) -> int:
        return self._cached

    @property
    def inflight_bytes(self) -> int:
        """Bytes of fetches still running (pending extents, and fetches of dropped extents)."""
        if self._orphans:
            self._orphans = [(n, f) for n, f in self._orphans if not f.done()]
        return self._pending_bytes + sum(n for n, _ in self._orphans)

    def covers(self, start: int, end: int) -> bool:
        """Whether ``[start, end)`` is held by one cached or pending extent (never waits)."""
        for ext_start, data in self._extents.items():
            if ext_start <= start and end <= ext_start + len(data):
                return True
        return any(p <= start and end <= e for p, (e, _) in self._pending.items())

    def holds(self, start: int, end: int) -> bool:
        """Whether one cached extent (not a pending one) holds ``[start, end)``."""
        return any(a <= start and end <= a + len(data) for a, data in self._extents.items())

    def touch(self, start: int, end: int) -> bool:
        """Like :meth:`covers`, marking a cached extent holding the range as recently used (kept longest)."""
        for ext_start, data in self._extents.items():
            if ext_start <= start and end <= ext_start + len(data):
                self._extents.move_to_end(ext_start)
                return True
        return any(p <= start and end <= e for p, (e, _) in self._pending.items())

    def extents(self) -> list[tuple[int, Extent]]:
        """The cached extents, ``(start, bytes)`` each (pending ones are not waited for)."""
        return list(self._extents.items())

    def prime(self, start: int, data: Extent) -> None:
        """Insert bytes the caller already holds (``data`` is the object's ``[start, start+len)``)."""
        if start < 0 or start + len(data) > self._size:
            raise ValueError("RangedFile.prime: range outside the object")
        self._insert(start, data)

    def prefetch(self, start: int, end: int) -> None:
        """Make ``[start, end)`` cached with at most one fetch (none if it already is)."""
        start, end = max(0, start), min(self._size, end)
        if end > start:
            self.wait(start, end)

    def fetch_async(self, spans: Sequence[tuple[int, int]], *, required: bool = True,
                    evict_below: int | None = None) -> int:
        """Start background fetches of the spans (in order) that no cached or pending extent holds.

        Required spans are always started. Speculative ones (``required=False``) are started only while
        they fit in ``cache_bytes`` with the extents already held, after evicting those that end at or
        below ``evict_below`` (bytes the caller has consumed). Returns how many leading spans are now
        cached or pending (the rest did not fit).
        """
        for i, (a, b) in enumerate(spans):
            a, b = max(0, a), min(self._size, b)
            if b <= a or self.touch(a, b):
                continue
            if not required and not self._room_for(b - a, evict_below):
                return i
            self._pending[a] = (b, fetches(self._executor).submit(self._fetch_checked, a, b))
            self._pending_bytes += b - a
        return len(spans)

    def load(self, spans: Sequence[tuple[int, int]]) -> None:
        """Make every span cached (none evicted meanwhile: the cache must have room for them all).

        With ``fetch_many`` (a store whose requests cost no latency) the spans not held yet are fetched in
        one call on this thread; otherwise concurrently on the fetch pool, as :meth:`fetch_async` does.
        Raises a fetch's error (also kept in :attr:`fetch_error`).
        """
        todo = [(max(0, a), min(self._size, b)) for a, b in spans if not self.touch(a, b)]
        todo = [(a, b) for a, b in todo if b > a]
        if self._fetch_many is None or not todo:
            self.fetch_async(todo)
            for a, b in todo:
                self.wait(a, b)
            return
        try:
            fetched = self._fetch_many(todo)
            if len(fetched) != len(todo):
                raise CorruptData(f"fetch of {len(todo)} ranges returned {len(fetched)}", source=self._source)
            for (a, b), data in zip(todo, fetched, strict=True):
                self._insert(a, self._counted(a, b, data))
        except BaseException as e:
            self.fetch_error = e
            raise

    def wait(self, start: int, end: int) -> None:
        """Make ``[start, end)`` cached: wait for the pending extent holding it, or fetch it now.

        Raises the fetch's error (also kept in :attr:`fetch_error`).
        """
        if self._find(start, end) is None:
            self._insert(start, self.fetch(start, end))

    def view(self, start: int, end: int) -> memoryview:
        """Bytes ``[start, end)`` without copying (waited for, or fetched, into one extent first)."""
        ext = self._find(start, end)
        if ext is None:
            ext = start
            self._insert(start, self.fetch(start, end))
        return memoryview(self._extents[ext])[start - ext:end - ext]

    def clear(self) -> None:
        """Drop every cached extent and every pending fetch (those not started yet are cancelled)."""
        self._extents.clear()
        self._cached = 0
        for start in list(self._pending):
            self._drop_pending(start)

    def _drop_pending(self, start: int) -> None:
        end, fut = self._pending.pop(start)
        self._pending_bytes -= end - start
        if not fut.cancel() and not fut.done():
            self._orphans.append((end - start, fut))  # still running: its bytes count until it finishes

    def drop_pending(self, keep_from: int, keep_to: int) -> None:
        """Forget pending extents that do not intersect ``[keep_from, keep_to)`` (cancelled if not started)."""
        for start, (end, _) in list(self._pending.items()):
            if end <= keep_from or start >= keep_to:
                self._drop_pending(start)

    def fetch(self, start: int, end: int) -> Extent:
        """One fetch of ``[start, end)``, counted and length-checked (short read: CorruptData)."""
        try:
            return self._fetch_checked(start, end)
        except BaseException as e:
            self.fetch_error = e
            raise

    def _fetch_checked(self, start: int, end: int) -> Extent:
        """One fetch, counted and length-checked; touches no other state (it also runs on pool threads)."""
        return self._counted(start, end, self._fetch(start, end))

    def _counted(self, start: int, end: int, data: Extent) -> Extent:
        """Count a fetch of ``[start, end)`` and check its length (it also runs on pool threads)."""
        with _COUNTER_LOCK:
            self.fetch_count += 1
            self.fetched_bytes += len(data)
        if len(data) != end - start:
            raise CorruptData(f"fetch [{start}, {end}) returned {len(data)} bytes: object is not "
                              f"{self._size} bytes long", source=self._source)
        return data

    def _find(self, start: int, end: int) -> int | None:
        """The start of a cached extent holding ``[start, end)`` (marked recently used), or None.

        A pending extent holding the range is waited for first (its error is raised here).
        """
        for ext_start, data in reversed(self._extents.items()):
            if ext_start <= start and end <= ext_start + len(data):
                self._extents.move_to_end(ext_start)
                return ext_start
        for p, (e, _) in self._pending.items():
            if p <= start and end <= e:
                self._harvest(p)
                return p
        return None

    def _harvest(self, start: int) -> None:
        """Wait for the pending extent at ``start`` and cache its bytes (or raise its error, forgetting it)."""
        end, fut = self._pending.pop(start)
        self._pending_bytes -= end - start
        try:
            data = fut.result()
        except BaseException as e:
            self.fetch_error = e
            raise
        self._insert(start, data)

    def _insert(self, start: int, data: Extent) -> None:
        old = self._extents.pop(start, None)
        if old is not None:
            self._cached -= len(old)
        self._extents[start] = data
        self._cached += len(data)
        self._trim(keep=start)

    def _trim(self, keep: int | None) -> None:
        """Evict least recently used extents (never ``keep``) while cached + in-flight bytes exceed the bound."""
        if self._cached + self._pending_bytes <= self._cache_bytes and not self._orphans:
            return
        excess = self._cached + self.inflight_bytes - self._cache_bytes
        for ext_start in list(self._extents):
            if excess <= 0:
                break
            if ext_start != keep:
                dropped = self._extents.pop(ext_start)
                self._cached -= len(dropped)
                excess -= len(dropped)

    def _room_for(self, nbytes: int, evict_below: int | None) -> bool:
        """Whether ``nbytes`` more fit, after evicting extents that end at or below ``evict_below``."""
        excess = self._cached + self.inflight_bytes + nbytes - self._cache_bytes
        if excess > 0 and evict_below is not None:
            for ext_start, data in list(self._extents.items()):
                if excess <= 0:
                    break
                if ext_start + len(data) <= evict_below:
                    del self._extents[ext_start]
                    self._cached -= len(data)
                    excess -= len(data)
        return excess <= 0

    def _read_range(self, start: int, end: int) -> Extent:
        """Bytes ``[start, end)``: cached prefixes are served, each miss fetches from where it starts."""
        parts: list[Extent] = []
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
        """Where a miss at ``start`` stops: the read-ahead window doubles while misses are sequential.

        It stops before the next pending extent, so a miss never refetches bytes already on their way.
        """
        if start == self._last_miss_end:
            self._readahead = min(self._readahead * 2, self._block_bytes)
        else:
            self._readahead = min(_MIN_READAHEAD, self._block_bytes)
        stop = min(self._size, max(end, start + self._readahead))
        for p in self._pending:
            if start < p < stop:
                stop = p
        self._last_miss_end = stop
        return stop
