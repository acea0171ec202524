"""Object-store outages (issue 24, item 3): the node rides through them and recovers by itself.

An :class:`Outage` wrapper fails every request while it is down, the way ``S3ObjectStore`` fails once its
own attempts ran out (``unreachable``: a StoreAccessError) or as a 5xx would (``5xx``: TransientError).
The real-server version is ``test_outage_seaweedfs.py``.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

import s3stream
from s3stream import IdSource, ManualClock, Record
from s3stream.base import layout
from s3stream.base.crashpoints import CrashPoints
from s3stream.base.errors import (
    BufferFull,
    Fenced,
    InvalidConfig,
    StoreAccessError,
    StoreUnavailable,
    TransientError,
)
from s3stream.base.records import RECORD_SCHEMA
from s3stream.base.settings import StoreSettings
from s3stream.objectstore.forwarding import ForwardingObjectStore
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.objectstore.protocol import ObjectMeta, ObjectStore
from s3stream.testing.gated import GatedObjectStore
from s3stream.write.node import claim_namespace
from s3stream.write.uploader import BufferedAppend, FlushedObject, Uploader

from .helpers import T0, open_mem, read_all

FAST = {"upload_retry_backoff_ms": 5, "upload_retry_backoff_max_ms": 50}


class Outage(GatedObjectStore):
    """Every request fails while :meth:`down`; records the bodies tried for each WAL-object key."""

    def __init__(self, inner: ObjectStore, kind: str = "unreachable") -> None:
        super().__init__(inner)
        self.kind = kind
        self._down = threading.Event()
        self.lock = threading.Lock()
        self.refused: collections.Counter[str] = collections.Counter()
        self.wal_bodies: dict[str, set[bytes]] = collections.defaultdict(set)

    def down(self) -> None:
        self._down.set()

    def up(self) -> None:
        self._down.clear()

    def gate(self, op: str, key: str) -> None:
        if not self._down.is_set():
            return
        with self.lock:
            self.refused[op + (" wal" if key.startswith("wal/") else "")] += 1
        if self.kind == "unreachable":
            raise StoreAccessError(f"endpoint http://127.0.0.1:9 unreachable (bucket b) after 8 attempts: "
                                   f"{op.upper()} {key!r} cannot connect: EndpointConnectionError")
        raise TransientError(f"{op.upper()} {key!r}: 503 ServiceUnavailable", key=key)

    def put(self, key: str, data: bytes | bytearray | memoryview, *, if_none_match: bool = False,
            if_match: str | None = None) -> ObjectMeta:
        if key.startswith("wal/"):
            with self.lock:
                self.wal_bodies[key].add(bytes(data))
        return super().put(key, data, if_none_match=if_none_match, if_match=if_match)


def _eventually(cond: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def _outage_store(mem_url: str, kind: str = "unreachable") -> Outage:
    return Outage(MemoryObjectStore(mem_url.removeprefix("memory://")), kind)


def _node(store: s3stream.Store) -> s3stream.engine.runtime.NodeRuntime:
    node = store.runtime.existing_node()
    assert node is not None
    return node


def _wal_seqs(inner: ObjectStore, node_id: str) -> list[int]:
    return sorted(s for e in inner.list(layout.wal_prefix(node_id)) if (s := layout.parse_seq(e.key)) is not None)


def _assert_exactly(acked: list[tuple[int, bytes]], log: s3stream.PartitionLog) -> None:
    """Every acknowledged record at its offset, exactly once, and nothing else."""
    assert [(r.offset, r.value) for r in read_all(log)] == acked


@pytest.mark.parametrize("kind", ["unreachable", "5xx"])
def test_ack_wal_appends_ride_through_an_outage_and_upload_after_it(mem_url: str, tmp_path: Path,
                                                                    kind: str) -> None:
    outage = _outage_store(mem_url, kind)
    acked: list[tuple[int, bytes]] = []
    store = open_mem(mem_url, tmp_path, object_store=outage, flush_interval_ms=20)
    try:
        store.create_topic("t")
        log = store.partition("t", 0)

        def append(i: int) -> None:
            value = b"v%04d" % i
            acked.append((log.append([Record(b"k", value)]).base_offset, value))

        for i in range(10):
            append(i)
        store.flush()
        node = _node(store)
        trims: list[int] = []
        trim = node.uploader._trim_local
        node.uploader._trim_local = lambda upto: (trims.append(upto), trim(upto))[1]  # type: ignore[method-assign]
        outage.down()
        for i in range(10, 40):
            append(i)
        # far more failed PUTs than the old retry budget (the node used to stop at the first StoreAccessError)
        assert _eventually(lambda: outage.refused["put wal"] >= 6)
        for i in range(40, 60):
            append(i)  # still acknowledged from the local WAL
        assert node.uploader.failing_for_s > 0
        assert trims == []  # the local WAL is trimmed only up to what is committed: nothing yet
        node.uploader.check()  # an outage is not a failure of the node
        outage.up()
        node.uploader.flush(timeout_s=30)  # the same object recovers by itself
        assert node.uploader.failing_for_s == 0.0 and node.uploader.buffered_bytes == 0
        assert trims and max(trims) < node.wal.next_seq
        _assert_exactly(acked, log)
        append(60)
        store.flush()
        seqs = _wal_seqs(outage.inner, node.node_id)
        assert seqs == list(range(seqs[0], seqs[-1] + 1))  # dense: no failed sequence number was skipped
        # every retry of a WAL object sent the same bytes under the same key
        assert outage.wal_bodies and all(len(bodies) == 1 for bodies in outage.wal_bodies.values())
    finally:
        outage.up()
        store.close()
    with open_mem(mem_url, tmp_path, wal="reader") as reader:
        _assert_exactly(acked, reader.partition("t", 0))


def test_a_full_buffer_blocks_up_to_max_block_then_raises_buffer_full(mem_url: str, tmp_path: Path) -> None:
    outage = _outage_store(mem_url)
    acked: list[tuple[int, bytes]] = []
    store = open_mem(mem_url, tmp_path, object_store=outage, flush_bytes=1000, buffer_bytes=4000,
                     max_block_ms=300, **FAST)
    try:
        store.create_topic("t")
        log = store.partition("t", 0)
        log.append([Record(b"k", b"first")])
        acked.append((0, b"first"))
        store.flush()
        outage.down()
        with pytest.raises(BufferFull) as info:
            for i in range(100):
                value = b"%03d" % i + b"x" * 400
                acked.append((log.append([Record(b"k", value)]).base_offset, value))
        started = time.monotonic()
        with pytest.raises(BufferFull):  # every append waits its max.block.ms, then gives up
            log.append([Record(b"k", b"refused" + b"x" * 400)])
        assert 0.25 <= time.monotonic() - started < 5.0
        assert info.value.retriable
        assert 3 < len(acked) < 20  # acknowledged while buffer.bytes had room
        outage.up()
        assert log.log_end_offset == len(acked)  # a refused append wrote nothing
        value = b"after the outage"
        acked.append((log.append([Record(b"k", value)]).base_offset, value))
        store.flush()
        _assert_exactly(acked, log)
    finally:
        outage.up()
        store.close()


def test_ack_s3_fails_retriably_during_an_outage_and_succeeds_after(mem_url: str, tmp_path: Path) -> None:
    outage = _outage_store(mem_url)
    store = open_mem(mem_url, tmp_path, object_store=outage, ack="s3", flush_interval_ms=20, max_block_ms=1000,
                     **FAST)
    try:
        store.create_topic("t")
        log = store.partition("t", 0)
        acked = [(log.append([Record(b"k", b"before")]).base_offset, b"before")]
        node = _node(store)
        outage.down()
        with pytest.raises(StoreUnavailable) as info:
            log.append([Record(b"k", b"timed out")])  # waited max.block.ms for its WAL object
        assert info.value.retriable
        assert _eventually(lambda: node.uploader.failing_for_s >= 1.0)
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            log.append([Record(b"k", b"refused")])  # uploads failed for max.block.ms: refused at once
        assert time.monotonic() - started < 0.5  # not max.block.ms
        outage.up()  # (reads need the bucket: they check the manifest at least every second)
        assert log.log_end_offset == 2  # "timed out" is in the local WAL, "refused" nowhere
        assert _eventually(lambda: node.uploader.failing_for_s == 0.0)
        acked.append((log.append([Record(b"k", b"after")]).base_offset, b"after"))
        got = {r.offset: r.value for r in read_all(log)}
        assert all(got[offset] == value for offset, value in acked)
        # the timed-out append may still land (at-least-once, like a Kafka delivery timeout); never twice
        assert sorted(got.values()) == sorted({b"before", b"timed out", b"after"})
    finally:
        outage.up()
        store.close()


def test_a_fence_during_an_outage_still_stops_the_node_for_good(mem_url: str, tmp_path: Path) -> None:
    outage = _outage_store(mem_url)
    store = open_mem(mem_url, tmp_path, object_store=outage, flush_interval_ms=20, **FAST)
    try:
        store.create_topic("t")
        log = store.partition("t", 0)
        log.append([Record(b"k", b"a")])
        store.flush()
        node = _node(store)
        outage.down()
        log.append([Record(b"k", b"b")])
        assert _eventually(lambda: outage.refused["put wal"] >= 2)
        claim_namespace(outage.inner, node.node_id, clock=ManualClock(T0))  # another process fences it
        outage.up()
        assert _eventually(lambda: _raises(node.uploader.check, Fenced))
        for _ in range(2):  # not an outage: it never recovers
            with pytest.raises(Fenced):
                log.append([Record(b"k", b"c")])
    finally:
        outage.up()
        store.close()


def _raises(fn: Callable[[], object], exc: type[BaseException]) -> bool:
    try:
        fn()
    except exc:
        return True
    return False


def test_close_during_an_outage_returns_and_the_next_open_uploads_everything(mem_url: str, tmp_path: Path) -> None:
    outage = _outage_store(mem_url)
    acked: list[tuple[int, bytes]] = []
    store = open_mem(mem_url, tmp_path, object_store=outage, commit_timeout_ms=300, **FAST)
    try:
        store.create_topic("t")
        log = store.partition("t", 0)
        for i in range(20):
            value = b"v%d" % i
            acked.append((log.append([Record(b"k", value)]).base_offset, value))
            if i == 4:
                store.flush()
                outage.down()
        node_id = _node(store).node_id
    finally:
        started = time.monotonic()
        store.close()  # gives up on the upload after commit.timeout.ms: the local WAL keeps the records
        assert time.monotonic() - started < 10.0
    outage.up()
    with open_mem(mem_url, tmp_path, object_store=outage) as again:
        _assert_exactly(acked, again.partition("t", 0))
    seqs = _wal_seqs(outage.inner, node_id)
    assert seqs == list(range(seqs[0], seqs[-1] + 1))
    with open_mem(mem_url, tmp_path, wal="reader") as reader:
        _assert_exactly(acked, reader.partition("t", 0))


class _NoWaitClock(ManualClock):
    """Records every backoff pause instead of sleeping it."""

    def __init__(self) -> None:
        super().__init__(T0)
        self.waits: list[float] = []

    def wait(self, event: threading.Event, seconds: float | None) -> bool:
        assert seconds is not None
        self.waits.append(seconds)
        return event.is_set()


class _FailingPuts(ForwardingObjectStore):
    """The first ``n`` WAL-object PUTs fail as an unreachable endpoint does."""

    def __init__(self, inner: ObjectStore, n: int) -> None:
        super().__init__(inner)
        self.left = n
        self.tried: list[tuple[str, bytes]] = []

    def put(self, key: str, data: bytes | bytearray | memoryview, *, if_none_match: bool = False,
            if_match: str | None = None) -> ObjectMeta:
        self.tried.append((key, bytes(data)))
        if self.left > 0:
            self.left -= 1
            raise StoreAccessError(f"endpoint unreachable: PUT {key!r}")
        return super().put(key, data, if_none_match=if_none_match, if_match=if_match)


def test_upload_retries_back_off_exponentially_up_to_the_cap_with_the_same_object(mem_url: str) -> None:
    store = _FailingPuts(MemoryObjectStore(mem_url.removeprefix("memory://")), n=12)
    clock = _NoWaitClock()
    flushed: list[FlushedObject] = []
    trims: list[int] = []
    up = Uploader(store, node_id="n-test", first_seq=7, flush_interval_ms=1, flush_bytes=1 << 20,
                  buffer_bytes=1 << 20, clock=clock, ids=IdSource(3), crash_points=CrashPoints(),
                  on_flushed=lambda obj, _items: flushed.append(obj), trim_local=trims.append,
                  upload_concurrency=1, retry_backoff_ms=100, retry_backoff_max_ms=1000)
    try:
        batch = pa.RecordBatch.from_pylist([{"offset": 0, "timestamp": T0, "key": b"k", "value": b"v"}],
                                           schema=RECORD_SCHEMA)
        up.add(BufferedAppend("t/x/0", batch, 10, local_seq=41))
        up.flush(timeout_s=30)
    finally:
        up.close(5)
    assert len(clock.waits) == 12
    for i, pause in enumerate(clock.waits):
        step = min(1.0, 0.1 * 2**i)
        assert step / 2 <= pause <= step  # jittered in [0.5, 1] of the capped doubling
    assert max(clock.waits) <= 1.0 and sum(clock.waits) >= 0.5 * (0.1 + 0.2 + 0.4 + 0.8 + 8 * 1.0)
    assert {key for key, _ in store.tried} == {layout.wal_key("n-test", 7)}  # the same sequence number ...
    assert len({body for _, body in store.tried}) == 1  # ... and the same bytes, until it landed
    assert [f.seq for f in flushed] == [7] and trims == [41]  # trimmed only once committed


def test_outage_settings_parse_from_options() -> None:
    settings = StoreSettings.from_options({"max.block.ms": "0", "upload.retry.backoff.ms": "20",
                                           "upload-retry-backoff-max-ms": "100"})
    assert (settings.max_block_ms, settings.upload_retry_backoff_ms, settings.upload_retry_backoff_max_ms) == (
        0, 20, 100)
    defaults = StoreSettings()
    assert (defaults.max_block_ms, defaults.upload_retry_backoff_ms, defaults.upload_retry_backoff_max_ms) == (
        60000, 100, 5000)
    with pytest.raises(InvalidConfig, match="max_block_ms") as info:  # every ack=s3 append would time out
        StoreSettings(ack="s3", max_block_ms=250, flush_interval_ms=250)
    assert info.value.key == "max_block_ms"
