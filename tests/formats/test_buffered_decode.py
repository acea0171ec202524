"""Row groups decoded from cached extents as native buffers (``s3stream.format.segment.buffered``): the same
tables pyarrow reads from the whole file, never a byte outside the extents, and a refusal (None) when a
group is not inside one extent."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3stream.format.segment import buffered
from s3stream.format.segment.buffered import chunk_bounds, decode_in_memory


def _file(*, dictionary: bool) -> bytes:
    n = 3000
    table = pa.table({"offset": pa.array(range(n), pa.int64()),
                      "key": pa.array([b"k%d" % (i % 17) for i in range(n)], pa.binary()),
                      "value": pa.array([b"v%06d" % i * 20 for i in range(n)], pa.binary())})
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=500, use_dictionary=dictionary, compression="zstd",
                   write_page_checksum=True)
    return sink.getvalue()


def _extent(data: bytes, start: int, end: int) -> tuple[int, bytes]:
    """Bytes [start, end) of the file, as a separate object (nothing before or after it is readable)."""
    return start, bytes(data[start:end])


@pytest.mark.parametrize("dictionary", [False, True])
@pytest.mark.parametrize("columns", [("offset", "key", "value"), ("offset", "key")])
def test_groups_across_two_extents_decode_as_from_the_whole_file(dictionary: bool,
                                                                  columns: tuple[str, ...]) -> None:
    data = _file(dictionary=dictionary)
    meta = pq.ParquetFile(pa.BufferReader(data)).metadata
    spans = [chunk_bounds(meta.row_group(g), columns) for g in range(meta.num_row_groups)]
    # groups 1-2 in one extent, 4 in another; the bytes of 0, 3 and 5 are nowhere in memory
    extents = [_extent(data, spans[1][0], spans[2][1]), _extent(data, spans[4][0], spans[4][1])]
    got = decode_in_memory(meta, extents, spans, [1, 2, 4], columns, verify_pages=True)
    want = pq.ParquetFile(pa.BufferReader(data)).read_row_groups([1, 2, 4], columns=list(columns))
    assert got is not None and got.equals(want)


@pytest.mark.parametrize("verify_pages", [False, True])
def test_groups_in_many_small_extents_decode_in_one_call(verify_pages: bool,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    data = _file(dictionary=False)
    meta = pq.ParquetFile(pa.BufferReader(data)).metadata
    columns = ("offset", "key")  # the offset map's projection: one small extent per group
    spans = [chunk_bounds(meta.row_group(g), columns) for g in range(meta.num_row_groups)]
    picked = [0, 2, 3, 5]
    extents = [_extent(data, *spans[g]) for g in reversed(picked)]  # in no particular order
    calls: list[list[int]] = []
    real = buffered._decode_extent

    def counting(*args: object, **kwargs: object) -> pa.Table | None:
        calls.append(list(args[3]))  # type: ignore[call-overload]
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(buffered, "_decode_extent", counting)
    got = decode_in_memory(meta, extents, spans, picked, columns, verify_pages=verify_pages)
    want = pq.ParquetFile(pa.BufferReader(data)).read_row_groups(picked, columns=list(columns))
    assert got is not None and got.equals(want)
    assert calls == [picked]


def test_a_corrupt_byte_in_an_assembled_group_fails_its_page_checksum() -> None:
    data = _file(dictionary=False)
    meta = pq.ParquetFile(pa.BufferReader(data)).metadata
    columns = ("offset", "key")
    spans = [chunk_bounds(meta.row_group(g), columns) for g in range(meta.num_row_groups)]
    extents = [_extent(data, *spans[g]) for g in (1, 4)]
    start, bad = extents[1]
    flipped = bytearray(bad)
    flipped[len(flipped) // 2] ^= 0xFF
    extents[1] = (start, bytes(flipped))
    with pytest.raises((OSError, pa.ArrowException), match=r"(?i)checksum|crc"):
        decode_in_memory(meta, extents, spans, [1, 4], columns, verify_pages=True)


def test_a_group_outside_every_extent_is_refused() -> None:
    data = _file(dictionary=False)
    meta = pq.ParquetFile(pa.BufferReader(data)).metadata
    columns = ("offset", "key", "value")
    spans = [chunk_bounds(meta.row_group(g), columns) for g in range(meta.num_row_groups)]
    short = _extent(data, spans[1][0], spans[1][1] - 1)  # one byte of group 1 missing
    assert decode_in_memory(meta, [short], spans, [1], columns, verify_pages=False) is None
    assert decode_in_memory(meta, [_extent(data, *spans[1])], spans, [1, 2], columns, verify_pages=False) is None


def test_chunk_bounds_hold_the_chunk_from_either_start_pyarrow_may_take() -> None:
    rg = pq.ParquetFile(pa.BufferReader(_file(dictionary=True))).metadata.row_group(0)
    key = rg.column(1)
    assert key.has_dictionary_page and 0 < key.dictionary_page_offset < key.data_page_offset
    start, end = chunk_bounds(rg, ("key",))
    assert (start, end) == (key.dictionary_page_offset, key.data_page_offset + key.total_compressed_size)
    plain_rg = pq.ParquetFile(pa.BufferReader(_file(dictionary=False))).metadata.row_group(0)
    plain = plain_rg.column(1)
    assert chunk_bounds(plain_rg, ("key",)) == (plain.data_page_offset,
                                               plain.data_page_offset + plain.total_compressed_size)


def test_corrupt_bytes_in_an_extent_raise_not_crash() -> None:
    data = bytearray(_file(dictionary=False))
    meta = pq.ParquetFile(pa.BufferReader(bytes(data))).metadata
    columns = ("offset", "key", "value")
    spans = [chunk_bounds(meta.row_group(g), columns) for g in range(meta.num_row_groups)]
    start, end = spans[2]
    data[(start + end) // 2] ^= 0xFF
    with pytest.raises((OSError, pa.ArrowException)):
        decode_in_memory(meta, [_extent(bytes(data), start, end)], spans, [2], columns, verify_pages=True)
