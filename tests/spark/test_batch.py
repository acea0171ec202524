"""Batch reads through Spark: equal to the Python API, offset/timestamp bounds, pushdown, SeaweedFS."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from .kit import T0, expected, fill, open_at, spark_rows

pytestmark = pytest.mark.spark


def _read(spark: Any, url: str, **options: str) -> Any:
    """A batch read; with the headers column unless ``includeHeaders`` says otherwise (rows compare them)."""
    options.setdefault("includeHeaders", "true")
    reader = spark.read.format("s3stream").option("url", url)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


@pytest.fixture
def orders(store_dir: Path) -> Any:
    """A 3-partition topic of 25 records each: two sealed segments and 5 records in WAL objects."""
    url = f"file://{store_dir}"
    store = open_at(url, store_dir / "_wal")
    fill(store, "orders", 3, 25)
    yield url, store
    store.close()


def test_batch_read_equals_python_api(spark: Any, orders: Any) -> None:
    url, store = orders
    df = _read(spark, url, subscribe="orders")
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    table = df.toArrow()
    assert spark_rows(table) == expected(store, "orders")
    assert set(table.column("topic").to_pylist()) == {"orders"}
    assert set(table.column("timestampType").to_pylist()) == {0}
    assert len(spark_rows(table)) == 75


def test_no_headers_column_by_default_as_kafkas_source(spark: Any, orders: Any) -> None:
    url, store = orders
    df = spark.read.format("s3stream").option("url", url).option("subscribe", "orders").load()
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert [r[:5] for r in spark_rows(df.toArrow())] == [r[:5] for r in expected(store, "orders")]


def test_offset_bounds_json_and_sentinels(spark: Any, orders: Any) -> None:
    url, store = orders
    starting = json.dumps({"orders": {"0": 5, "1": -2}})
    ending = json.dumps({"orders": {"0": 12, "2": 23}})
    rows = spark_rows(_read(spark, url, subscribe="orders", startingOffsets=starting,
                            endingOffsets=ending).toArrow())
    assert rows == expected(store, "orders", start={0: 5}, end={0: 12, 2: 23})


def test_timestamp_bounds(spark: Any, orders: Any) -> None:
    url, store = orders
    rows = spark_rows(_read(spark, url, subscribe="orders", startingTimestamp=str(T0 + 7_500),
                            endingTimestamp=str(T0 + 21_000)).toArrow())
    # the first offset with timestamp >= T0+7.5s is 8; the end is the first offset at >= T0+21s: 21
    assert rows == expected(store, "orders", start=dict.fromkeys(range(3), 8), end=dict.fromkeys(range(3), 21))


def test_pushdown_of_partition_offset_and_timestamp(spark: Any, orders: Any) -> None:
    from pyspark.sql import functions as F

    url, store = orders
    df = _read(spark, url, subscribe="orders")
    since = dt.datetime.fromtimestamp((T0 + 3_000) / 1000, tz=dt.UTC)
    got = df.where((F.col("partition").isin(0, 2)) & (F.col("offset") > 2) & (F.col("offset") <= 20)
                   & (F.col("timestamp") >= F.lit(since)) & (F.col("key") != F.lit(b"k0")))
    want = [r for r in expected(store, "orders") if r[0] in (0, 2) and 2 < r[1] <= 20 and r[4] >= T0 + 3_000
            and r[2] != b"k0"]
    assert spark_rows(got.toArrow()) == want
    # the plan shows the pushed filters are gone from Spark's side (only the key filter is left)
    plan = got._jdf.queryExecution().executedPlan().toString()
    spark_filter = next(line for line in plan.splitlines() if "Filter" in line)
    assert "key" in spark_filter
    assert not any(c in spark_filter for c in ("offset", "partition", "timestamp"))
    assert df.where("offset > 100000").count() == 0  # nothing planned at all


def test_compacted_topic_with_gaps_and_no_headers_column(spark: Any, store_dir: Path) -> None:
    url = f"file://{store_dir}"
    store = open_at(url, store_dir / "_wal")
    try:
        fill(store, "ledger", 2, 30, config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
        for _ in range(3):
            store.run_cleaner()
        want = expected(store, "ledger")
        assert len(want) < 60  # compaction left offset gaps
        df = _read(spark, url, subscribe="ledger", includeHeaders="false")
        assert "headers" not in df.columns
        got = [r[:5] for r in spark_rows(df.toArrow())]
        assert got == [r[:5] for r in want]
    finally:
        store.close()


def test_subscribe_pattern_and_assign(spark: Any, orders: Any) -> None:
    url, store = orders
    by_pattern = spark_rows(_read(spark, url, subscribePattern="ord.*").toArrow())
    assert by_pattern == expected(store, "orders")
    assigned = spark_rows(_read(spark, url, assign=json.dumps({"orders": [1]})).toArrow())
    assert assigned == [r for r in expected(store, "orders") if r[0] == 1]


def test_invalid_options_fail_with_the_option_named(spark: Any, orders: Any) -> None:
    from pyspark.errors import PySparkException

    url, _ = orders
    with pytest.raises(PySparkException, match="startingOffsets"):
        _read(spark, url, subscribe="orders", startingOffsets="latest").collect()
    with pytest.raises(PySparkException, match="unknown topic"):
        _read(spark, url, subscribe="nope").collect()


@pytest.mark.s3
@pytest.mark.seaweedfs
def test_read_from_seaweedfs(spark: Any, seaweedfs_endpoint: str, tmp_path: Path) -> None:
    from s3stream.objectstore.s3 import S3ObjectStore

    S3ObjectStore("spark-tests", endpoint_url=seaweedfs_endpoint).ensure_bucket()
    url = f"s3://spark-tests/batch?endpoint_url={seaweedfs_endpoint}"
    store = open_at(url, tmp_path / "wal")
    try:
        fill(store, "orders", 2, 15)
        assert spark_rows(_read(spark, url, subscribe="orders").toArrow()) == expected(store, "orders")
    finally:
        store.close()
