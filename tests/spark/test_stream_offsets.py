"""The streaming source's offset logic driven directly (no JVM): rate limits, AvailableNow, new partitions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from s3stream.apps.spark.options import parse_read_options

from .kit import fill, open_at

pytest.importorskip("pyspark")

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from s3stream.apps.spark.stream import StreamReader, rate_limit
from s3stream.apps.spark.tasks import task_tables


@given(st.dictionaries(st.integers(0, 5), st.tuples(st.integers(0, 50), st.integers(0, 50)), min_size=1),
       st.integers(1, 120))
def test_rate_limit_takes_exactly_the_limit_in_proportion(spans: dict[int, tuple[int, int]], limit: int) -> None:
    start = {("t", p): a for p, (a, _) in spans.items()}
    latest = {("t", p): a + b for p, (a, b) in spans.items()}
    ends = rate_limit(start, latest, limit)
    total = sum(b for _, b in spans.values())
    taken = {k: ends[k] - start[k] for k in ends}
    assert sum(taken.values()) == min(limit, total)
    assert all(0 <= taken[k] <= latest[k] - start[k] for k in ends)
    if total > limit:  # each partition within one offset of its proportional share
        assert all(abs(taken[("t", p)] - limit * b / total) < 1 for p, (_, b) in spans.items())


@pytest.fixture
def feed(store_dir: Path) -> Any:
    url = f"file://{store_dir}"
    store = open_at(url, store_dir / "_wal")
    fill(store, "feed", 2, 10)
    yield url, store
    store.close()


def _reader(url: str, **options: str) -> StreamReader:
    return StreamReader(parse_read_options({"url": url, "subscribe": "feed", **options}, streaming=True))


def _read(reader: StreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[tuple[int, int]]:
    rows = []
    for part in reader.partitions(start, end):
        for table in task_tables(part.value):
            rows.extend((part.value.partition, o) for o in table.column("offset").to_pylist())
    return sorted(rows)


def test_offsets_limits_and_available_now(feed: Any) -> None:
    url, store = feed
    reader = _reader(url, startingOffsets="earliest", maxOffsetsPerTrigger="6")
    start = reader.initialOffset()
    assert start == {"feed": {"0": 0, "1": 0}}
    assert isinstance(reader.getDefaultReadLimit(), ReadMaxRows)
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert end == {"feed": {"0": 3, "1": 3}}
    assert _read(reader, start, end) == [(p, o) for p in (0, 1) for o in range(3)]
    assert reader.latestOffset(start, ReadAllAvailable()) == {"feed": {"0": 10, "1": 10}}
    reader.prepareForTriggerAvailableNow()
    fill(store, "feed", 2, 4, first=10)  # arrives after the AvailableNow target
    assert reader.latestOffset(end, ReadAllAvailable()) == {"feed": {"0": 10, "1": 10}}
    reader2 = _reader(url)
    assert reader2.initialOffset() == {"feed": {"0": 14, "1": 14}}  # default: latest
    json.dumps(reader.reportLatestOffset())  # offsets are JSON documents
    reader.stop()
    reader2.stop()


def test_a_new_partition_starts_at_its_log_start(feed: Any) -> None:
    url, _ = feed
    reader = _reader(url, startingOffsets="earliest")
    known = {"feed": {"0": 10}}  # a checkpoint from before partition 1 existed
    end = reader.latestOffset(known, ReadAllAvailable())
    assert end == {"feed": {"0": 10, "1": 10}}
    assert _read(reader, known, end) == [(1, o) for o in range(10)]
    reader.stop()


def test_data_loss_in_a_micro_batch(feed: Any) -> None:
    url, store = feed
    store.partition("feed", 0).delete_records(7)
    start, end = {"feed": {"0": 2, "1": 0}}, {"feed": {"0": 10, "1": 10}}
    strict = _reader(url)
    with pytest.raises(Exception, match=r"offsets \[2, 7\) were removed"):
        strict.partitions(start, end)
    lenient = _reader(url, failOnDataLoss="false")
    assert [o for p, o in _read(lenient, start, end) if p == 0] == [7, 8, 9]


def test_the_stream_reader_pickles_without_its_connections(feed: Any) -> None:
    import pickle

    url, _ = feed
    reader = _reader(url)
    reader.initialOffset()
    clone = pickle.loads(pickle.dumps(reader))
    assert clone.initialOffset() == reader.initialOffset()


def test_import_s3stream_does_not_import_pyspark() -> None:
    code = "import sys, s3stream, s3stream.apps.cli, s3stream.apps.spark.options; print('pyspark' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
