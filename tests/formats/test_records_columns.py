"""Building Arrow columns from Records: same values as Arrow's builder, buffers exactly their size."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from s3stream import Record
from s3stream.base.records import binary_column


@given(st.lists(st.one_of(st.none(), st.binary(max_size=300)), max_size=60))
def test_binary_column_equals_arrows_builder(items: list[bytes | None]) -> None:
    col = binary_column(items)
    assert col.type == pa.binary()
    assert col.equals(pa.array(items, type=pa.binary()))
    assert col.to_pylist() == items


def test_binary_column_data_buffer_is_exactly_the_payload() -> None:
    items = [bytes([i % 251]) * 1000 for i in range(500)]
    col = binary_column(items)
    offsets, data = col.buffers()[1], col.buffers()[2]
    assert data is not None and offsets is not None
    assert data.size == 500_000 and offsets.size == 501 * 4
    assert col.null_count == 0


def test_all_null_column_allocates_no_data() -> None:
    col = binary_column([None, None, None])
    assert col.null_count == 3 and col.type == pa.binary()


@pytest.mark.parametrize("make", [bytearray, memoryview])
def test_record_snapshots_a_mutable_or_viewed_buffer_as_bytes(make: type) -> None:
    buf = bytearray(b"hello")
    rec = Record(make(buf), make(buf))
    buf[0:1] = b"J"  # the caller reuses its buffer after building the record
    assert rec.key == b"hello" and type(rec.key) is bytes
    assert rec.value == b"hello" and type(rec.value) is bytes


def test_record_refuses_a_non_bytes_key() -> None:
    with pytest.raises(TypeError, match=r"Record\.key must be bytes"):
        Record("text", b"v")  # type: ignore[arg-type]
