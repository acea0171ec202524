"""SegmentWriter: the incremental encoder is the one encoder (byte-identical to encode_segment), validates
across writes, streams row groups as they complete, and patches the footer CRC before the footer leaves."""

from __future__ import annotations

import itertools

import crc32c
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from s3stream.base.errors import InternalError
from s3stream.format.segment import SegmentReader, SegmentSummary, SegmentWriter, encode_segment
from s3stream.format.segment.footer_crc import verify_footer

from .strategies import batches, simple_batch

FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def stream(parts: list[pa.Table], **kw: int) -> tuple[bytes, SegmentSummary, list[bytes]]:
    """Encode ``parts`` with one write each; the object, its summary and the sink's pieces."""
    pieces: list[bytes] = []
    writer = SegmentWriter(pieces.append, **kw)
    for part in parts:
        writer.write(part)
    summary = writer.finish()
    assert writer.bytes_emitted == summary.object_size
    return b"".join(pieces), summary, pieces


def split(table: pa.Table, cuts: list[int]) -> list[pa.Table]:
    bounds = [0, *sorted(c % (table.num_rows + 1) for c in cuts), table.num_rows]
    return [table.slice(a, b - a) for a, b in itertools.pairwise(bounds)]


@FAST
@given(batch=batches(), cuts=st.lists(st.integers(0, 10_000), max_size=6),
       row_group_bytes=st.sampled_from([1, 45, 200, 1000, 1 << 20]), fbmt=st.integers(-1, 2**40))
def test_streamed_bytes_equal_encode_segment(batch: pa.RecordBatch, cuts: list[int], row_group_bytes: int,
                                             fbmt: int) -> None:
    """Any split of the records into writes gives exactly the bytes of one encode of their concatenation."""
    offsets = batch.column("offset").to_pylist()
    base, last = (offsets[0] - 2, offsets[-1] + 5) if offsets else (3, 9)
    base = max(base, 0)
    parts = split(pa.Table.from_batches([batch]), cuts)
    kw = {"base_offset": base, "last_offset": last, "first_batch_max_timestamp": fbmt,
          "row_group_bytes": row_group_bytes}
    expected, expected_summary = encode_segment(pa.concat_tables(parts), **kw)
    data, summary, _ = stream(parts, **kw)
    assert data == expected
    assert summary == expected_summary


def test_one_write_equals_encode_segment_and_reads_back() -> None:
    batch = simple_batch(list(range(100, 400)), value_size=300, seed=3)
    table = pa.Table.from_batches([batch])
    expected, expected_summary = encode_segment(batch, base_offset=100, last_offset=450, row_group_bytes=8000)
    data, summary, _ = stream([table], base_offset=100, last_offset=450, row_group_bytes=8000)
    assert (data, summary) == (expected, expected_summary)


def test_footer_and_whole_object_crc_of_a_streamed_segment() -> None:
    table = pa.Table.from_batches([simple_batch(list(range(0, 2000, 2)), value_size=200, seed=4)])
    data, summary, _ = stream(split(table, [1, 333, 334, 700]), base_offset=0, last_offset=2500,
                              row_group_bytes=10_000, first_batch_max_timestamp=77)
    assert summary.crc32c == crc32c.crc32c(data)
    assert summary.object_size == len(data)
    footer_len = int.from_bytes(data[-8:-4], "little")
    verify_footer(data[-8 - footer_len:-8], source="streamed")  # the patched footer CRC holds
    reader = SegmentReader(lambda start, end: data[start:end], len(data), source="streamed")
    assert reader.read_all(verify_crc32c=summary.crc32c).equals(table)
    assert (reader.base_offset, reader.last_offset, reader.record_count) == (0, 2500, 1000)
    assert reader.footer.first_batch_max_timestamp == 77
    assert len(reader.row_groups) > 10
    assert reader.read(1001).column("offset")[0].as_py() == 1002


def test_row_groups_leave_as_they_complete() -> None:
    """The sink gets every finished row group during the writes; finish() adds the last group and the footer."""
    table = pa.Table.from_batches([simple_batch(list(range(3000)), value_size=1000, seed=5)])
    pieces: list[bytes] = []
    writer = SegmentWriter(pieces.append, base_offset=0, last_offset=2999, row_group_bytes=100_000)
    emitted_after_write = []
    for part in split(table, list(range(250, 3000, 250))):
        writer.write(part)
        emitted_after_write.append(writer.bytes_emitted)
    summary = writer.finish()
    assert emitted_after_write[0] > 0
    assert emitted_after_write == sorted(emitted_after_write)
    tail = summary.object_size - emitted_after_write[-1]
    assert tail < 2 * 100_000  # the last (partial) row group and the footer, never the segment
    assert max(len(p) for p in pieces) < 2 * 100_000
    assert b"".join(pieces) == encode_segment(pa.concat_tables(split(table, list(range(250, 3000, 250)))),
                                              base_offset=0, last_offset=2999, row_group_bytes=100_000)[0]


def test_empty_segment_streams_like_encode_segment() -> None:
    data, summary, _ = stream([], base_offset=5, last_offset=9)
    assert (data, summary) == encode_segment(simple_batch([]), base_offset=5, last_offset=9)
    assert summary.record_count == 0 and summary.min_timestamp == summary.max_timestamp == -1


@pytest.mark.parametrize(("first", "second"), [
    ([10, 11], [11, 12]),  # second write repeats an offset
    ([10, 11], [9]),  # goes back
    ([10, 11], [12, 30]),  # above last
    ([10], [12, 12]),  # not strictly increasing inside the write
])
def test_offsets_are_validated_across_writes(first: list[int], second: list[int]) -> None:
    pieces: list[bytes] = []
    writer = SegmentWriter(pieces.append, base_offset=10, last_offset=20, row_group_bytes=1)
    writer.write(simple_batch(first))
    before = writer.bytes_emitted
    with pytest.raises(InternalError):
        writer.write(simple_batch(second))
    assert writer.bytes_emitted == before  # validated before anything of it was encoded


def test_writer_rejects_bad_arguments_and_misuse() -> None:
    with pytest.raises(InternalError):
        SegmentWriter(lambda b: None, base_offset=5, last_offset=4)
    with pytest.raises(InternalError):
        SegmentWriter(lambda b: None, base_offset=0, last_offset=4, first_batch_max_timestamp=-2)
    writer = SegmentWriter(lambda b: None, base_offset=0, last_offset=4)
    with pytest.raises(InternalError):
        writer.write(simple_batch([0]).drop_columns(["horizon_ms"]))
    with pytest.raises(InternalError):
        writer.write(simple_batch([7]))
    writer.write(simple_batch([1]))
    writer.finish()
    with pytest.raises(InternalError):
        writer.write(simple_batch([2]))
    with pytest.raises(InternalError):
        writer.finish()
