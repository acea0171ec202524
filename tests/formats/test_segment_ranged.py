"""Segment reads through ranged fetches: how much is fetched, footer fetches, errors passing through."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pytest

from s3stream.base.errors import CorruptData, ObjectNotFound, TransientError
from s3stream.base.records import HEADER_TYPE, RECORD_SCHEMA
from s3stream.format.segment import FOOTER_FETCH_BYTES, RangedFile, SegmentReader, encode_segment
from s3stream.format.segment.readahead import ReadAhead

from .strategies import simple_batch

MIB = 1 << 20


class CountingFetch:
    """A fake ranged GET over bytes that records every request."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.calls: list[tuple[int, int]] = []
        self.fail_after: int | None = None
        self.error: Exception = ObjectNotFound("gone", key="k")

    def __call__(self, start: int, end: int) -> bytes:
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise self.error
        self.calls.append((start, end))
        return self.data[start:end]

    @property
    def nbytes(self) -> int:
        return sum(e - s for s, e in self.calls)


def big_batch(n: int, value_size: int, seed: int = 7) -> pa.RecordBatch:
    """``n`` records of incompressible ``value_size``-byte values, built without Python loops."""
    rng = np.random.default_rng(seed)
    value_offsets = pa.py_buffer(np.arange(n + 1, dtype=np.int32) * value_size)
    value_bytes = pa.py_buffer(rng.bytes(n * value_size))
    values = pa.Array.from_buffers(pa.binary(), n, [None, value_offsets, value_bytes])
    offsets = np.arange(n, dtype=np.int64) * 2
    return pa.RecordBatch.from_arrays([
        pa.array(offsets), pa.array(1_700_000_000_000 + offsets),
        pa.array(offsets.astype(str)).cast(pa.binary()),
        values, pa.nulls(n, HEADER_TYPE), pa.nulls(n, pa.int64())], schema=RECORD_SCHEMA)


@pytest.fixture(scope="module")
def big_segment() -> tuple[bytes, pa.RecordBatch]:
    batch = big_batch(64 * 1024, 1024)  # 64 MiB of 1 KiB records
    data, summary = encode_segment(batch, base_offset=0, last_offset=2 * batch.num_rows)
    assert summary.object_size > 64 * MIB
    return data, batch


def test_one_offset_in_64_mib_fetches_little(big_segment: tuple[bytes, pa.RecordBatch]) -> None:
    data, _ = big_segment
    fetch = CountingFetch(data)
    reader = SegmentReader(fetch, len(data), source="big")
    got = reader.read(100_001, max_records=1)
    assert got.column("offset").to_pylist() == [100_002]
    assert fetch.nbytes < 2 * MIB
    assert len(fetch.calls) == 2  # the footer, then the one row group
    assert fetch.calls[0] == (len(data) - FOOTER_FETCH_BYTES, len(data))


def test_offset_for_timestamp_fetches_only_index_columns(big_segment: tuple[bytes, pa.RecordBatch]) -> None:
    data, _ = big_segment
    fetch = CountingFetch(data)
    reader = SegmentReader(fetch, len(data), source="big")
    assert reader.offset_for_timestamp(1_700_000_000_000 + 77_777) == 77_778
    assert fetch.nbytes < FOOTER_FETCH_BYTES + 64 * 1024


def test_sequential_consumer_fetches_footer_once(big_segment: tuple[bytes, pa.RecordBatch]) -> None:
    data, _ = big_segment
    fetch = CountingFetch(data)
    reader = SegmentReader(fetch, len(data), source="big")
    pos, seen = 20_000, []
    for _ in range(300):  # a consumer polling 100 records at a time
        table = reader.read(pos, max_records=100, columns=["offset"])
        seen.append(table.column("offset").to_numpy())
        pos = int(seen[-1][-1]) + 1
    got = np.concatenate(seen)
    assert got.tolist() == list(range(20_000, 20_000 + 2 * 30_000, 2))
    footer_fetches = [c for c in fetch.calls if c[1] == len(data)]
    assert len(footer_fetches) == 1
    # each byte of the row groups crossed is fetched once: ~30k records of ~1 KiB, one column only
    assert fetch.nbytes < 2 * MIB + FOOTER_FETCH_BYTES
    starts = [c[0] for c in fetch.calls]
    assert len(starts) == len(set(starts))


def test_full_sequential_read_fetches_each_byte_once(big_segment: tuple[bytes, pa.RecordBatch]) -> None:
    data, batch = big_segment
    fetch = CountingFetch(data)
    reader = SegmentReader(fetch, len(data), source="big")
    pos, rows = 0, 0
    while True:
        table = reader.read(pos, max_bytes=3 * MIB)
        if table.num_rows == 0:
            break
        rows += table.num_rows
        pos = table.column("offset")[-1].as_py() + 1
    assert rows == batch.num_rows
    assert fetch.nbytes < len(data) + FOOTER_FETCH_BYTES


def test_large_footer_needs_exactly_two_fetches() -> None:
    batch = simple_batch(list(range(3000)), value_size=4)
    data, _ = encode_segment(batch, base_offset=0, last_offset=2999, row_group_bytes=1)  # 3000 row groups
    footer_len = int.from_bytes(data[-8:-4], "little")
    assert footer_len > FOOTER_FETCH_BYTES
    fetch = CountingFetch(data)
    reader = SegmentReader(fetch, len(data), source="s")
    assert len(reader.row_groups) == 3000
    assert len(fetch.calls) == 2
    assert reader.read(1234, max_records=2).column("offset").to_pylist() == [1234, 1235]
    assert reader.offset_for_timestamp(1_700_000_000_000 + 2999) == 2999


def test_read_all_is_one_fetch_and_checks_crc() -> None:
    batch = simple_batch(list(range(50)))
    data, summary = encode_segment(batch, base_offset=0, last_offset=49, row_group_bytes=100)
    fetch = CountingFetch(data)
    reader = SegmentReader(fetch, len(data), source="s")
    assert reader.read_all(verify_crc32c=summary.crc32c, columns=["offset"]).num_rows == 50
    assert fetch.calls == [(0, len(data))]
    with pytest.raises(CorruptData, match="CRC32C"):
        reader.read_all(verify_crc32c=summary.crc32c ^ 1)


@pytest.mark.parametrize("error", [ObjectNotFound("gone", key="k"), TransientError("reset")])
def test_fetch_errors_pass_through(error: Exception, big_segment: tuple[bytes, pa.RecordBatch]) -> None:
    data, _ = big_segment
    fetch = CountingFetch(data)
    fetch.error = error
    fetch.fail_after = 0
    with pytest.raises(type(error)):
        SegmentReader(fetch, len(data), source="big").read(0)
    fetch.fail_after = 1  # the footer works, the row group fetch fails (inside pyarrow's read)
    fetch.calls.clear()
    reader = SegmentReader(fetch, len(data), source="big", block_bytes=64 * 1024)
    with pytest.raises(type(error)):
        reader.read(50_000)
    fetch.fail_after = None
    assert reader.read(50_000, max_records=1).column("offset").to_pylist() == [50_000]


def test_object_size_mismatch_is_corrupt() -> None:
    batch = simple_batch(list(range(20)))
    data, _ = encode_segment(batch, base_offset=0, last_offset=19, row_group_bytes=100)
    for size in (len(data) - 1, len(data) + 1, len(data) + 100_000, 5):
        padded = data + b"\0" * 100_000
        with pytest.raises(CorruptData):
            SegmentReader(lambda s, e, d=padded: d[s:e], size, source="s").read(0)
    with pytest.raises(CorruptData, match="returned"):  # the store holds fewer bytes than the manifest says
        SegmentReader(lambda s, e: data[s:e], len(data) + 10, source="s").read(0)


# ---------------------------------------------------------------------------------------------- RangedFile


def test_ranged_file_behaves_like_a_file() -> None:
    blob = bytes(range(256)) * 1000
    fetch = CountingFetch(blob)
    f = RangedFile(fetch, len(blob), source="r", block_bytes=4096)
    ref = io.BytesIO(blob)
    for pos, n in [(0, 10), (100, 5000), (250_000, 100), (255_990, 100), (3, 0)]:
        assert f.seek(pos) == ref.seek(pos)
        assert f.read(n) == ref.read(n)
        assert f.tell() == ref.tell()
    assert f.seek(-10, io.SEEK_END) == len(blob) - 10
    assert f.read() == blob[-10:]
    assert f.read(5) == b""
    buf = bytearray(7)
    f.seek(1000)
    assert f.readinto(buf) == 7 and bytes(buf) == blob[1000:1007]
    with pytest.raises(ValueError):
        f.seek(-1)


def test_ranged_file_read_ahead_grows_on_sequential_misses() -> None:
    blob = bytes(1 << 20)
    fetch = CountingFetch(blob)
    f = RangedFile(fetch, len(blob), source="r", block_bytes=256 * 1024, cache_bytes=1 << 20)
    while f.read(1000):
        pass
    sizes = [e - s for s, e in fetch.calls]
    assert sizes[:3] == [64 * 1024, 128 * 1024, 256 * 1024]
    assert max(sizes) == 256 * 1024 and sum(sizes) == len(blob)


def test_ranged_file_prefetch_prime_and_short_fetch() -> None:
    blob = bytes(range(100)) * 10
    fetch = CountingFetch(blob)
    f = RangedFile(fetch, len(blob), source="r", block_bytes=64)
    f.prime(900, blob[900:])
    assert f.covers(950, 1000) and not f.covers(800, 950)
    f.prefetch(100, 300)
    f.prefetch(150, 200)  # already cached: no fetch
    assert fetch.calls == [(100, 300)]
    f.seek(120)
    assert f.read(100) == blob[120:220] and len(fetch.calls) == 1
    short = RangedFile(lambda s, e: blob[s:e][:-1], len(blob), source="short-src")
    with pytest.raises(CorruptData, match="short-src"):
        short.read(10)


def test_fetch_error_inside_pyarrow_read_passes_through(monkeypatch: pytest.MonkeyPatch,
                                                        big_segment: tuple[bytes, pa.RecordBatch]) -> None:
    data, _ = big_segment
    # nothing is fetched ahead of pyarrow's reads: pyarrow fetches via RangedFile
    monkeypatch.setattr(ReadAhead, "fetch_needed", lambda self, groups, g, *a, **k: g + 1)
    monkeypatch.setattr(ReadAhead, "keep_ahead", lambda *a, **k: None)
    monkeypatch.setattr(RangedFile, "wait", lambda *a, **k: None)
    fetch = CountingFetch(data)
    reader = SegmentReader(fetch, len(data), source="big")
    cols = ["offset", "value"]  # a column subset: whole row groups are fetched before pyarrow runs (CRC32C)
    assert reader.read(10, max_records=1, columns=cols).column("offset").to_pylist() == [10]
    assert len(fetch.calls) >= 2  # the footer, then pyarrow's own (pre-buffered) read did the fetching
    fetch.fail_after = len(fetch.calls)
    fetch.error = TransientError("connection reset")
    with pytest.raises(TransientError, match="connection reset"):
        reader.read(90_000, max_records=1, columns=cols)


class CountingFetchMany:
    """A fake ``fetch_many`` over bytes recording each call's spans (``cut`` bytes short when asked)."""

    def __init__(self, data: bytes, *, cut: int = 0) -> None:
        self.data = data
        self.calls: list[list[tuple[int, int]]] = []
        self.cut = cut

    def __call__(self, spans: list[tuple[int, int]]) -> list[bytes]:
        self.calls.append(list(spans))
        return [self.data[a:b - self.cut] for a, b in spans]


def test_key_scan_fetches_its_column_chunks_in_one_fetch_many_call(
        big_segment: tuple[bytes, pa.RecordBatch]) -> None:
    data, _ = big_segment
    fetch, many = CountingFetch(data), CountingFetchMany(data)
    reader = SegmentReader(fetch, len(data), source="big", fetch_many=many)
    groups = list(range(len(reader.row_groups)))[5:40:3]
    got = reader.read_groups(groups, columns=["key"])
    plain = SegmentReader(CountingFetch(data), len(data), source="big").read_groups(groups, columns=["key"])
    assert got.equals(plain)
    assert len(many.calls) == 1 and len(many.calls[0]) == len(groups)  # a range per group, one call
    assert len(fetch.calls) == 1  # the footer only
    # whole row groups (every column) still go through fetch: big ranges, fetched concurrently
    assert reader.read_groups([0, 1]).num_rows == sum(g.num_rows for g in reader.row_groups[:2])
    assert len(many.calls) == 1


def test_a_short_fetch_many_range_is_corrupt_data_and_kept_as_the_fetch_error() -> None:
    blob = bytes(range(100)) * 10
    f = RangedFile(CountingFetch(blob), len(blob), source="many-src", fetch_many=CountingFetchMany(blob, cut=1))
    with pytest.raises(CorruptData, match="many-src"):
        f.load([(0, 10), (500, 600)])
    assert isinstance(f.fetch_error, CorruptData)


def test_ranged_file_load_skips_what_it_holds_and_counts_each_range() -> None:
    blob = bytes(range(100)) * 10
    many = CountingFetchMany(blob)
    f = RangedFile(CountingFetch(blob), len(blob), source="r", cache_bytes=1000, fetch_many=many)
    f.prime(0, blob[:100])
    f.load([(10, 20), (200, 300), (950, 1200), (400, 400)])  # held, fetched, clipped at the end, empty
    assert many.calls == [[(200, 300), (950, 1000)]]
    assert (f.fetch_count, f.fetched_bytes) == (2, 150)
    f.seek(200)
    assert f.read(100) == blob[200:300]
    plain = CountingFetch(blob)
    g = RangedFile(plain, len(blob), source="r", cache_bytes=1000)
    g.load([(0, 10), (500, 600)])  # no fetch_many: one fetch per range (on the fetch pool)
    assert sorted(plain.calls) == [(0, 10), (500, 600)]
