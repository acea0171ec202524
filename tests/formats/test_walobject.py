"""WAL objects: round trips, index fetching, fences, validation, corruption of any byte."""

from __future__ import annotations

import json
import struct

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from s3stream.base.errors import CorruptData, InternalError
from s3stream.base.records import batch_nbytes
from s3stream.format.walobject import (
    INDEX_SUFFIX_BYTES,
    WAL_OBJECT_VERSION,
    WalChunkInput,
    WalObjectIndex,
    decode_chunk,
    decode_wal_index,
    encode_fence_object,
    encode_wal_object,
    read_wal_index,
)

from .strategies import batches, simple_batch

SOURCE = "wal/node-1/00000000000000000042.wal"
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def decode_all(data: bytes) -> tuple[WalObjectIndex, dict[str, pa.RecordBatch]]:
    index = read_wal_index(lambda s, e: data[s:e], len(data), source=SOURCE)
    return index, {c.log_id: decode_chunk(data[c.byte_start:c.byte_end], c, source=SOURCE) for c in index.chunks}


@st.composite
def chunk_inputs(draw: st.DrawFn) -> list[WalChunkInput]:
    log_ids = draw(st.lists(st.text(min_size=1, max_size=12), max_size=5, unique=True))
    out = []
    for log_id in log_ids:
        batch = draw(batches(max_size=20))
        if batch.num_rows:
            offs = batch.column("offset").to_pylist()
            rolls = draw(st.lists(st.integers(offs[0], offs[-1] + 1), unique=True, max_size=3))
        else:
            rolls = [draw(st.integers(0, 2**40))]
        out.append(WalChunkInput(log_id, batch, tuple(sorted(rolls))))
    return out


@FAST
@given(chunks=chunk_inputs(), seq=st.integers(0, 2**62), created=st.integers(0, 2**45))
def test_round_trip(chunks: list[WalChunkInput], seq: int, created: int) -> None:
    data, index = encode_wal_object(node_id="node-1", seq=seq, created_ms=created, chunks=chunks)
    decoded, got = decode_all(data)
    assert decoded == index
    assert (decoded.node_id, decoded.seq, decoded.created_ms, decoded.fence) == ("node-1", seq, created, False)
    assert [c.log_id for c in decoded.chunks] == [c.log_id for c in chunks]
    for chunk in chunks:
        entry = decoded.chunk_for(chunk.log_id)
        assert entry is not None
        assert got[chunk.log_id].equals(chunk.batch)
        assert entry.record_count == chunk.batch.num_rows
        assert entry.size_bytes == batch_nbytes(chunk.batch)
        assert entry.roll_offsets == chunk.roll_offsets
        if chunk.batch.num_rows:
            ts = chunk.batch.column("timestamp").to_pylist()
            offs = chunk.batch.column("offset").to_pylist()
            assert (entry.base_offset, entry.last_offset) == (offs[0], offs[-1])
            assert (entry.first_timestamp, entry.max_timestamp) == (ts[0], max(ts))
        else:
            assert (entry.base_offset, entry.last_offset) == (chunk.roll_offsets[0], chunk.roll_offsets[0] - 1)
    assert decoded.chunk_for("no-such-log") is None


def test_fence_object() -> None:
    data = encode_fence_object(node_id="node-1", seq=7, created_ms=123)
    index, chunks = decode_all(data)
    assert index == WalObjectIndex("node-1", 7, 123, True, ())
    assert chunks == {}


def test_index_larger_than_the_first_fetch_needs_a_second() -> None:
    chunks = [WalChunkInput(f"topic-with-a-long-name-{i:05d}/{i}", simple_batch([i]), ()) for i in range(700)]
    data, index = encode_wal_object(node_id="n", seq=1, created_ms=0, chunks=chunks)
    index_len = struct.unpack_from("<QI", data, len(data) - 24)[1]
    assert index_len > INDEX_SUFFIX_BYTES
    calls: list[tuple[int, int]] = []

    def fetch(start: int, end: int) -> bytes:
        calls.append((start, end))
        return data[start:end]

    assert read_wal_index(fetch, len(data), source=SOURCE) == index
    assert calls == [(len(data) - INDEX_SUFFIX_BYTES, len(data)), (len(data) - index_len - 24, len(data))]
    tail = data[-100:]
    assert decode_wal_index(tail, len(data), source=SOURCE) == index_len + 24
    assert decode_wal_index(tail[-10:], len(data), source=SOURCE) == 24


def test_small_object_is_one_fetch() -> None:
    data, index = encode_wal_object(node_id="n", seq=1, created_ms=0,
                                    chunks=[WalChunkInput("a", simple_batch([1, 2, 3]), (2,))])
    calls: list[tuple[int, int]] = []
    assert read_wal_index(lambda s, e: calls.append((s, e)) or data[s:e], len(data), source=SOURCE) == index
    assert calls == [(0, len(data))]


@pytest.mark.parametrize(("chunks", "match"), [
    ([WalChunkInput("a", simple_batch([1])), WalChunkInput("a", simple_batch([2]))], "one chunk per log"),
    ([WalChunkInput("a", simple_batch([2, 1]))], "strictly increasing"),
    ([WalChunkInput("a", simple_batch([1, 1]))], "strictly increasing"),
    ([WalChunkInput("a", simple_batch([-1, 0]))], ">= 0"),
    ([WalChunkInput("a", simple_batch([1, 2]).drop_columns(["horizon_ms"]))], "RECORD_SCHEMA"),
    ([WalChunkInput("a", simple_batch([1, 2]), (4,))], "roll_offsets"),
    ([WalChunkInput("a", simple_batch([1, 2]), (0,))], "roll_offsets"),
    ([WalChunkInput("a", simple_batch([1, 2]), (2, 2))], "roll_offsets"),
    ([WalChunkInput("a", simple_batch([]))], "carries no roll"),
    ([WalChunkInput("", simple_batch([1]))], "invalid"),
])
def test_encode_validates(chunks: list[WalChunkInput], match: str) -> None:
    with pytest.raises(InternalError, match=match):
        encode_wal_object(node_id="n", seq=1, created_ms=0, chunks=chunks)


def test_encode_validates_header() -> None:
    with pytest.raises(InternalError):
        encode_wal_object(node_id="", seq=1, created_ms=0, chunks=[])
    with pytest.raises(InternalError):
        encode_fence_object(node_id="n", seq=-1, created_ms=0)


@pytest.fixture(scope="module")
def small_object() -> tuple[bytes, dict[str, pa.RecordBatch]]:
    chunks = [WalChunkInput("orders-0", simple_batch([5, 6, 8], value_size=12), (8,)),
              WalChunkInput("orders-1", simple_batch([100], value_size=3, seed=2), ()),
              WalChunkInput("clicks-0", simple_batch([], value_size=3), (40,))]
    data, _ = encode_wal_object(node_id="node-1", seq=42, created_ms=1_700_000_000_000, chunks=chunks)
    return data, {c.log_id: c.batch for c in chunks}


def test_every_flipped_byte_is_detected(small_object: tuple[bytes, dict[str, pa.RecordBatch]]) -> None:
    data, good = small_object
    for i in range(len(data)):
        for mask in (0x01, 0x80):
            corrupted = bytearray(data)
            corrupted[i] ^= mask
            with pytest.raises(CorruptData, match=SOURCE):
                decode_all(bytes(corrupted))
    _, got = decode_all(data)
    assert all(got[k].equals(v) for k, v in good.items())


def test_truncated_or_padded_objects_are_corrupt(small_object: tuple[bytes, dict[str, pa.RecordBatch]]) -> None:
    data, _ = small_object
    for bad in [data[:-1], data[1:], data[:30], data + b"\0", b"", b"S3WO" * 8]:
        with pytest.raises(CorruptData):
            decode_all(bad)
    with pytest.raises(CorruptData, match="returned"):  # the store has fewer bytes than the listing said
        read_wal_index(lambda s, e: data[s:e], len(data) + 5, source=SOURCE)


def test_chunk_checks(small_object: tuple[bytes, dict[str, pa.RecordBatch]]) -> None:
    data, _ = small_object
    index, _ = decode_all(data)
    chunk = index.chunks[0]
    raw = data[chunk.byte_start:chunk.byte_end]
    with pytest.raises(CorruptData, match="bytes"):
        decode_chunk(raw[:-1], chunk, source=SOURCE)
    other = index.chunks[1]
    with pytest.raises(CorruptData):  # the wrong chunk's bytes for this entry
        decode_chunk(data[other.byte_start:other.byte_end], chunk, source=SOURCE)


def _rebuild(doc: dict[str, object], chunks_bytes: bytes) -> bytes:
    """An object with a hand-made index and a *valid* CRC, to reach the index validation."""
    import crc32c

    body = json.dumps(doc, separators=(",", ":")).encode()
    header = b"S3WO" + bytes([WAL_OBJECT_VERSION]) + b"\0\0\0"
    index_offset = len(header) + len(chunks_bytes)
    trailer = struct.pack("<QIIB3x4s", index_offset, len(body), crc32c.crc32c(body), WAL_OBJECT_VERSION, b"S3WO")
    return header + chunks_bytes + body + trailer


@pytest.mark.parametrize("mutate", [
    lambda d: d.update(v=2),
    lambda d: d.update(seq="1"),
    lambda d: d.update(fence=1),
    lambda d: d.update(node_id=""),
    lambda d: d.update(fence=True),  # a fence with chunks
    lambda d: d["chunks"][0].__setitem__(8, 10_000),  # byte_end beyond the index
    lambda d: d["chunks"][0].__setitem__(7, 0),  # inside the header
    lambda d: d["chunks"][1].__setitem__(7, d["chunks"][0][7]),  # overlapping chunks
    lambda d: d["chunks"][1].__setitem__(0, d["chunks"][0][0]),  # the same log twice
    lambda d: d["chunks"][0].__setitem__(3, True),  # a bool is not an int
    lambda d: d["chunks"][0].__setitem__(10, [70]),  # roll outside the chunk
    lambda d: d["chunks"][0].__setitem__(10, [8, 6]),  # rolls out of order
    lambda d: d["chunks"][0].pop(),
    lambda d: d.pop("created_ms"),
], ids=lambda f: "")
def test_invalid_index_with_valid_crc_is_corrupt(small_object: tuple[bytes, dict[str, pa.RecordBatch]],
                                                 mutate: object) -> None:
    data, _ = small_object
    index_offset, index_len = struct.unpack_from("<QI", data, len(data) - 24)
    doc = json.loads(data[index_offset:index_offset + index_len])
    assert _rebuild(doc, data[8:index_offset]) == data  # the helper reproduces the encoder
    mutate(doc)  # type: ignore[operator]
    with pytest.raises(CorruptData, match=SOURCE):
        decode_all(_rebuild(doc, data[8:index_offset]))


def test_chunk_content_disagreeing_with_its_entry_is_corrupt(
        small_object: tuple[bytes, dict[str, pa.RecordBatch]]) -> None:
    data, _ = small_object
    index, _ = decode_all(data)
    chunk = index.chunks[0]
    raw = data[chunk.byte_start:chunk.byte_end]
    import dataclasses

    for change in [{"record_count": 2, "last_offset": 6}, {"base_offset": 4}, {"last_offset": 9},
                   {"max_timestamp": 1}, {"first_timestamp": 1}, {"size_bytes": 1000}]:
        with pytest.raises(CorruptData, match="disagrees"):
            decode_chunk(raw, dataclasses.replace(chunk, **change), source=SOURCE)


@pytest.mark.benchmark
def test_throughput_8_mib_of_1_kib_records() -> None:
    """Encode + decode of one 8 MiB WAL object stays far above network speed (figures in docs/formats.md)."""
    from s3stream.base.clock import SystemClock

    from .test_segment_ranged import big_batch

    batch = big_batch(8192, 1024)
    clock = SystemClock()
    best = float("inf")
    for _ in range(4):  # the first round pays for fresh memory pages
        start = clock.monotonic()
        data, index = encode_wal_object(node_id="n", seq=1, created_ms=0, chunks=[WalChunkInput("a", batch)])
        chunk = index.chunks[0]
        out = decode_chunk(data[chunk.byte_start:chunk.byte_end], chunk, source=SOURCE)
        best = min(best, clock.monotonic() - start)
    assert out.equals(batch)
    assert 8 * (1 << 20) / best > 50 * (1 << 20)  # ~700 MiB/s on the dev machine; > 50 even on slow CI


def test_empty_object_without_chunks() -> None:
    data, index = encode_wal_object(node_id="n", seq=0, created_ms=0, chunks=[])
    assert decode_all(data) == (index, {})
    assert index.chunks == () and not index.fence
