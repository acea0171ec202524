"""A request-recording ObjectStore wrapper: S3's cost model (requests and bytes) made assertable.

Counts requests by S3 kind (``PUT``, ``GET``, ``HEAD``, ``LIST``, ``DELETE``) and bytes written and
read, and keeps a bounded log of ``(op, key, size)``. A LIST counts one request per page of 1000 keys
(S3's page size), counted lazily as the caller iterates, so a caller that stops early pays for the
pages it fetched. Requests that fail are counted too (S3 bills them). Thread-safe.

A streamed upload (``open_upload``) is counted as the requests S3 bills for it: an object of at most one
part is one ``PUT``; a larger one of ``n`` parts is ``n + 2`` ``PUT`` requests, each logged under the
object's key: the create (size 0), every part (its size), the complete (size 0, logged right after the
last part). So the log still has one ``PUT`` entry per ``PUT`` counted, and anything that classifies PUTs
by key counts a multipart segment as its requests, not as one object; an aborted multipart upload
adds one ``DELETE``.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import TypeVar

from s3stream.objectstore.protocol import DEFAULT_PART_BYTES, Body, ByteRange, ListEntry, ObjectMeta, ObjectStore
from s3stream.objectstore.upload import ForwardedUpload

__all__ = ["KINDS", "RecordingObjectStore"]

KINDS = ("PUT", "GET", "HEAD", "LIST", "DELETE")
T = TypeVar("T")
_LIST_PAGE = 1000


class RecordingObjectStore:
    """Delegates to ``inner`` and records every request."""

    def __init__(self, inner: ObjectStore, *, log_size: int = 10_000) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(KINDS, 0)
        self._log: deque[tuple[str, str, int]] = deque(maxlen=log_size)
        self._bytes_written = 0
        self._bytes_read = 0

    @property
    def url(self) -> str:
        return self._inner.url

    @property
    def inner(self) -> ObjectStore:
        """The wrapped store."""
        return self._inner

    def counts(self) -> dict[str, int]:
        """Requests so far by kind (every kind present, zero included)."""
        with self._lock:
            return dict(self._counts)

    @property
    def bytes_written(self) -> int:
        """Bytes sent in PUT bodies."""
        with self._lock:
            return self._bytes_written

    @property
    def bytes_read(self) -> int:
        """Bytes received in GET bodies."""
        with self._lock:
            return self._bytes_read

    @property
    def log(self) -> list[tuple[str, str, int]]:
        """The most recent requests as ``(op, key, size)`` (oldest first, bounded)."""
        with self._lock:
            return list(self._log)

    def reset(self) -> None:
        """Forget counts, bytes and the log."""
        with self._lock:
            self._counts = dict.fromkeys(KINDS, 0)
            self._log.clear()
            self._bytes_written = self._bytes_read = 0

    def _record(self, op: str, key: str, size: int = 0, *, written: int = 0, read: int = 0) -> None:
        with self._lock:
            self._counts[op] += 1
            self._log.append((op, key, size))
            self._bytes_written += written
            self._bytes_read += read

    def put(self, key: str, data: bytes | bytearray | memoryview, *, if_none_match: bool = False,
            if_match: str | None = None) -> ObjectMeta:
        size = memoryview(data).nbytes
        self._record("PUT", key, size, written=size)
        return self._inner.put(key, data, if_none_match=if_none_match, if_match=if_match)

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        return self._recorded_get(key, lambda: self._inner.get(key, byte_range))

    def get_view(self, key: str, byte_range: ByteRange | None = None) -> memoryview:
        return self._recorded_get(key, lambda: self._inner.get_view(key, byte_range))

    def _recorded_get(self, key: str, get: Callable[[], Body]) -> Body:
        try:
            data = get()
        except BaseException:
            self._record("GET", key)
            raise
        self._record("GET", key, len(data), read=len(data))
        return data

    def head(self, key: str) -> ObjectMeta:
        self._record("HEAD", key)
        return self._inner.head(key)

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ListEntry]:
        return self._counted_list(prefix, self._inner.list(prefix, start_after=start_after))

    def _counted_list(self, prefix: str, entries: Iterator[ListEntry]) -> Iterator[ListEntry]:
        self._record("LIST", prefix)
        for index, entry in enumerate(entries):
            if index and index % _LIST_PAGE == 0:
                self._record("LIST", prefix)  # the next page is one more request
            yield entry

    def delete(self, key: str) -> None:
        self._record("DELETE", key)
        self._inner.delete(key)

    def open_upload(self, key: str, *, part_bytes: int = DEFAULT_PART_BYTES) -> ForwardedUpload:
        return ForwardedUpload(key, part_bytes, put=lambda data: self.put(key, data),
                               inner=self._inner.open_upload(key, part_bytes=part_bytes), request=self._upload_request)

    def _upload_request(self, key: str, kind: str, nbytes: int, fn: Callable[[], T]) -> T:
        if kind == "abort":
            self._record("DELETE", key)
        elif kind == "complete":
            self._record("PUT", key, nbytes, written=nbytes)  # the last part
            self._record("PUT", key)
        else:
            self._record("PUT", key, nbytes, written=nbytes)
        return fn()

    def close(self) -> None:
        self._inner.close()
