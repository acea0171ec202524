"""Planning and executor reads without a JVM: snapshots, tasks, pushdown bounds, offset_delta, data loss."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from s3stream.apps.spark.options import parse_read_options
from s3stream.apps.spark.planning import Bounds, ChunkSource, plan_partition
from s3stream.apps.spark.positions import resolve_end, resolve_start
from s3stream.apps.spark.schema import OUTPUT_SCHEMA, output_batches, output_schema
from s3stream.apps.spark.segio import SegmentSource
from s3stream.apps.spark.snapshot import LogReader
from s3stream.apps.spark.tasks import read_task, task_tables
from s3stream.base.errors import ObjectNotFound, OffsetOutOfRange
from s3stream.objectstore.protocol import ByteRange, ObjectMeta, ObjectStore

from .kit import T0, expected, fill, open_at


@pytest.fixture
def topic(store_dir: Path) -> Any:
    url = f"file://{store_dir}"
    store = open_at(url, store_dir / "_wal")
    fill(store, "t", 2, 25)  # per partition: segments [0, 9], [10, 19]; offsets 20..24 in WAL objects
    yield url, store
    store.close()


def _rows(tables: Any, p: int) -> list[tuple[Any, ...]]:
    out = []
    for t in tables:
        for r in t.to_pylist():
            hdrs = tuple((h["key"], h["value"]) for h in r["headers"]) if r["headers"] else ()
            out.append((p, r["offset"], r["key"], r["value"], r["timestamp"], hdrs))
    return out


def test_plan_covers_segments_and_chunks_once(topic: Any) -> None:
    url, store = topic
    with LogReader.open(url) as reader:
        info = reader.topic("t")
        snap = reader.snapshot(info, 1)
        tasks = plan_partition(snap, 0, snap.log_end_offset, url=url)
        kinds = [type(t.sources[0]).__name__ for t in tasks]
        assert kinds == ["SegmentSource", "SegmentSource", "ChunkSource"]
        assert [(t.start_offset, t.end_offset) for t in tasks] == [(0, 10), (10, 20), (20, 25)]
        assert all(t.manifest_seq == snap.manifest_seq for t in tasks)
        got = [r for t in tasks for r in _rows(task_tables(t), 1)]
        assert got == [r for r in expected(store, "t") if r[0] == 1]


def test_bounds_prune_tasks_and_rows(topic: Any) -> None:
    url, _store = topic
    with LogReader.open(url) as reader:
        snap = reader.snapshot(reader.topic("t"), 0)
        narrow = plan_partition(snap, 0, 25, url=url, bounds=Bounds(min_offset=12, max_offset=21))
        assert [(t.start_offset, t.end_offset) for t in narrow] == [(12, 20), (20, 22)]
        late = plan_partition(snap, 0, 25, url=url, bounds=Bounds(min_timestamp=T0 + 15_000, max_timestamp=T0 + 16_000))
        assert len(late) == 2  # the first segment's max timestamp is too small: not planned
        rows = [r for t in late for r in _rows(task_tables(t), 0)]
        assert [r[1] for r in rows] == [15, 16]
        assert plan_partition(snap, 0, 25, url=url, bounds=Bounds(partitions=frozenset({1}))) == []
        assert plan_partition(snap, 0, 25, url=url, bounds=Bounds(min_offset=5, max_offset=4)) == []


def test_output_batches_match_spark_schema(topic: Any) -> None:
    url, _ = topic
    with LogReader.open(url) as reader:
        snap = reader.snapshot(reader.topic("t"), 0)
        task = plan_partition(snap, 0, 25, url=url)[0]
        batches = list(read_task(task))
    assert batches and all(b.schema.equals(OUTPUT_SCHEMA) for b in batches)
    assert batches[0].column("timestamp")[0].as_py().timestamp() == T0 / 1000
    no_headers = output_batches(pa.concat_tables(task_tables(task)), topic="t", partition=0, timestamp_type=1,
                                include_headers=False)
    assert no_headers[0].schema.equals(output_schema(include_headers=False))
    assert set(no_headers[0].column("timestampType").to_pylist()) == {1}


def test_positions_resolve_timestamps_sentinels_and_data_loss(topic: Any) -> None:
    url, store = topic
    store.partition("t", 0).delete_records(4)
    with LogReader.open(url) as reader:
        snap = reader.snapshot(reader.topic("t"), 0)
        opts = parse_read_options({"url": url, "subscribe": "t", "startingTimestamp": str(T0 + 22_500)},
                                  streaming=False)
        assert resolve_start(opts, reader, snap) == 23
        assert resolve_end(opts, reader, snap) == 25
        opts = parse_read_options({"url": url, "subscribe": "t", "startingTimestamp": str(T0 + 99_000)},
                                  streaming=False)
        with pytest.raises(Exception, match="no record with a timestamp"):
            resolve_start(opts, reader, snap)
        opts = parse_read_options({"url": url, "subscribe": "t", "startingTimestamp": str(T0 + 99_000),
                                   "startingOffsetsByTimestampStrategy": "latest"}, streaming=False)
        assert resolve_start(opts, reader, snap) == 25
        below = {"url": url, "subscribe": "t", "startingOffsets": '{"t": {"0": 2}}'}
        with pytest.raises(OffsetOutOfRange, match="below the log start"):
            resolve_start(parse_read_options(below, streaming=False), reader, snap)
        lenient = parse_read_options({**below, "failOnDataLoss": "false"}, streaming=False)
        assert resolve_start(lenient, reader, snap) == 4
        past = parse_read_options({"url": url, "subscribe": "t", "endingOffsets": '{"t": {"0": 26}}'},
                                  streaming=False)
        with pytest.raises(OffsetOutOfRange, match="past the log end"):
            resolve_end(past, reader, snap)


class VanishingStore:
    """Delegates to a store, but the first GET of ``doomed`` fails with ObjectNotFound (GC won a race)."""

    def __init__(self, inner: ObjectStore, doomed: str) -> None:
        self.inner, self.doomed, self.fired = inner, doomed, False

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        if key == self.doomed and not self.fired:
            self.fired = True
            raise ObjectNotFound(key, key=key)
        return self.inner.get(key, byte_range)

    def get_view(self, key: str, byte_range: ByteRange | None = None) -> memoryview:
        return memoryview(self.get(key, byte_range))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def head(self, key: str) -> ObjectMeta:
        return self.inner.head(key)


def test_a_vanished_object_is_replanned_without_duplicates(topic: Any) -> None:
    url, _store = topic
    with LogReader.open(url) as reader:
        snap = reader.snapshot(reader.topic("t"), 0)
        task = plan_partition(snap, 0, 25, url=url)[2]  # the WAL chunks
        source = task.sources[0]
        assert isinstance(source, ChunkSource)
        wrapped = VanishingStore(reader.object_store, source.key)
        got = list(_rows(task_tables(task, wrapped), 0))  # type: ignore[arg-type]
        assert wrapped.fired
        assert [r[1] for r in got] == list(range(20, 25))


def test_data_loss_while_reading(topic: Any) -> None:
    url, store = topic
    with LogReader.open(url) as reader:
        snap = reader.snapshot(reader.topic("t"), 0)
        task = plan_partition(snap, 0, 25, url=url)[0]
        store.partition("t", 0).delete_records(6)
        wrapped = VanishingStore(reader.object_store, task.sources[0].key)  # type: ignore[union-attr]
        with pytest.raises(OffsetOutOfRange, match=r"offsets \[0, 6\) were removed"):
            list(task_tables(task, wrapped))  # type: ignore[arg-type]
        wrapped.fired = False
        lenient = dataclasses.replace(task, fail_on_data_loss=False)
        assert [r[1] for r in _rows(task_tables(lenient, wrapped), 0)] == list(range(6, 10))  # type: ignore[arg-type]


def test_segment_with_offset_delta_reads_real_offsets(store_dir: Path) -> None:
    """A staged segment (stored offsets 0..n-1) published at offset 7 reads back at 7..n+6."""
    from s3stream.apps.spark.segio import segment_tables
    from s3stream.apps.spark.staging import Stager

    url = f"file://{store_dir}"
    store = open_at(url, store_dir / "_wal")
    try:
        fill(store, "t", 1, 7)
        with LogReader.open(url) as reader:
            stager = Stager(reader.object_store, task=0, topic="t")
            stager.add(pa.RecordBatch.from_pydict({"key": [b"a", b"b", b"c"], "value": [b"1", b"2", b"3"]}))
            staged = stager.finish()
            from s3stream.apps.spark.publish import publish

            publish(url, staged)
            snap = reader.snapshot(reader.topic("t"), 0)
            ref = snap.manifest.segments[-1]
            assert (ref.base_offset, ref.last_offset, ref.offset_delta) == (7, 9, 7)
            src = SegmentSource(ref.key, ref.object_size, ref.base_offset, ref.last_offset, ref.offset_delta)
            rows = pa.concat_tables(segment_tables(reader.object_store, src, 8, 10))
            assert rows.column("offset").to_pylist() == [8, 9]
            assert rows.column("value").to_pylist() == [b"2", b"3"]
            assert [r[1] for r in expected(store, "t")][-3:] == [7, 8, 9]
    finally:
        store.close()
