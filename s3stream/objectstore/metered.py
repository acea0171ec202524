"""A wrapper that counts every object store request and error in Prometheus counters.

The :class:`~s3stream.engine.runtime.Runtime` puts one around the store it is given, so every component of a
store (uploader, sealer, catalog, readers, GC, cleaner) is counted in that store's registry:

* ``requests{op}``: one per request, failed ones included (S3 bills them), counted when it is sent.
  ``op`` is ``put``, ``get``, ``head``, ``list`` (one per page of 1000 keys, counted as the caller
  iterates), ``delete``; a streamed upload of at most one part is one ``put``, a larger one is
  ``create_multipart``, one ``upload_part`` per part (the last one sent with ``complete_multipart``) and
  ``complete_multipart``, or ``abort_multipart`` when it is discarded.
* ``errors{op, kind}``: one per failed request, ``kind`` from the error taxonomy (:data:`ERROR_KINDS`).
  A 404 on get/head and a lost conditional put (412) are normal outcomes of the protocol and are counted
  too, under ``not_found`` and ``precondition_failed``.

A call is one request here (``get_views`` counts a ``get`` per range: what separate GETs would be): retries
inside the S3 backend are not seen. No per-byte work.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from prometheus_client import Counter

from s3stream.base.errors import ObjectNotFound, PreconditionFailed, StoreAccessError, Throttled, TransientError
from s3stream.objectstore.forwarding import ForwardingObjectStore
from s3stream.objectstore.protocol import DEFAULT_PART_BYTES, ByteRange, GetViews, ListEntry, ObjectMeta, ObjectStore
from s3stream.objectstore.upload import ForwardedUpload

__all__ = ["ERROR_KINDS", "OPS", "MeteredObjectStore", "error_kind"]

T = TypeVar("T")

OPS = ("put", "get", "head", "list", "delete", "create_multipart", "upload_part", "complete_multipart",
       "abort_multipart")
ERROR_KINDS = ("not_found", "precondition_failed", "throttled", "transient", "access", "other")
_LIST_PAGE = 1000
_UPLOAD_OPS = {"create": "create_multipart", "part": "upload_part", "complete": "complete_multipart",
               "abort": "abort_multipart", "put": "put"}


def error_kind(exc: BaseException) -> str:
    """The ``kind`` label of an object store error."""
    if isinstance(exc, ObjectNotFound):
        return "not_found"
    if isinstance(exc, PreconditionFailed):
        return "precondition_failed"
    if isinstance(exc, Throttled):
        return "throttled"
    if isinstance(exc, TransientError):
        return "transient"
    if isinstance(exc, StoreAccessError):
        return "access"
    return "other"


class MeteredObjectStore(ForwardingObjectStore):
    """Forwards to ``inner``, counting requests in ``requests`` (label ``op``) and failures in ``errors``
    (labels ``op``, ``kind``)."""

    def __init__(self, inner: ObjectStore, *, requests: Counter, errors: Counter) -> None:
        super().__init__(inner)
        self._requests = {op: requests.labels(op) for op in OPS}  # every series exists from the start
        self._errors = errors

    def _failed(self, op: str, exc: BaseException) -> None:
        self._errors.labels(op, error_kind(exc)).inc()

    def _call(self, op: str, fn: Callable[[], T], *, requests: int = 1) -> T:
        self._requests[op].inc(requests)
        try:
            return fn()
        except Exception as exc:
            self._failed(op, exc)
            raise

    def put(self, key: str, data: bytes | bytearray | memoryview, *, if_none_match: bool = False,
            if_match: str | None = None) -> ObjectMeta:
        return self._call("put", lambda: self.inner.put(key, data, if_none_match=if_none_match, if_match=if_match))

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        return self._call("get", lambda: self.inner.get(key, byte_range))

    def get_view(self, key: str, byte_range: ByteRange | None = None) -> memoryview:
        return self._call("get", lambda: self.inner.get_view(key, byte_range))

    @property
    def get_views(self) -> GetViews | None:
        """The inner store's ``get_views`` (if it has one), counting a ``get`` per range."""
        inner: GetViews | None = getattr(self.inner, "get_views", None)
        if inner is None:
            return None

        def views(key: str, ranges: Sequence[ByteRange]) -> list[memoryview]:
            return self._call("get", lambda: inner(key, ranges), requests=len(ranges))

        return views

    def head(self, key: str) -> ObjectMeta:
        return self._call("head", lambda: self.inner.head(key))

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ListEntry]:
        try:
            entries = self.inner.list(prefix, start_after=start_after)
        except Exception as exc:  # refused before any page was fetched (a bad prefix)
            self._requests["list"].inc()
            self._failed("list", exc)
            raise
        return self._counted_list(entries)

    def _counted_list(self, entries: Iterator[ListEntry]) -> Iterator[ListEntry]:
        counter = self._requests["list"]
        counter.inc()
        try:
            for index, entry in enumerate(entries):
                if index and index % _LIST_PAGE == 0:
                    counter.inc()  # the next page is one more request
                yield entry
        except Exception as exc:
            self._failed("list", exc)
            raise

    def delete(self, key: str) -> None:
        self._call("delete", lambda: self.inner.delete(key))

    def open_upload(self, key: str, *, part_bytes: int = DEFAULT_PART_BYTES) -> ForwardedUpload:
        return ForwardedUpload(key, part_bytes, put=None, inner=self.inner.open_upload(key, part_bytes=part_bytes),
                               request=self._upload_request)

    def _upload_request(self, key: str, kind: str, nbytes: int, fn: Callable[[], T]) -> T:
        op = _UPLOAD_OPS[kind]
        if kind == "complete":
            self._requests["upload_part"].inc()  # the last part goes with the complete
        return self._call(op, fn)
