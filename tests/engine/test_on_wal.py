"""``append_arrow_async(on_wal=...)``: the offsets of an append once it is fsynced, before an ack=s3 future."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pytest

import s3stream
from s3stream.base.errors import InvalidRecord
from s3stream.base.records import AppendResult
from s3stream.objectstore.forwarding import ForwardingObjectStore
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.objectstore.protocol import ObjectMeta

from .helpers import open_mem


class HeldWalPuts(ForwardingObjectStore):
    """While ``holding``, WAL-object PUTs wait until :meth:`release` (the bucket acknowledges nothing)."""

    def __init__(self, inner: MemoryObjectStore) -> None:
        super().__init__(inner)
        self.open = threading.Event()
        self.holding = False

    def release(self) -> None:
        self.open.set()

    def put(self, key: str, data: bytes | bytearray | memoryview, *, if_none_match: bool = False,
            if_match: str | None = None) -> ObjectMeta:
        if self.holding and key.startswith("wal/") and key.endswith(".wal"):  # a WAL object (not the node's claim)
            assert self.open.wait(30)
        return super().put(key, data, if_none_match=if_none_match, if_match=if_match)


def _batch(n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"key": [b"k%d" % i for i in range(n)], "value": [b"v"] * n})


def test_on_wal_gives_the_offsets_at_fsync_before_the_ack_s3_future(mem_url: str, tmp_path: Path) -> None:
    held = HeldWalPuts(MemoryObjectStore(mem_url.removeprefix("memory://")))
    store = open_mem(mem_url, tmp_path, object_store=held, flush_interval_ms=20)
    try:
        store.create_topic("t")
        plog = store.partition("t", 0)
        plog.append_arrow(_batch(1), ack="s3")  # the partition is claimed, the node's first object written
        held.holding = True
        seen: list[tuple[AppendResult, int]] = []
        called = threading.Event()

        def hook(result: AppendResult) -> None:
            seen.append((result, plog.high_watermark))
            called.set()

        first = plog.append_arrow_async(_batch(3), ack="s3", on_wal=hook)
        assert called.wait(10)
        assert not first.done()  # the bucket has not acknowledged it
        second = plog.append_arrow_async(_batch(2), ack="wal", on_wal=hook)
        assert second.result(10) == AppendResult(4, 5)
        held.release()
        assert first.result(10) == AppendResult(1, 3)
        assert [r for r, _ in seen] == [AppendResult(1, 3), AppendResult(4, 5)]
        assert all(hw > r.last_offset for r, hw in seen)  # the records are below the high watermark already
    finally:
        held.release()
        store.close()


def test_a_failing_hook_does_not_fail_the_append_and_a_refused_append_calls_none(mem_url: str, tmp_path: Path,
                                                                                 caplog: pytest.LogCaptureFixture
                                                                                 ) -> None:
    with s3stream.open_store(mem_url, wal_dir=str(tmp_path / "wal")) as store:
        store.create_topic("t")
        store.create_topic("c", config={"cleanup.policy": "compact"})
        calls: list[AppendResult] = []

        def broken(result: AppendResult) -> None:
            calls.append(result)
            raise RuntimeError("hook bug")

        assert store.partition("t", 0).append_arrow_async(_batch(2), ack="wal", on_wal=broken).result(10) == (
            AppendResult(0, 1))
        assert calls == [AppendResult(0, 1)]
        assert "on_wal hook" in caplog.text
        no_keys = pa.RecordBatch.from_pydict({"value": [b"v"]})
        with pytest.raises(InvalidRecord):
            store.partition("c", 0).append_arrow_async(no_keys, on_wal=calls.append)
        assert calls == [AppendResult(0, 1)]
