"""The two implementations behind ``ObjectStore.open_upload``: backends cut parts, wrappers forward them.

* :class:`PartedUpload` is the base of the S3 and memory backends' uploads: it buffers at most one part, sends each
  part once a byte beyond it is written (so the last part is never empty and an object of at most one
  part is one plain PUT), and aborts on any failure. A backend supplies four steps: put a whole small
  object, send part ``n``, finish after the last part, discard.
* :class:`ForwardedUpload` is what a wrapper store (prefix, latency, faults, recording, metering, the
  tests' hooks) returns. A wrapper that observes ``put`` passes its ``put``: an object of at most one part
  goes through it, so the wrapper sees it exactly like any small PUT (its first part is buffered until it
  is known to be more); a wrapper that does not (prefix, metering) passes none, and every byte streams to
  the inner store's upload as it comes (a local directory writes it to its file at once, where a buffer
  of up to a part, 128 MiB for segments, cost a copy and fresh pages for every byte of a cleaner's
  output). Past the first part, bytes pass through unbuffered either way, cut so that each forwarded piece
  makes the inner upload send exactly one part. Each S3 request it stands for (``create``, ``part``,
  ``complete`` carrying the last part, ``abort``, and ``put`` for a streamed object of at most one part)
  goes through the wrapper's :class:`RequestHook`. The parts are where the inner upload cuts them because
  both follow the protocol's rule, so the wrappers never hold a second copy of a part.
"""

from __future__ import annotations

import dataclasses
import functools
from abc import ABC, abstractmethod
from collections.abc import Callable
from types import TracebackType
from typing import Protocol, Self, TypeVar

from s3stream.base.errors import InvalidRequest
from s3stream.objectstore.keys import validate_key
from s3stream.objectstore.protocol import ObjectMeta, Upload

__all__ = ["ForwardedUpload", "PartedUpload", "RequestHook", "UploadState", "check_part_bytes"]

T = TypeVar("T")


def check_part_bytes(part_bytes: int) -> None:
    if part_bytes < 1:
        raise InvalidRequest(f"part_bytes must be an integer >= 1, got {part_bytes!r}")


class UploadState:
    """The open / completed / aborted life cycle shared by both upload kinds."""

    def __init__(self, key: str) -> None:
        self._key = key
        self._state = "open"

    @property
    def key(self) -> str:
        return self._key

    def _check_open(self, verb: str) -> None:
        if self._state != "open":
            raise InvalidRequest(f"upload of {self._key!r}: {verb} after the upload was {self._state}")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._state == "open":
            self.abort()

    def abort(self) -> None:
        raise NotImplementedError


class PartedUpload(UploadState, ABC):
    """A backend's upload: buffers up to one part; the subclass sends parts and publishes the object."""

    def __init__(self, key: str, part_bytes: int) -> None:
        check_part_bytes(part_bytes)
        super().__init__(key)
        self._part_bytes = part_bytes
        self._buf = bytearray()
        self._parts = 0  # parts sent
        self._size = 0  # bytes accepted

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._check_open("write")
        view = memoryview(data).cast("B")
        try:
            while len(self._buf) + len(view) > self._part_bytes:
                if self._buf:  # fill the buffered part, then send it
                    take = self._part_bytes - len(self._buf)
                    self._buf += view[:take]
                    view = view[take:]
                    part, self._buf = self._buf, bytearray()
                    self._send(part)
                    del part  # before the buffer fills again
                else:  # a whole part inside ``data``: send it without copying it into the buffer
                    self._send(view[:self._part_bytes])
                    view = view[self._part_bytes:]
            self._buf += view
        except BaseException:
            self.abort()
            raise
        self._size += memoryview(data).nbytes

    def _send(self, part: bytearray | memoryview) -> None:
        self._parts += 1
        self._send_part(self._parts, part)

    def complete(self) -> ObjectMeta:
        self._check_open("complete")
        try:
            if self._parts == 0:
                meta = self._put_whole(self._buf)  # no copy: the buffer is the body
            else:
                last, self._buf = self._buf, bytearray()
                self._send(last)  # never empty: a part is sent only once a byte follows it
                meta = self._finish(self._parts, self._size)
        except BaseException:
            self.abort()
            raise
        self._state = "completed"
        self._buf = bytearray()
        return meta

    def abort(self) -> None:
        if self._state != "open":
            return
        self._state = "aborted"
        self._buf = bytearray()
        self._discard()

    @abstractmethod
    def _put_whole(self, data: bytearray) -> ObjectMeta:
        """Write an object of at most one part with one plain PUT (``data`` is only valid during the call)."""

    @abstractmethod
    def _send_part(self, number: int, data: bytearray | memoryview) -> None:
        """Send part ``number`` (1-based); ``data`` is only valid during the call."""

    @abstractmethod
    def _finish(self, parts: int, size: int) -> ObjectMeta:
        """Make the object of ``parts`` parts and ``size`` bytes visible."""

    @abstractmethod
    def _discard(self) -> None:
        """Drop whatever was sent (called once, also when nothing was); must not raise."""


class RequestHook(Protocol):
    """How a wrapper sees one request of a forwarded upload: it must call ``fn`` (the request) and return
    its result, or raise instead. ``kind``: ``create`` (0 bytes), ``part`` (``nbytes`` of data),
    ``complete`` (``nbytes``: the last part's size, sent with it), ``abort``, and ``put`` (``nbytes``: the
    whole object of at most one part, streamed without a ``put`` of the wrapper's)."""

    def __call__(self, key: str, kind: str, nbytes: int, fn: Callable[[], T]) -> T: ...


def _plain(key: str, kind: str, nbytes: int, fn: Callable[[], T]) -> T:
    return fn()


class ForwardedUpload(UploadState):
    """A wrapper's upload: small objects through ``put`` (if given), larger ones (all, without ``put``)
    streamed to ``inner`` (see the module docstring). ``inner`` is opened at once so its key and part size
    are checked up front."""

    def __init__(self, key: str, part_bytes: int, *, put: Callable[[bytearray], ObjectMeta] | None, inner: Upload,
                 request: RequestHook = _plain) -> None:
        super().__init__(validate_key(key))
        check_part_bytes(part_bytes)
        self._part_bytes = part_bytes
        self._put = put
        self._inner = inner
        self._request = request
        # the first part while it may be the whole object (None: streaming to the inner upload)
        self._buf: bytearray | None = bytearray() if put is not None else None
        self._created = False  # the ``create`` request was made: the object is sent in parts
        self._sent = 0  # parts the inner upload has sent
        self._size = 0  # bytes forwarded to the inner upload

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._check_open("write")
        view = memoryview(data).cast("B")
        try:
            if self._buf is not None:
                if len(self._buf) + len(view) <= self._part_bytes:
                    self._buf += view
                    return
                first, self._buf = self._buf, None
                if first:
                    # hand over exactly one part and the byte after it: the inner upload sends that part
                    # straight from ``first`` and keeps one byte, so no part is ever held twice
                    take = self._part_bytes + 1 - len(first)
                    first += view[:take]
                    view = view[take:]
                    self._forward(memoryview(first))
                del first
            self._forward(view)
        except BaseException:
            self.abort()
            raise

    def _forward(self, view: memoryview) -> None:
        """Pass ``view`` on, split after each byte that makes the inner upload send its next part."""
        while view:
            take = (self._sent + 1) * self._part_bytes - self._size + 1
            if len(view) < take:
                self._inner.write(view)
                self._size += len(view)
                return
            piece, view = view[:take], view[take:]
            if not self._created:
                self._created = True
                self._request(self._key, "create", 0, lambda: None)
            self._sent += 1
            self._request(self._key, "part", self._part_bytes, functools.partial(self._inner.write, piece))
            self._size += take

    def complete(self) -> ObjectMeta:
        self._check_open("complete")
        try:
            if self._buf is not None:
                assert self._put is not None
                meta = self._put(self._buf)
                self._inner.abort()  # never sent anything: nothing to discard remotely
            elif not self._created:  # streamed, at most one part: the inner upload makes it one PUT
                meta = self._request(self._key, "put", self._size, self._inner.complete)
            else:
                last = self._size - self._sent * self._part_bytes
                meta = self._request(self._key, "complete", last, self._inner.complete)
        except BaseException:
            self.abort()
            raise
        self._state = "completed"
        self._buf = None
        return meta if meta.key == self._key else dataclasses.replace(meta, key=self._key)

    def abort(self) -> None:
        if self._state != "open":
            return
        self._state = "aborted"
        self._buf = None
        if self._created:
            self._request(self._key, "abort", 0, self._inner.abort)
        else:
            self._inner.abort()
