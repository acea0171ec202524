"""Filter pushdown: Spark's filters on ``topic``, ``partition``, ``offset`` and ``timestamp`` become Bounds.

Handled completely (Spark does not re-check them; the plan and the executors apply them exactly):
``=``, ``<``, ``<=``, ``>``, ``>=`` on ``partition``, ``offset`` and ``timestamp``; ``=`` and ``IN`` on
``topic`` and ``partition``; ``IS NOT NULL`` on those columns (never null). ``IN`` on ``offset`` only
narrows the range and is left to Spark too. Everything else (``NOT``, ``OR``, filters on key or value,
timestamps without a time zone) is returned to Spark untouched.

Timestamps: Spark's are microseconds, records' milliseconds; a bound is turned into the exact inclusive
millisecond bound (``ts > 1.0005 s`` keeps a record at 1001 ms, ``ts >= 1.0005 s`` too, ``ts <= 1.0005 s``
keeps 1000 ms), so the pushed filter selects exactly the rows Spark's filter would.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Sequence

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)

from s3stream.apps.spark.planning import Bounds

__all__ = ["apply_filters"]

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_COLUMNS = frozenset({"topic", "partition", "offset", "timestamp"})
_COMPARISONS = (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)


def _micros(value: object) -> int | None:
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        delta = value - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _range(f: Filter, v: int, lo: int | None, hi: int | None, *, scale: int = 1) -> tuple[int | None, int | None]:
    """Inclusive ``[lo, hi]`` (in units of ``scale`` of ``v``'s unit) narrowed by comparison ``f``."""
    floor, ceil = v // scale, -(-v // scale)
    if isinstance(f, GreaterThan | GreaterThanOrEqual | EqualTo):
        new_lo = floor + 1 if isinstance(f, GreaterThan) else ceil
        lo = new_lo if lo is None else max(lo, new_lo)
    if isinstance(f, LessThan | LessThanOrEqual | EqualTo):
        new_hi = ceil - 1 if isinstance(f, LessThan) else floor
        hi = new_hi if hi is None else min(hi, new_hi)
    return lo, hi


def _strings(values: Iterable[object]) -> frozenset[str] | None:
    items = list(values)
    strings = frozenset(v for v in items if isinstance(v, str))
    return strings if len(strings) == len(set(items)) else None


def _ints(values: Iterable[object]) -> list[int] | None:
    items = list(values)
    ints = [i for i in (_int(v) for v in items) if i is not None]
    return ints if ints and len(ints) == len(items) else None


def _push_one(f: Filter, b: Bounds) -> tuple[Bounds, bool]:
    """``b`` narrowed by ``f``, and whether ``f`` is fully handled."""
    attribute: tuple[str, ...] = getattr(f, "attribute", ())
    column = attribute[0] if len(attribute) == 1 else None
    if column not in _COLUMNS:
        return b, False
    if isinstance(f, IsNotNull):
        return b, True
    if isinstance(f, In):
        return _push_in(f, column, b)
    if not isinstance(f, _COMPARISONS):
        return b, False
    if column == "topic":
        if isinstance(f, EqualTo) and isinstance(f.value, str):
            topics = frozenset({f.value})
            return dataclasses.replace(b, topics=topics if b.topics is None else b.topics & topics), True
        return b, False
    if column == "timestamp":
        micros = _micros(f.value)
        if micros is None:
            return b, False
        lo, hi = _range(f, micros, b.min_timestamp, b.max_timestamp, scale=1000)
        return dataclasses.replace(b, min_timestamp=lo, max_timestamp=hi), True
    value = _int(f.value)
    if value is None:
        return b, False
    if column == "partition":
        lo, hi = _range(f, value, None, None)
        parts = None if lo is None and hi is None else _partition_range(lo, hi)
        if parts is None:
            return b, False
        return dataclasses.replace(b, partitions=parts if b.partitions is None else b.partitions & parts), True
    lo, hi = _range(f, value, b.min_offset, b.max_offset)
    return dataclasses.replace(b, min_offset=max(0, lo if lo is not None else 0), max_offset=hi), True


_MAX_PARTITION_SET = 100_000


def _partition_range(lo: int | None, hi: int | None) -> frozenset[int] | None:
    """Partitions ``[lo, hi]`` as a set (None when open-ended above: left to the plan's own bound)."""
    if hi is None:
        return None
    lo = max(0, lo or 0)
    if hi - lo > _MAX_PARTITION_SET:
        return None
    return frozenset(range(lo, hi + 1))


def _push_in(f: In, column: str, b: Bounds) -> tuple[Bounds, bool]:
    if column == "topic":
        names = _strings(f.value)
        if names is None:
            return b, False
        return dataclasses.replace(b, topics=names if b.topics is None else b.topics & names), True
    values = _ints(f.value)
    if values is None:
        return b, False
    if column == "partition":
        parts = frozenset(values)
        return dataclasses.replace(b, partitions=parts if b.partitions is None else b.partitions & parts), True
    if column == "offset":
        hi = max(values) if b.max_offset is None else min(b.max_offset, max(values))
        return dataclasses.replace(b, min_offset=max(b.min_offset, min(values)), max_offset=hi), False
    return b, False


def apply_filters(filters: Sequence[Filter], bounds: Bounds) -> tuple[Bounds, list[Filter]]:
    """The bounds narrowed by every handled filter, and the filters Spark must still evaluate."""
    rest: list[Filter] = []
    for f in filters:
        bounds, handled = _push_one(f, bounds)
        if not handled:
            rest.append(f)
    return bounds, rest
