"""Executor-side staging (no JVM): murmur2 partitioning, column handling, validation, segment objects."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from s3stream.apps.spark.snapshot import LogReader
from s3stream.apps.spark.staging import Stager, murmur2_partitions, normalize_batch
from s3stream.base.errors import InvalidRecord, RecordTooLarge, UnknownTopic
from s3stream.format.segment import SegmentReader
from s3stream.policy.partitioner import partition_for_key

from .kit import open_at


def test_murmur2_partitions_equal_kafkas() -> None:
    rng = random.Random(7)
    keys = [bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 70))) for _ in range(3000)]
    for n in (1, 3, 17):
        got = murmur2_partitions(pa.array(keys, pa.binary()).slice(11), n).tolist()
        assert got == [partition_for_key(k, n) for k in keys[11:]]


def test_normalize_accepts_strings_timestamps_and_a_topic_column() -> None:
    ts = pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.UTC)] * 2, pa.timestamp("us", tz="UTC"))
    batch = pa.RecordBatch.from_pydict({"value": ["a", None], "key": ["k", "l"], "timestamp": ts, "topic": ["x", "y"]})
    table = normalize_batch(batch, None)
    assert table.column("value").to_pylist() == [b"a", None]
    assert table.column("timestamp").to_pylist() == [1_704_067_200_000] * 2
    assert table.column("topic").to_pylist() == ["x", "y"]
    assert normalize_batch(batch, "z").column("topic").to_pylist() == ["z", "z"]  # the option wins
    with pytest.raises(InvalidRecord, match="value"):
        normalize_batch(pa.RecordBatch.from_pydict({"key": [b"k"]}), "t")
    with pytest.raises(InvalidRecord, match="topic"):
        normalize_batch(pa.RecordBatch.from_pydict({"value": [b"k"]}), None)


@pytest.fixture
def store(store_dir: Path) -> Any:
    url = f"file://{store_dir}"
    s = open_at(url, store_dir / "_wal")
    s.create_topic("t", partitions=3, config={"segment.bytes": 2000, "max.message.bytes": 5000})
    s.create_topic("c", partitions=1, config={"cleanup.policy": "compact"})
    yield url, s
    s.close()


def test_stager_writes_segments_per_partition_in_order(store: Any) -> None:
    url, _ = store
    with LogReader.open(url) as reader:
        stager = Stager(reader.object_store, task=4, topic="t")
        values = [b"x" * 100 for _ in range(60)]
        stager.add(pa.RecordBatch.from_pydict({"key": [b"k%d" % i for i in range(60)], "value": values}))
        stager.add(pa.RecordBatch.from_pydict({"value": [b"p2"], "partition": pa.array([2], pa.int32())}))
        staged = stager.finish()
        assert all(o.task == 4 for o in staged) and [o.seq for o in staged] == list(range(len(staged)))
        per_partition: dict[int, int] = {}
        for o in staged:
            per_partition[o.partition] = per_partition.get(o.partition, 0) + o.record_count
            data = reader.object_store.get(o.key)
            seg = SegmentReader(lambda a, b, d=data: d[a:b], len(data), source=o.key)
            assert (seg.base_offset, seg.last_offset) == (0, o.record_count - 1)
            assert o.key.startswith(f"logs/{reader.topic('t').topic_id}/{o.partition}/segments/")
        expected = {p: sum(1 for i in range(60) if partition_for_key(b"k%d" % i, 3) == p) for p in range(3)}
        expected[2] += 1
        assert per_partition == expected
        assert len(staged) > 3  # segment.bytes cut the partitions into several objects
        stager.discard()
        assert not any(True for _ in reader.object_store.list("logs/") if "/segments/" in _.key)


def test_stager_validation(store: Any) -> None:
    url, _ = store
    with LogReader.open(url) as reader:
        with pytest.raises(InvalidRecord, match="compacted"):
            Stager(reader.object_store, task=0, topic="c").add(
                pa.RecordBatch.from_pydict({"key": [None], "value": [b"v"]}, schema=pa.schema(
                    [pa.field("key", pa.binary()), pa.field("value", pa.binary())])))
        with pytest.raises(RecordTooLarge):
            Stager(reader.object_store, task=0, topic="t").add(pa.RecordBatch.from_pydict({"value": [b"x" * 6000]}))
        with pytest.raises(UnknownTopic, match="no partition 7"):
            Stager(reader.object_store, task=0, topic="t").add(
                pa.RecordBatch.from_pydict({"value": [b"x"], "partition": pa.array([7], pa.int32())}))
        with pytest.raises(InvalidRecord, match="timestamp"):
            Stager(reader.object_store, task=0, topic="t").add(
                pa.RecordBatch.from_pydict({"value": [b"x"], "timestamp": pa.array([-5], pa.int64())}))
