"""Structured Streaming: AvailableNow, checkpoint restarts, maxOffsetsPerTrigger, retention overtaking."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import s3stream

from .kit import expected, fill, open_at, spark_rows

pytestmark = pytest.mark.spark


class Collector:
    """A foreachBatch sink that keeps every micro-batch's rows (runs in this driver process)."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[Any, ...]]] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        self.batches.append(spark_rows(df.toArrow()))

    @property
    def rows(self) -> list[tuple[Any, ...]]:
        return sorted(r for b in self.batches for r in b)


def run_available_now(spark: Any, url: str, checkpoint: Path, sink: Collector, **options: str) -> None:
    options.setdefault("includeHeaders", "true")  # the rows compare headers too
    reader = spark.readStream.format("s3stream").option("url", url)
    for k, v in options.items():
        reader = reader.option(k, v)
    query = (reader.load().writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))


@pytest.fixture
def events(store_dir: Path) -> Any:
    url = f"file://{store_dir}"
    store = open_at(url, store_dir / "_wal")
    fill(store, "events", 2, 20)
    yield url, store
    store.close()


def test_available_now_reads_new_records_and_restarts_from_checkpoint(spark: Any, events: Any,
                                                                     tmp_path: Path) -> None:
    url, store = events
    sink = Collector()
    ckpt = tmp_path / "ckpt"
    run_available_now(spark, url, ckpt, sink, subscribe="events", startingOffsets="earliest",
                      maxOffsetsPerTrigger="15")
    assert sink.rows == expected(store, "events")
    assert len(sink.batches) >= 3 and all(len(b) <= 15 for b in sink.batches)  # 40 offsets, 15 per batch

    before = expected(store, "events")
    fill(store, "events", 2, 12, first=20)  # 12 more per partition
    sink2 = Collector()
    run_available_now(spark, url, ckpt, sink2, subscribe="events")
    new = sorted(set(expected(store, "events")) - set(before))
    assert sink2.rows == new  # exactly the new records: nothing lost, nothing twice
    assert len(new) == 24

    sink3 = Collector()
    run_available_now(spark, url, ckpt, sink3, subscribe="events")
    assert sink3.rows == []


def test_default_start_is_latest(spark: Any, events: Any, tmp_path: Path) -> None:
    url, store = events
    ckpt = tmp_path / "ckpt"
    sink = Collector()
    run_available_now(spark, url, ckpt, sink, subscribe="events")
    assert sink.rows == []
    before = set(expected(store, "events"))
    fill(store, "events", 2, 3, first=20)
    run_available_now(spark, url, ckpt, sink, subscribe="events")
    assert sink.rows == sorted(set(expected(store, "events")) - before)


def _overtake(store: s3stream.Store, topic: str) -> None:
    """Retention removes everything the query has not read yet, then new records arrive."""
    clock = store.clock
    assert isinstance(clock, s3stream.ManualClock)
    store.alter_topic_config(topic, {"retention.ms": 1000})
    clock.advance(10_000)
    store.run_retention()
    store.alter_topic_config(topic, {"retention.ms": None})
    for p in range(store.partitions(topic)):
        store.partition(topic, p).append([s3stream.Record(b"late", b"v", None)])
    store.flush()


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_retention_overtaking_a_checkpoint(spark: Any, events: Any, tmp_path: Path, fail_on_data_loss: bool) -> None:
    url, store = events
    ckpt = tmp_path / "ckpt"
    opts = {"subscribe": "events", "startingOffsets": "earliest", "failOnDataLoss": str(fail_on_data_loss).lower()}
    sink = Collector()
    run_available_now(spark, url, ckpt, sink, **opts)
    fill(store, "events", 2, 5, first=20)  # unread records that retention will remove
    _overtake(store, "events")
    starts = [store.partition("events", p).log_start_offset for p in range(2)]
    assert starts == [25, 25]
    sink2 = Collector()
    if fail_on_data_loss:
        from pyspark.errors import StreamingQueryException

        with pytest.raises((RuntimeError, StreamingQueryException), match=r"offsets \[20, 25\) were removed"):
            run_available_now(spark, url, ckpt, sink2, **opts)
    else:
        run_available_now(spark, url, ckpt, sink2, **opts)
        assert [(r[0], r[1], r[2]) for r in sink2.rows] == [(0, 25, b"late"), (1, 25, b"late")]
