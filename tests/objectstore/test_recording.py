"""RecordingObjectStore: the S3 cost model (requests by kind, bytes, LIST pages) is counted exactly."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from s3stream.base.errors import ObjectNotFound
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.objectstore.protocol import ByteRange
from s3stream.testing import RecordingObjectStore


def test_counts_requests_and_bytes_by_kind() -> None:
    store = RecordingObjectStore(MemoryObjectStore())
    store.put("a", b"12345")
    store.put("b", bytearray(b"678"))
    assert store.get("a") == b"12345"
    assert store.get("a", ByteRange(1, 3)) == b"23"
    store.head("b")
    list(store.list(""))
    store.delete("a")
    with pytest.raises(ObjectNotFound):
        store.get("a")  # failed requests are billed too
    assert store.counts() == {"PUT": 2, "GET": 3, "HEAD": 1, "LIST": 1, "DELETE": 1}
    assert (store.bytes_written, store.bytes_read) == (8, 7)
    assert store.log[:3] == [("PUT", "a", 5), ("PUT", "b", 3), ("GET", "a", 5)]


def test_list_counts_one_request_per_page_of_1000() -> None:
    inner = MemoryObjectStore()
    for i in range(2001):
        inner.put(f"k/{i:05d}", b"")
    store = RecordingObjectStore(inner)
    assert len(list(store.list("k/"))) == 2001
    assert store.counts()["LIST"] == 3
    store.reset()
    assert len(list(store.list("k/", start_after="k/01000"))) == 1000
    assert store.counts()["LIST"] == 1
    store.reset()
    it = store.list("k/")
    next(it)  # a caller that stops early pays for the pages it fetched
    assert store.counts()["LIST"] == 1
    store.reset()
    assert list(store.list("none/")) == []
    assert store.counts()["LIST"] == 1


def test_log_is_bounded_and_reset_clears_everything() -> None:
    store = RecordingObjectStore(MemoryObjectStore(), log_size=3)
    for i in range(5):
        store.put(f"k{i}", b"x")
    assert [key for _, key, _ in store.log] == ["k2", "k3", "k4"]
    store.reset()
    assert store.counts() == dict.fromkeys(("PUT", "GET", "HEAD", "LIST", "DELETE"), 0)
    assert (store.bytes_written, store.bytes_read, store.log) == (0, 0, [])


def test_counting_is_thread_safe() -> None:
    store = RecordingObjectStore(MemoryObjectStore())
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda i: store.put(f"k/{i}", b"ab"), range(800)))
    assert store.counts()["PUT"] == 800
    assert store.bytes_written == 1600
