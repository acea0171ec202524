"""Writes through Spark: batch and streaming appends, partitioning, failed writes, replayed micro-batches."""

from __future__ import annotations

import datetime as dt
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

import s3stream
from s3stream.policy.partitioner import partition_for_key

from .kit import T0, expected, fill, open_at

pytestmark = pytest.mark.spark

SCHEMA = "key string, value string, partition int, timestamp timestamp, headers array<struct<key:string,value:binary>>"


def _ts(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


def _write(df: Any, url: str, topic: str | None = "sink") -> None:
    writer = df.write.format("s3stream").option("url", url).mode("append")
    if topic is not None:
        writer = writer.option("topic", topic)
    writer.save()


def _segment_keys(store: Any, topic: str) -> set[str]:
    doc = store.runtime.catalog.get(topic)
    return {e.key for e in store.object_store.list(f"logs/{doc.topic_id}/") if "/segments/" in e.key}


@pytest.fixture
def sink_store(store_dir: Path) -> Any:
    url = f"file://{store_dir}"
    store = open_at(url, store_dir / "_wal")
    fill(store, "sink", 2, 5)  # existing records: new ones go after them
    yield url, store
    store.close()


def test_write_then_read_returns_the_rows_at_consecutive_offsets(spark: Any, sink_store: Any) -> None:
    url, store = sink_store
    rows = [(f"k{i}", f"value-{i}", i % 2, _ts(T0 + 50_000 + i), [("h", b"%d" % i)] if i % 3 == 0 else None)
            for i in range(40)]
    _write(spark.createDataFrame(rows, SCHEMA).coalesce(1), url)
    for p in (0, 1):
        mine = [r for r in expected(store, "sink") if r[0] == p and r[1] >= 5]
        assert [r[1] for r in mine] == list(range(5, 25))  # consecutive, after the existing 5
        sent = [r for r in rows if r[2] == p]  # one task: the DataFrame's order is kept
        assert [(r[2], r[3]) for r in mine] == [(k.encode(), v.encode()) for k, v, *_ in sent]
        assert [r[4] for r in mine] == [int(r[3].timestamp() * 1000) for r in sent]
        assert [r[5] for r in mine] == [tuple(h) if h else () for *_, h in sent]
    assert [r[1] for r in expected(store, "sink") if r[0] == 0][-1] == 24


def test_multi_task_write_and_default_partitioner(spark: Any, sink_store: Any) -> None:
    url, store = sink_store
    before = set(expected(store, "sink"))
    keyed = [(f"key-{i}", f"v{i}") for i in range(60)]
    df = spark.createDataFrame(keyed, "key string, value string").repartition(3)
    _write(df, url)
    new = sorted(set(expected(store, "sink")) - before)
    assert len(new) == 60
    for p, offset, key, value, _, _ in new:
        assert p == partition_for_key(key, 2)  # Kafka's murmur2 placement
    for p in (0, 1):
        offsets = [r[1] for r in new if r[0] == p]
        assert offsets == list(range(5, 5 + len(offsets)))
    unkeyed = spark.createDataFrame([(f"u{i}",) for i in range(10)], "value string").coalesce(1)
    _write(unkeyed, url)
    rows = expected(store, "sink")
    ends = [sum(1 for r in rows if r[0] == p) for p in (0, 1)]
    assert sum(ends) == 10 + 70
    unkeyed_per_partition = [sum(1 for r in rows if r[0] == p and r[2] is None) for p in (0, 1)]
    assert unkeyed_per_partition == [5, 5]  # unkeyed records go round-robin


def test_failed_write_leaves_no_visible_records_and_no_objects(spark: Any, sink_store: Any) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    url, store = sink_store
    before = expected(store, "sink")
    keys_before = _segment_keys(store, "sink")

    def explode(v: str) -> str:
        if v == "v37":
            raise ValueError("boom")
        return v

    boom = F.udf(explode, StringType(), useArrow=False)
    df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(40)], "key string, value string").repartition(4)
    with pytest.raises(Exception, match="boom"):
        _write(df.withColumn("value", boom("value")), url)
    assert expected(store, "sink") == before
    # abort deleted what the finished tasks staged; a task still running when the job failed may leave an
    # object behind: never referenced, so GC deletes it once it is older than orphan_min_age_ms
    later = s3stream.ManualClock(s3stream.SystemClock().now_ms() + 2 * 3_600_000)
    with tempfile.TemporaryDirectory() as wal, s3stream.open_store(url, clock=later, probe=False,
                                                                   wal_dir=wal) as gc_store:
        gc_store.collect_garbage()
    assert _segment_keys(store, "sink") == keys_before


def test_compacted_topic_refuses_null_keys(spark: Any, sink_store: Any) -> None:
    url, store = sink_store
    store.create_topic("table", partitions=1, config={"cleanup.policy": "compact"})
    df = spark.createDataFrame([("a", "1"), (None, "2")], "key string, value string").coalesce(1)
    with pytest.raises(Exception, match="compacted"):
        _write(df, url, "table")
    assert expected(store, "table") == []


def test_streaming_write_is_idempotent_per_micro_batch(spark: Any, sink_store: Any, tmp_path: Path) -> None:
    url, store = sink_store
    fill(store, "source", 2, 12)
    ckpt = tmp_path / "ckpt"

    def run() -> None:
        q = (spark.readStream.format("s3stream").option("url", url).option("subscribe", "source")
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "10")
             .option("includeHeaders", "true").load()
             .selectExpr("key", "value", "partition", "timestamp", "headers")
             .writeStream.format("s3stream").option("url", url).option("topic", "sink")
             .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
        q.awaitTermination(120)
        assert q.exception() is None

    run()
    copied = [r for r in expected(store, "sink") if r[1] >= 5]
    source = expected(store, "source")
    assert sorted((r[0], r[2], r[3], r[4]) for r in copied) == sorted((r[0], r[2], r[3], r[4]) for r in source)
    # make Spark replay the last micro-batch: forget that it was committed (its offsets are still logged)
    commits = sorted((ckpt / "commits").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    last = commits[-1]
    assert last.name.isdigit() and int(last.name) >= 2
    last.unlink()
    crc = ckpt / "commits" / f".{last.name}.crc"
    if crc.exists():
        crc.unlink()
    keys = _segment_keys(store, "sink")
    run()
    assert [r for r in expected(store, "sink") if r[1] >= 5] == copied  # nothing appended twice
    assert _segment_keys(store, "sink") == keys  # the replay's staged objects were deleted
    shutil.rmtree(ckpt)
