"""Spark filters -> Bounds (pure): what is handled, what is returned to Spark, exact timestamp rounding."""

from __future__ import annotations

import datetime as dt

import pytest

pytest.importorskip("pyspark")

from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    Not,
)

from s3stream.apps.spark.planning import Bounds
from s3stream.apps.spark.pushdown import apply_filters

UTC = dt.UTC


def at_us(us: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=us)


def test_offsets_partitions_topics() -> None:
    filters = [IsNotNull(("offset",)), GreaterThan(("offset",), 4), LessThanOrEqual(("offset",), 9),
               In(("partition",), (1, 3)), EqualTo(("topic",), "a"), In(("offset",), (5, 7, 20))]
    bounds, rest = apply_filters(filters, Bounds())
    assert (bounds.min_offset, bounds.max_offset) == (5, 9)
    assert bounds.partitions == frozenset({1, 3}) and bounds.topics == frozenset({"a"})
    assert rest == [filters[-1]]  # IN on offset only narrows: Spark still checks it
    narrowed, _ = apply_filters([EqualTo(("partition",), 3), LessThan(("partition",), 3)], Bounds())
    assert narrowed.partitions == frozenset() and narrowed.impossible


@pytest.mark.parametrize(("f", "lo", "hi"), [
    (GreaterThan(("timestamp",), at_us(1_000_500)), 1001, None),
    (GreaterThanOrEqual(("timestamp",), at_us(1_000_500)), 1001, None),
    (GreaterThan(("timestamp",), at_us(1_000_000)), 1001, None),
    (GreaterThanOrEqual(("timestamp",), at_us(1_000_000)), 1000, None),
    (LessThan(("timestamp",), at_us(1_000_500)), None, 1000),
    (LessThanOrEqual(("timestamp",), at_us(1_000_500)), None, 1000),
    (LessThan(("timestamp",), at_us(1_000_000)), None, 999),
    (EqualTo(("timestamp",), at_us(1_000_000)), 1000, 1000),
])
def test_timestamp_bounds_are_exact_in_milliseconds(f: object, lo: int | None, hi: int | None) -> None:
    bounds, rest = apply_filters([f], Bounds())  # type: ignore[list-item]
    assert rest == []
    assert (bounds.min_timestamp, bounds.max_timestamp) == (lo, hi)


def test_unsupported_filters_go_back_to_spark() -> None:
    filters = [Not(EqualTo(("offset",), 3)), EqualTo(("key",), b"k"), EqualTo(("timestamp",), dt.datetime(2024, 1, 1)),  # noqa: DTZ001 - naive on purpose
               GreaterThan(("partition",), 2), EqualTo(("offset",), "x"), In(("topic",), ("a", 1))]
    bounds, rest = apply_filters(filters, Bounds())
    assert rest == filters
    assert bounds == Bounds()
