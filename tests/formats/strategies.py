"""Hypothesis strategies and builders for record batches of RECORD_SCHEMA (shared by the format tests)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

from s3stream.base.records import HEADER_TYPE, RECORD_SCHEMA

_binary = st.one_of(st.none(), st.binary(max_size=40))
_headers = st.one_of(
    st.none(),
    st.lists(st.fixed_dictionaries({"key": st.text(max_size=8), "value": _binary}), max_size=3),
)
_row = st.fixed_dictionaries({
    "timestamp": st.integers(min_value=-1, max_value=2**50),
    "key": _binary,
    "value": _binary,
    "headers": _headers,
    "horizon_ms": st.one_of(st.none(), st.integers(min_value=0, max_value=2**50)),
})


def make_batch(rows: Sequence[dict[str, Any]], offsets: Sequence[int]) -> pa.RecordBatch:
    """A RECORD_SCHEMA batch from row dicts (timestamp, key, value, headers, horizon_ms) at ``offsets``."""
    return pa.RecordBatch.from_arrays([
        pa.array(offsets, pa.int64()),
        pa.array([r["timestamp"] for r in rows], pa.int64()),
        pa.array([r["key"] for r in rows], pa.binary()),
        pa.array([r["value"] for r in rows], pa.binary()),
        pa.array([r["headers"] for r in rows], HEADER_TYPE),
        pa.array([r["horizon_ms"] for r in rows], pa.int64()),
    ], schema=RECORD_SCHEMA)


@st.composite
def batches(draw: st.DrawFn, *, min_size: int = 0, max_size: int = 40) -> pa.RecordBatch:
    """Batches with null keys/values, headers, offset gaps and non-monotonic timestamps."""
    rows = draw(st.lists(_row, min_size=min_size, max_size=max_size))
    start = draw(st.integers(min_value=0, max_value=2**40))
    gaps = draw(st.lists(st.integers(min_value=1, max_value=5), min_size=len(rows), max_size=len(rows)))
    offsets, pos = [], start
    for gap in gaps:
        offsets.append(pos)
        pos += gap
    return make_batch(rows, offsets)


def simple_batch(offsets: Sequence[int], timestamps: Sequence[int] | None = None, value_size: int = 10,
                 seed: int = 0) -> pa.RecordBatch:
    """A deterministic batch: key ``k{offset}``, value of ``value_size`` pseudo-random bytes."""
    import random

    rng = random.Random(seed)
    ts = list(timestamps) if timestamps is not None else [1_700_000_000_000 + o for o in offsets]
    rows = [{"timestamp": t, "key": f"k{o}".encode(), "value": rng.randbytes(value_size), "headers": None,
             "horizon_ms": None} for o, t in zip(offsets, ts, strict=True)]
    return make_batch(rows, offsets)


def flips(data: bytes, masks: Sequence[int] = (0x01, 0x80)) -> Any:
    """Every single-byte corruption of ``data``: yields (index, mask, corrupted bytes)."""
    for i in range(len(data)):
        for mask in masks:
            corrupted = bytearray(data)
            corrupted[i] ^= mask
            yield i, mask, bytes(corrupted)
