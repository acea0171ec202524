"""An in-memory ObjectStore: the test double, fully atomic, with a shared namespace per name."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from s3stream.base.clock import Clock, SystemClock
from s3stream.base.errors import ObjectNotFound, PreconditionFailed
from s3stream.objectstore.etag import content_etag
from s3stream.objectstore.keys import validate_key, validate_prefix
from s3stream.objectstore.protocol import DEFAULT_PART_BYTES, Body, ByteRange, ListEntry, ObjectMeta
from s3stream.objectstore.upload import PartedUpload

__all__ = ["MemoryObjectStore"]


@dataclass(frozen=True, slots=True)
class _Obj:
    data: bytes
    etag: str
    last_modified_ms: int


class _Namespace:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.objects: dict[str, _Obj] = {}
        self.sorted_keys: list[str] = []


_NAMESPACES: dict[str, _Namespace] = {}
_NAMESPACES_LOCK = threading.Lock()


class MemoryObjectStore:
    """Objects in a dict. Stores opened with the same ``name`` share data (like one bucket)."""

    def __init__(self, name: str = "", *, clock: Clock | None = None) -> None:
        self._name = name
        self._clock = clock or SystemClock()
        if name:
            with _NAMESPACES_LOCK:
                self._ns = _NAMESPACES.setdefault(name, _Namespace())
        else:
            self._ns = _Namespace()

    @staticmethod
    def drop_namespace(name: str) -> None:
        """Forget a named namespace (tests use it to start clean)."""
        with _NAMESPACES_LOCK:
            _NAMESPACES.pop(name, None)

    @property
    def url(self) -> str:
        return f"memory://{self._name}"

    def put(self, key: str, data: bytes | bytearray | memoryview, *, if_none_match: bool = False,
            if_match: str | None = None) -> ObjectMeta:
        validate_key(key)
        body = bytes(data)
        etag = content_etag(body)
        obj = _Obj(body, etag, self._clock.now_ms())
        ns = self._ns
        with ns.lock:
            cur = ns.objects.get(key)
            if if_none_match and cur is not None:
                raise PreconditionFailed(f"{key} already exists", key=key)
            if if_match is not None and (cur is None or cur.etag != if_match):
                raise PreconditionFailed(f"{key}: ETag does not match", key=key)
            if cur is None:
                bisect.insort(ns.sorted_keys, key)
            ns.objects[key] = obj
        return ObjectMeta(key, len(body), obj.etag, obj.last_modified_ms)

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        return _clip(self._object(key).data, byte_range)

    def get_view(self, key: str, byte_range: ByteRange | None = None) -> memoryview:
        """The stored bytes themselves (immutable: a later put replaces the object, never its bytes)."""
        return _clip(memoryview(self._object(key).data), byte_range)

    def get_views(self, key: str, ranges: Sequence[ByteRange]) -> list[memoryview]:
        """The ranges of one object: views of its stored bytes."""
        data = memoryview(self._object(key).data)
        return [_clip(data, r) for r in ranges]

    def _object(self, key: str) -> _Obj:
        validate_key(key)
        with self._ns.lock:
            obj = self._ns.objects.get(key)
        if obj is None:
            raise ObjectNotFound(f"{key} not found", key=key)
        return obj

    def head(self, key: str) -> ObjectMeta:
        validate_key(key)
        with self._ns.lock:
            obj = self._ns.objects.get(key)
        if obj is None:
            raise ObjectNotFound(f"{key} not found", key=key)
        return ObjectMeta(key, len(obj.data), obj.etag, obj.last_modified_ms)

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ListEntry]:
        validate_prefix(prefix)
        with self._ns.lock:
            keys = self._ns.sorted_keys
            lo = bisect.bisect_left(keys, prefix)
            if start_after is not None:
                lo = max(lo, bisect.bisect_right(keys, start_after))
            out: list[ListEntry] = []
            for key in keys[lo:]:
                if not key.startswith(prefix):
                    break
                obj = self._ns.objects[key]
                out.append(ListEntry(key, len(obj.data), obj.last_modified_ms))
        return iter(out)

    def delete(self, key: str) -> None:
        validate_key(key)
        with self._ns.lock:
            if self._ns.objects.pop(key, None) is not None:
                idx = bisect.bisect_left(self._ns.sorted_keys, key)
                del self._ns.sorted_keys[idx]

    def open_upload(self, key: str, *, part_bytes: int = DEFAULT_PART_BYTES) -> _MemoryUpload:
        return _MemoryUpload(self, validate_key(key), part_bytes)

    def close(self) -> None:
        pass


class _MemoryUpload(PartedUpload):
    """Collects the parts, then one put: the object lives in memory anyway."""

    def __init__(self, store: MemoryObjectStore, key: str, part_bytes: int) -> None:
        super().__init__(key, part_bytes)
        self._store = store
        self._chunks: list[bytes] = []

    def _put_whole(self, data: bytearray) -> ObjectMeta:
        return self._store.put(self.key, data)

    def _send_part(self, number: int, data: bytearray | memoryview) -> None:
        self._chunks.append(bytes(data))

    def _finish(self, parts: int, size: int) -> ObjectMeta:
        data, self._chunks = b"".join(self._chunks), []
        return self._store.put(self.key, data)

    def _discard(self) -> None:
        self._chunks = []


def _clip(data: Body, byte_range: ByteRange | None) -> Body:
    if byte_range is None:
        return data
    start, end = byte_range.resolve(len(data))
    return data[start:end]
