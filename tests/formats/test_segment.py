"""Segment objects: round trips, reads by offset/limits/columns, the time index, encode validation."""

from __future__ import annotations

import io
import itertools

import crc32c
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from s3stream.base.errors import CorruptData, InternalError, InvalidRequest
from s3stream.base.records import RECORD_SCHEMA, batch_nbytes
from s3stream.format.segment import SEGMENT_FORMAT_VERSION, SegmentReader, encode_segment, row_sizes

from .strategies import batches, simple_batch

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def reader_for(data: bytes, **kw: int) -> SegmentReader:
    return SegmentReader(lambda start, end: data[start:end], len(data), source="seg-under-test", **kw)


def range_of(batch: pa.RecordBatch) -> tuple[int, int]:
    offs = batch.column("offset").to_pylist()
    return (offs[0], offs[-1] + 3) if offs else (7, 9)


@FAST
@given(batch=batches(), row_group_bytes=st.sampled_from([1, 60, 300, 1 << 20]), fbmt=st.integers(-1, 2**40))
def test_round_trip(batch: pa.RecordBatch, row_group_bytes: int, fbmt: int) -> None:
    base, last = range_of(batch)
    data, summary = encode_segment(batch, base_offset=base, last_offset=last, first_batch_max_timestamp=fbmt,
                                   row_group_bytes=row_group_bytes)
    table = pa.Table.from_batches([batch])
    ts = batch.column("timestamp").to_pylist()
    assert summary.base_offset == base and summary.last_offset == last
    assert summary.record_count == batch.num_rows
    assert summary.size_bytes == batch_nbytes(batch) == int(row_sizes(batch).sum())
    assert summary.object_size == len(data)
    assert (summary.min_timestamp, summary.max_timestamp) == ((min(ts), max(ts)) if ts else (-1, -1))
    assert summary.first_batch_max_timestamp == fbmt
    reader = reader_for(data)
    assert (reader.base_offset, reader.last_offset, reader.record_count) == (base, last, batch.num_rows)
    assert reader.footer.first_batch_max_timestamp == fbmt
    assert reader.read(base).equals(table)
    assert reader.read_all(verify_crc32c=summary.crc32c).equals(table)
    groups = reader.row_groups
    assert sum(g.num_rows for g in groups) == batch.num_rows
    if row_group_bytes == 1:
        assert len(groups) == batch.num_rows  # one record per group when each crosses the boundary
    assert all(a.byte_end == b.byte_start for a, b in itertools.pairwise(groups))
    at = 0
    for g in groups:  # format 2: each group's null counts and CRC32C are in the index
        rows = table.slice(at, g.num_rows)
        at += g.num_rows
        assert (g.unkeyed, g.tombstones) == (rows.column("key").null_count, rows.column("value").null_count)
        assert g.crc32c == crc32c.crc32c(data[g.byte_start:g.byte_end])
    picked = list(range(0, len(groups), 2))
    expected = pa.concat_tables([reader.read_groups([i]) for i in picked]) if picked else table.slice(0, 0)
    assert reader.read_groups(picked).equals(expected)
    assert reader.read_groups(picked, columns=["key"]).column("key").equals(expected.column("key"))


def expected_read(batch: pa.RecordBatch, from_offset: int, max_records: int | None,
                  max_bytes: int | None) -> pa.Table:
    table = pa.Table.from_batches([batch])
    offs = np.asarray(table.column("offset").to_numpy())
    table = table.slice(int(np.searchsorted(offs, from_offset)))
    if max_records is not None:
        table = table.slice(0, max_records)
    if max_bytes is not None and table.num_rows:
        sizes = row_sizes(table)
        keep, total = 0, 0
        for s in sizes:  # the model: a plain loop
            if keep and total + s > max_bytes:
                break
            keep, total = keep + 1, total + s
        table = table.slice(0, keep)
    return table


@FAST
@given(batch=batches(min_size=1), data=st.data())
def test_read_from_offset_with_limits(batch: pa.RecordBatch, data: st.DataObject) -> None:
    offs = batch.column("offset").to_pylist()
    from_offset = data.draw(st.integers(offs[0] - 2, offs[-1] + 2))
    max_records = data.draw(st.one_of(st.none(), st.integers(1, 50)))
    max_bytes = data.draw(st.one_of(st.none(), st.integers(0, 3000)))
    column_sets = [["offset"], ["value", "offset"], ["timestamp"]]
    columns = data.draw(st.one_of(st.none(), st.sampled_from(column_sets)))
    encoded, _ = encode_segment(batch, base_offset=offs[0], last_offset=offs[-1], row_group_bytes=200)
    got = reader_for(encoded).read(from_offset, max_records=max_records, max_bytes=max_bytes, columns=columns)
    want = expected_read(batch, from_offset, max_records, max_bytes)
    if columns is not None:
        want = want.select(columns)
    assert got.equals(want)
    assert got.schema.equals(want.schema)


@FAST
@given(batch=batches(min_size=1), data=st.data())
def test_offset_for_timestamp(batch: pa.RecordBatch, data: st.DataObject) -> None:
    ts = batch.column("timestamp").to_pylist()
    offs = batch.column("offset").to_pylist()
    target = data.draw(st.one_of(st.sampled_from(ts), st.integers(-5, 2**50 + 5)))
    encoded, _ = encode_segment(batch, base_offset=offs[0], last_offset=offs[-1], row_group_bytes=150)
    want = next((o for o, t in zip(offs, ts, strict=True) if t >= target), None)
    assert reader_for(encoded).offset_for_timestamp(target) == want


def test_offset_for_timestamp_non_monotonic_across_row_groups() -> None:
    offsets = list(range(100, 400))
    ts = [1000 + (o % 50) * 10 for o in offsets]  # saw-tooth: every group repeats small timestamps
    ts[250] = 99_999  # one late record in the middle
    batch = simple_batch(offsets, ts, value_size=30)
    data, _ = encode_segment(batch, base_offset=100, last_offset=399, row_group_bytes=500)
    reader = reader_for(data)
    assert len(reader.row_groups) > 5
    assert reader.offset_for_timestamp(0) == 100
    assert reader.offset_for_timestamp(1005) == 101
    assert reader.offset_for_timestamp(1490) == 149
    assert reader.offset_for_timestamp(5000) == 350
    assert reader.offset_for_timestamp(99_999) == 350
    assert reader.offset_for_timestamp(100_000) is None


def test_read_limits_examples() -> None:
    batch = simple_batch(list(range(0, 200, 2)), value_size=100)  # each record 21 + 2..4 + 100 bytes
    data, _ = encode_segment(batch, base_offset=0, last_offset=250, row_group_bytes=1000)
    reader = reader_for(data)
    assert reader.read(51, max_records=3).column("offset").to_pylist() == [52, 54, 56]
    assert reader.read(0, max_bytes=1).column("offset").to_pylist() == [0]  # always one record
    one = int(row_sizes(reader.read(10, max_records=1))[0])
    assert reader.read(10, max_bytes=2 * one).num_rows == 2
    assert reader.read(10, max_bytes=20_000).num_rows == 95  # offsets 10..198
    assert reader.read(199).num_rows == 0  # past the last record, inside the range
    assert reader.read(1000).num_rows == 0
    assert reader.read(-5, max_records=1).column("offset").to_pylist() == [0]


def test_empty_segment_covers_a_range() -> None:
    data, summary = encode_segment(RECORD_SCHEMA.empty_table(), base_offset=5, last_offset=10)
    assert (summary.record_count, summary.size_bytes) == (0, 0)
    assert (summary.min_timestamp, summary.max_timestamp) == (-1, -1)
    reader = reader_for(data)
    assert (reader.base_offset, reader.last_offset, reader.record_count, reader.row_groups) == (5, 10, 0, [])
    assert reader.read(5).num_rows == 0 and reader.read(5).schema.equals(RECORD_SCHEMA)
    assert reader.read(5, columns=["key"]).column_names == ["key"]
    assert reader.offset_for_timestamp(0) is None
    assert reader.read_all(verify_crc32c=summary.crc32c).num_rows == 0


def test_readable_by_the_ecosystem() -> None:
    batch = simple_batch(list(range(10, 30)))
    data, _ = encode_segment(batch, base_offset=10, last_offset=29, row_group_bytes=200)
    table = pq.read_table(io.BytesIO(data))
    assert table.select(RECORD_SCHEMA.names).equals(pa.Table.from_batches([batch]))
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    kv = {k.decode(): v.decode() for k, v in meta.metadata.items()}
    assert kv["s3stream.format"] == str(SEGMENT_FORMAT_VERSION)
    assert [kv[f"s3stream.{k}"] for k in ("base_offset", "last_offset", "record_count")] == ["10", "29", "20"]
    assert meta.row_group(0).column(0).statistics.min == 10  # offset statistics for other engines


def test_row_sizes_with_headers_and_nulls() -> None:
    from .strategies import make_batch

    rows = [
        {"timestamp": 1, "key": None, "value": None, "headers": None, "horizon_ms": None},
        {"timestamp": 2, "key": b"ab", "value": b"xyz", "headers": [], "horizon_ms": 5},
        {"timestamp": 3, "key": b"k", "value": None,
         "headers": [{"key": "hé", "value": b"12"}, {"key": "", "value": None}], "horizon_ms": None},
    ]
    batch = make_batch(rows, [0, 1, 2])
    assert row_sizes(batch).tolist() == [21, 26, 21 + 1 + (3 + 2 + 8) + (0 + 0 + 8)]
    assert int(row_sizes(batch.slice(1)).sum()) == batch_nbytes(batch.slice(1))


def test_table_with_several_chunks() -> None:
    a, b = simple_batch(list(range(10))), simple_batch(list(range(10, 25)), seed=1)
    table = pa.Table.from_batches([a, b])
    data, summary = encode_segment(table, base_offset=0, last_offset=24, row_group_bytes=100)
    assert summary.size_bytes == batch_nbytes(a) + batch_nbytes(b)
    assert reader_for(data).read(0).equals(table.combine_chunks())


@pytest.mark.parametrize(("offsets", "base", "last"), [
    ([0, 2, 1], 0, 5),  # not increasing
    ([0, 1, 1], 0, 5),  # duplicate
    ([0, 1, 6], 0, 5),  # above last
    ([3, 4], 4, 9),  # below base
    ([], 5, 4),  # last < base
    ([], -1, 4),  # negative base
])
def test_encode_rejects_bad_offsets(offsets: list[int], base: int, last: int) -> None:
    with pytest.raises(InternalError):
        encode_segment(simple_batch(offsets), base_offset=base, last_offset=last)


def test_encode_rejects_wrong_schema() -> None:
    batch = simple_batch([1, 2])
    with pytest.raises(InternalError):
        encode_segment(batch.drop_columns(["horizon_ms"]), base_offset=1, last_offset=2)
    with pytest.raises(InternalError):
        encode_segment(batch, base_offset=1, last_offset=2, first_batch_max_timestamp=-2)


def test_invalid_read_arguments() -> None:
    data, _ = encode_segment(simple_batch([1, 2]), base_offset=1, last_offset=2)
    reader = reader_for(data)
    with pytest.raises(InvalidRequest):
        reader.read(1, max_records=0)
    with pytest.raises(InvalidRequest):
        reader.read(1, columns=["nope"])
    for bad in ([1, 0], [0, 0], [-1], [len(reader.row_groups)]):
        with pytest.raises(InvalidRequest, match="ascending"):
            reader.read_groups(bad)
    with pytest.raises(InvalidRequest):
        reader.read_groups([0], columns=["nope"])


def test_unsupported_version_is_corrupt(monkeypatch: pytest.MonkeyPatch) -> None:
    from s3stream.format.segment import writer

    monkeypatch.setattr(writer, "SEGMENT_FORMAT_VERSION", 99)
    data, _ = encode_segment(simple_batch([1, 2]), base_offset=1, last_offset=2)
    monkeypatch.undo()
    with pytest.raises(CorruptData, match="version"):
        reader_for(data).read(1)


def test_plain_parquet_is_not_a_segment() -> None:
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_batches([simple_batch([1, 2])]), sink)
    data = sink.getvalue()
    with pytest.raises(CorruptData, match="seg-under-test"):
        reader_for(data).read(0)
    with pytest.raises(CorruptData):
        reader_for(data).read_all()


def test_a_column_named_twice_is_still_a_column_subset() -> None:
    """Six names that miss a column are not "every column": no row-group CRC32C over a partial span."""
    data, _ = encode_segment(simple_batch(list(range(1, 200)), value_size=100), base_offset=1, last_offset=199,
                             row_group_bytes=2000)
    cols = ["key", "key", "value", "headers", "timestamp"]
    reader = reader_for(data)
    assert reader.read(1, columns=cols).num_rows == 199
    assert reader.read_groups([0, 2], columns=cols).column_names == cols
