"""Streamed uploads through the backends' part cutting and the wrappers' forwarding.

The contract suite checks what a caller sees; this checks what only the implementations can get wrong:
parts cut exactly as the protocol says, wrappers in lockstep with the inner upload (no second buffered
part), each S3 request of an upload counted, paced and faultable, and no temp file outliving an upload.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter

from s3stream.base.errors import InvalidRequest, ObjectNotFound, TransientError
from s3stream.base.ids import IdSource
from s3stream.objectstore.directwrite import STAGING_BYTES
from s3stream.objectstore.local import LocalObjectStore
from s3stream.objectstore.local_upload import LOCAL_SYNC_BYTES
from s3stream.objectstore.memory import MemoryObjectStore, _MemoryUpload
from s3stream.objectstore.metered import MeteredObjectStore
from s3stream.objectstore.prefixed import PrefixedObjectStore
from s3stream.objectstore.protocol import ObjectMeta
from s3stream.testing import FaultRule, FaultyObjectStore, LatencyObjectStore, RecordingObjectStore
from s3stream.testing.forwarding import ForwardingObjectStore

from .support import SleepLog

P = 1000  # part size of these tests (only the S3 backend insists on 5 MiB)


def data_of(size: int) -> bytes:
    return (bytes(range(251)) * (size // 251 + 1))[:size]


class SpyMemory(MemoryObjectStore):
    """A memory store whose uploads log every part they send (number, size)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[int, int]] = []

    def open_upload(self, key: str, *, part_bytes: int = P) -> _MemoryUpload:
        spy = self

        class Upload(_MemoryUpload):
            def _send_part(self, number: int, data: bytearray | memoryview) -> None:
                spy.sent.append((number, len(data)))
                super()._send_part(number, data)

        return Upload(self, key, part_bytes)


def _wait_for_size(path: Path, size: int) -> None:
    """Full staging buffers are written behind the caller: wait (bounded) until the file has ``size`` bytes."""
    deadline = time.monotonic() + 10
    while path.stat().st_size < size and time.monotonic() < deadline:
        time.sleep(0.005)
    assert path.stat().st_size == size


def upload(store: object, key: str, data: bytes, step: int) -> ObjectMeta:
    with store.open_upload(key, part_bytes=P) as up:  # type: ignore[attr-defined]
        for at in range(0, len(data), step):
            up.write(data[at:at + step])
        return up.complete()  # type: ignore[no-any-return]


@pytest.mark.parametrize(("size", "parts"), [(0, []), (1, []), (P, []), (P + 1, [P, 1]),
                                             (2 * P, [P, P]), (2 * P + 7, [P, P, 7])])
@pytest.mark.parametrize("step", [1, 333, P, 10 * P])
def test_backend_cuts_parts_of_exactly_part_bytes(size: int, parts: list[int], step: int) -> None:
    """An object of at most one part is one put; else parts of P bytes, the last never empty."""
    store = SpyMemory()
    data = data_of(size)
    assert upload(store, "k", data, step).size == size
    assert store.get("k") == data
    assert [n for n, _ in store.sent] == list(range(1, len(parts) + 1))
    assert [s for _, s in store.sent] == parts


@pytest.mark.parametrize("step", [1, 400, P + 1, 5 * P])
def test_wrapper_forwards_in_lockstep_with_the_inner_parts(step: int) -> None:
    """Each forwarded part request is exactly one part sent by the inner upload, never buffered twice."""
    inner = SpyMemory()
    store = RecordingObjectStore(inner)
    data = data_of(3 * P + 5)
    with store.open_upload("k", part_bytes=P) as up:
        for at in range(0, len(data), step):
            up.write(data[at:at + step])
            part_requests = max(0, store.counts()["PUT"] - 1)  # all but the create
            assert len(inner.sent) == part_requests
            assert up._buf is None or len(up._buf) <= P  # only the first part, before the object needs parts
        up.complete()
    assert inner.get("k") == data
    assert [s for _, s in inner.sent] == [P, P, P, 5]


def test_recording_counts_each_request_of_a_multipart_upload() -> None:
    store = RecordingObjectStore(MemoryObjectStore())
    upload(store, "small", data_of(P), 100)
    assert store.counts()["PUT"] == 1
    assert store.log == [("PUT", "small", P)]
    store.reset()
    upload(store, "big", data_of(2 * P + 7), 300)
    assert store.counts()["PUT"] == 5  # create, 3 parts, complete
    assert store.log == [("PUT", "big", 0), ("PUT", "big", P), ("PUT", "big", P), ("PUT", "big", 7),
                         ("PUT", "big", 0)]
    assert store.bytes_written == 2 * P + 7
    store.reset()
    with store.open_upload("gone", part_bytes=P) as up:
        up.write(data_of(P + 1))
        up.abort()
    assert store.counts() == {"PUT": 2, "GET": 0, "HEAD": 0, "LIST": 0, "DELETE": 1}


def test_latency_pays_one_put_per_request_with_transfer() -> None:
    clock = SleepLog()
    store = LatencyObjectStore(MemoryObjectStore(), "s3-standard", clock=clock, ids=IdSource(1))
    upload(store, "small", data_of(10), 10)
    assert len(clock.sleeps) == 1
    clock.sleeps.clear()
    upload(store, "big", data_of(2 * P + 7), 300)
    assert len(clock.sleeps) == 5  # create, 2 parts, last part, complete


def test_faults_hit_parts_and_complete_and_leave_nothing_visible() -> None:
    inner = MemoryObjectStore()
    store = FaultyObjectStore(inner, ids=IdSource(3))
    up = store.open_upload("k", part_bytes=P)
    up.write(data_of(P))
    store.set_rules([FaultRule("put", "k", "error", count=1)])
    with pytest.raises(TransientError):
        up.write(b"x")  # the create of the multipart upload
    with pytest.raises(InvalidRequest):
        up.write(b"y")  # a failed write aborted the upload
    store.set_rules([])
    up = store.open_upload("k", part_bytes=P)
    up.write(data_of(3 * P))
    store.set_rules([FaultRule("put", "k", "error", count=1)])
    with pytest.raises(TransientError):
        up.complete()
    with pytest.raises(ObjectNotFound):
        inner.get("k")
    store.set_rules([])
    up = store.open_upload("k", part_bytes=P)
    up.write(data_of(3 * P))
    store.set_rules([FaultRule("put", "k", "lost_response", count=1)])
    with pytest.raises(TransientError):
        up.complete()
    assert inner.get("k") == data_of(3 * P)  # done, but its response was lost
    assert store.injected() == {"error": 2, "lost_response": 1}


def test_prefixed_and_forwarding_wrappers() -> None:
    inner = MemoryObjectStore()
    meta = upload(PrefixedObjectStore(inner, "pre"), "k", data_of(2 * P + 1), 700)
    assert meta.key == "k"
    assert inner.get("pre/k") == data_of(2 * P + 1)

    class SeesPuts(ForwardingObjectStore):
        def __init__(self) -> None:
            super().__init__(MemoryObjectStore())
            self.puts: list[str] = []

        def put(self, key: str, data: bytes | bytearray | memoryview, *, if_none_match: bool = False,
                if_match: str | None = None) -> ObjectMeta:
            self.puts.append(key)
            return super().put(key, data, if_none_match=if_none_match, if_match=if_match)

    hooked = SeesPuts()
    upload(hooked, "small", data_of(P), 100)
    upload(hooked, "big", data_of(P + 1), 100)
    assert hooked.puts == ["small"]  # a one-part upload is a put to whoever intercepts put
    assert hooked.get("big") == data_of(P + 1)


@pytest.mark.parametrize("wrap", ["prefixed", "metered"])
def test_wrappers_that_do_not_observe_put_stream_every_byte_to_the_inner_upload(tmp_path: Path, wrap: str) -> None:
    """No first part buffered in the wrapper: a segment's bytes (a part is 128 MiB) reach the local file as
    they come, and a small object is still one put (counted as one by the metering wrapper)."""
    registry = CollectorRegistry()
    requests = Counter("req", "requests", ["op"], registry=registry)
    errors = Counter("err", "errors", ["op", "kind"], registry=registry)
    local = LocalObjectStore(tmp_path / "root")
    store = (PrefixedObjectStore(local, "pre") if wrap == "prefixed" else
             MeteredObjectStore(local, requests=requests, errors=errors))
    size = STAGING_BYTES + 5
    with store.open_upload("seg", part_bytes=1 << 30) as up:
        up.write(data_of(size))
        (temp,) = (tmp_path / "root" / ".tmp").iterdir()
        _wait_for_size(temp, STAGING_BYTES)  # the local upload holds only the unaligned tail
        up.complete()
    assert store.get("seg") == data_of(size)
    with store.open_upload("gone", part_bytes=P) as up:
        up.write(data_of(P + 1))  # sent as a part: the abort is a request too
    ops = {op: registry.get_sample_value("req_total", {"op": op}) for op in
           ("put", "create_multipart", "upload_part", "abort_multipart", "get")}
    if wrap == "metered":
        assert ops == {"put": 1, "create_multipart": 1, "upload_part": 1, "abort_multipart": 1, "get": 1}
    assert list((tmp_path / "root" / ".tmp").iterdir()) == []
    with pytest.raises(ObjectNotFound):
        store.get("gone")


def test_local_upload_streams_into_one_temp_file_and_cleans_up(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "root")
    tmp_dir = tmp_path / "root" / ".tmp"
    up = store.open_upload("a/b", part_bytes=P)
    up.write(data_of(3 * P))
    assert len(list(tmp_dir.iterdir())) == 1
    up.abort()
    assert list(tmp_dir.iterdir()) == []
    meta = upload(store, "a/b", data_of(3 * P + 1), 512)
    assert list(tmp_dir.iterdir()) == []
    assert store.get("a/b") == data_of(3 * P + 1)
    assert store.head("a/b").etag == meta.etag
    with pytest.raises(InvalidRequest):
        store.open_upload(".tmp/x")
    with pytest.raises(InvalidRequest):
        store.open_upload("k", part_bytes=0)


def test_local_upload_writes_bytes_as_they_come_whatever_the_part_size(tmp_path: Path) -> None:
    """A file has no minimum part: however large the caller's parts, at most one staging buffer waits in
    memory (and the disk takes the bytes while the writer produces the next)."""
    store = LocalObjectStore(tmp_path / "root")
    tmp_dir = tmp_path / "root" / ".tmp"
    size = 2 * LOCAL_SYNC_BYTES + 5
    with store.open_upload("big", part_bytes=16 * LOCAL_SYNC_BYTES) as up:
        up.write(data_of(size))
        (temp,) = tmp_dir.iterdir()
        _wait_for_size(temp, size - size % STAGING_BYTES)
        up.complete()
    assert store.get("big") == data_of(size)
    assert list(tmp_dir.iterdir()) == []
