"""The store's object store and buffer metrics: what the dashboard's S3 and buffer panels read."""

from __future__ import annotations

from pathlib import Path

import pytest

import s3stream
from s3stream import Record
from s3stream.base.errors import ObjectNotFound
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.objectstore.metered import MeteredObjectStore


def _value(store: s3stream.Store, name: str, **labels: str) -> float:
    return store.metrics_registry.get_sample_value(name, labels) or 0.0


@pytest.mark.parametrize("scheme", ["memory", "file"])
def test_requests_and_errors_are_counted_by_op_and_kind(scheme: str, mem_url: str, tmp_path: Path) -> None:
    url = mem_url if scheme == "memory" else f"file://{tmp_path / 'bucket'}"
    with s3stream.open_store(url, wal_dir=str(tmp_path / "wal"), probe=False) as store:
        store.create_topic("t")
        store.partition("t", 0).append([Record(b"k", b"v" * 100) for _ in range(10)])
        store.flush()
        assert _value(store, "s3stream_object_store_requests_total", op="put") > 0
        assert _value(store, "s3stream_object_store_requests_total", op="list") > 0
        gets = _value(store, "s3stream_object_store_requests_total", op="get")
        missing = _value(store, "s3stream_object_store_errors_total", op="get", kind="not_found")
        with pytest.raises(ObjectNotFound):
            store.object_store.get("no/such/object")
        assert _value(store, "s3stream_object_store_requests_total", op="get") == gets + 1 > 1
        assert _value(store, "s3stream_object_store_errors_total", op="get", kind="not_found") == missing + 1
        # every op has a series from the start, so rate() and the error ratio have a denominator
        assert _value(store, "s3stream_object_store_requests_total", op="upload_part") == 0.0
        assert store.metrics_registry.get_sample_value("s3stream_object_store_requests_total",
                                                       {"op": "upload_part"}) is not None


def test_the_runtime_meters_its_store_once(mem_url: str, tmp_path: Path) -> None:
    with s3stream.open_store(mem_url, wal_dir=str(tmp_path / "a")) as first:
        assert isinstance(first.object_store, MeteredObjectStore)
        with s3stream.open_store(mem_url, object_store=first.object_store, wal_dir=str(tmp_path / "b")) as second:
            inner = second.object_store
            assert isinstance(inner, MeteredObjectStore) and not isinstance(inner.inner, MeteredObjectStore)
            before = _value(first, "s3stream_object_store_requests_total", op="head")
            with pytest.raises(ObjectNotFound):
                second.object_store.head("missing")
            assert _value(second, "s3stream_object_store_errors_total", op="head", kind="not_found") == 1
            assert _value(first, "s3stream_object_store_requests_total", op="head") == before  # counted once


def test_buffered_bytes_gauge_follows_the_uploader(mem_url: str, tmp_path: Path) -> None:
    with s3stream.open_store(mem_url, wal_dir=str(tmp_path / "wal"), flush_interval_ms=600_000,
                             wal_fsync=False) as store:
        assert _value(store, "s3stream_buffered_bytes") == 0  # no node yet
        store.create_topic("t")
        store.partition("t", 0).append([Record(b"k", b"v" * 1000)])
        assert _value(store, "s3stream_buffered_bytes") > 1000
        store.flush()
        assert _value(store, "s3stream_buffered_bytes") == 0


def test_two_stores_in_one_process_have_their_own_gauges(mem_url: str, tmp_path: Path) -> None:
    other_url = mem_url + "-other"
    with s3stream.open_store(mem_url, wal_dir=str(tmp_path / "a"), flush_interval_ms=600_000) as busy, \
            s3stream.open_store(other_url, wal_dir=str(tmp_path / "b"), flush_interval_ms=600_000) as idle:
        busy.create_topic("t")
        busy.partition("t", 0).append([Record(b"k", b"v" * 1000)])
        assert _value(busy, "s3stream_buffered_bytes") > 0
        assert _value(idle, "s3stream_buffered_bytes") == 0
    MemoryObjectStore.drop_namespace(other_url.removeprefix("memory://"))
