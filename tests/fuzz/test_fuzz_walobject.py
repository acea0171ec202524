"""Fuzzing the WAL object decoder (``s3stream.format.walobject``): the index (``read_wal_index``) and the
chunks (``decode_chunk``) of any bytes are decoded or refused with CorruptData naming the source; damage is
always detected; an index or chunk forged behind recomputed CRCs is refused by the checks behind them or
yields records that agree with their index entry."""

from __future__ import annotations

import dataclasses
import json
import struct
from typing import Any

import crc32c
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from s3stream.base.errors import CorruptData
from s3stream.base.producer import ProducerAppend
from s3stream.base.records import RECORD_SCHEMA, batch_nbytes
from s3stream.format.walobject import (
    WalChunkIndex,
    WalChunkInput,
    WalObjectIndex,
    decode_chunk,
    encode_fence_object,
    encode_wal_object,
    read_wal_index,
)
from tests.formats.strategies import batches, simple_batch

from .kit import FUZZ, edited_json, fuzz, mutated, mutations, typed_or_value

SOURCE = "wal/n-01/00000000000000000003.wal"
_TRAILER = struct.Struct("<QIIB3x4s")  # index_offset, index_length, index_crc32c, version, magic


def _objects() -> list[bytes]:
    data, _ = encode_wal_object(node_id="n-01", seq=3, created_ms=1_700_000_000_000, committed=(0, 3), chunks=[
        WalChunkInput("orders/t-1/0", simple_batch([1, 2, 3]), (2,)),
        WalChunkInput("orders/t-1/1", simple_batch([7, 9], value_size=3), (),
                      (ProducerAppend(5, 0, 0, 1, 7), ProducerAppend(5, 0, 1, 1, 9))),
        WalChunkInput("logs/t-2/0", simple_batch([0], value_size=0)[:0], (4,)),
    ])
    close = encode_fence_object(node_id="n-01", seq=4, created_ms=5, committed=(0, 4),
                                ends=[("orders/t-1/0", 4), ("orders/t-1/1", 10)])
    return [data, close]


_VALID = _objects()


def _decode_all(data: bytes) -> tuple[WalObjectIndex, list[pa.RecordBatch]]:
    index = read_wal_index(lambda s, e: data[s:e], len(data), source=SOURCE)
    return index, [decode_chunk(data[c.byte_start:c.byte_end], c, source=SOURCE) for c in index.chunks]


def _outcome(data: bytes) -> tuple[WalObjectIndex, list[pa.RecordBatch]] | BaseException:
    return typed_or_value(lambda: _decode_all(data), CorruptData)


def _assert_agrees(batch: pa.RecordBatch, chunk: WalChunkIndex) -> None:
    """What a decoded chunk promises its readers: RECORD_SCHEMA without nulls where it allows none, and the
    count, offset range, timestamps and size its index entry gives."""
    assert batch.schema.equals(RECORD_SCHEMA)
    assert batch.column("offset").null_count == 0 and batch.column("timestamp").null_count == 0
    assert batch.num_rows == chunk.record_count and batch_nbytes(batch) == chunk.size_bytes
    offsets = batch.column("offset").to_pylist()
    assert offsets == sorted(set(offsets))
    if offsets:
        assert (offsets[0], offsets[-1]) == (chunk.base_offset, chunk.last_offset)
        assert max(batch.column("timestamp").to_pylist()) == chunk.max_timestamp


def _assert_sound(result: tuple[WalObjectIndex, list[pa.RecordBatch]]) -> None:
    index, chunks = result
    for batch, chunk in zip(chunks, index.chunks, strict=True):
        _assert_agrees(batch, chunk)


def _split(data: bytes) -> tuple[bytes, dict[str, Any]]:
    """(header + chunks, the index document) of a valid object."""
    index_offset, index_len, _, _, _ = _TRAILER.unpack_from(data, len(data) - _TRAILER.size)
    return data[:index_offset], json.loads(data[index_offset:index_offset + index_len])


def _rebuild(front: bytes, index: bytes) -> bytes:
    """``front`` + ``index`` + a trailer whose lengths and index CRC32C match them."""
    return front + index + _TRAILER.pack(len(front), len(index), crc32c.crc32c(index), 1, b"S3WO")


@FUZZ
@given(st.binary(max_size=400))
def test_arbitrary_bytes_are_corrupt_or_sound(data: bytes) -> None:
    got = _outcome(data)
    if isinstance(got, CorruptData):
        assert got.source == SOURCE
    else:
        _assert_sound(got)  # type: ignore[arg-type]


@FUZZ
@given(st.binary(max_size=300), st.integers(0, 300))
def test_arbitrary_bytes_before_a_valid_trailer_are_corrupt_or_sound(index: bytes, front_len: int) -> None:
    got = _outcome(_rebuild(b"S3WO\x01\0\0\0" + bytes(front_len), index))
    if not isinstance(got, CorruptData):
        _assert_sound(got)  # type: ignore[arg-type]


@FUZZ
@given(st.sampled_from(range(len(_VALID))), mutations())
def test_damaged_objects_are_refused(which: int, ops: list[tuple[str, int, int, int]]) -> None:
    good = _VALID[which]
    bad = mutated(good, ops)
    got = _outcome(bad)
    if bad == good:
        assert not isinstance(got, BaseException)
    else:
        assert isinstance(got, CorruptData), "a damaged WAL object decoded"
        assert got.source == SOURCE


@FUZZ
@given(which=st.sampled_from(range(len(_VALID))), index_offset=st.integers(0, 2**64 - 1),
       index_len=st.integers(0, 2**32 - 1), fields=st.sets(st.sampled_from(["offset", "length"]), min_size=1))
def test_lying_trailer_lengths_are_corrupt(which: int, index_offset: int, index_len: int, fields: set[str]) -> None:
    good = _VALID[which]
    real_offset, real_len, crc, version, magic = _TRAILER.unpack_from(good, len(good) - _TRAILER.size)
    new = (index_offset if "offset" in fields else real_offset, index_len if "length" in fields else real_len)
    bad = good[:-_TRAILER.size] + _TRAILER.pack(*new, crc, version, magic)
    got = _outcome(bad)
    if new == (real_offset, real_len):
        assert not isinstance(got, BaseException)
    else:
        assert isinstance(got, CorruptData)


@FUZZ
@given(which=st.sampled_from(range(len(_VALID))), data=st.data())
def test_forged_index_behind_a_valid_crc_is_corrupt_or_sound(which: int, data: st.DataObject) -> None:
    """The index CRC and trailer are recomputed after the edit: the index's own checks must hold the line."""
    front, doc = _split(_VALID[which])
    edited = data.draw(edited_json(doc))
    got = _outcome(_rebuild(front, json.dumps(edited).encode()))
    if not isinstance(got, CorruptData):
        _assert_sound(got)  # type: ignore[arg-type]


@FUZZ
@given(which=st.integers(0, 1), ops=mutations(3))
def test_forged_chunk_behind_a_valid_crc_is_corrupt_or_agrees(which: int, ops: list[tuple[str, int, int, int]]
                                                              ) -> None:
    """Chunk bytes damaged and their CRC32C patched into the entry: Arrow decoding, the nullability check
    and the comparison with the index entry must refuse it."""
    index, _ = _decode_all(_VALID[0])
    chunk = index.chunks[which]
    bad = mutated(_VALID[0][chunk.byte_start:chunk.byte_end], ops)
    forged = dataclasses.replace(chunk, byte_end=chunk.byte_start + len(bad), crc32c=crc32c.crc32c(bad))
    got = typed_or_value(lambda: decode_chunk(bad, forged, source=SOURCE), CorruptData)
    if not isinstance(got, CorruptData):
        _assert_agrees(got, forged)  # type: ignore[arg-type]


@fuzz(30)  # tests/formats/test_walobject.py has more
@given(st.lists(batches(min_size=1, max_size=8), min_size=1, max_size=3), st.integers(0, 2**40))
def test_valid_objects_round_trip(parts: list[pa.RecordBatch], seq: int) -> None:
    inputs = [WalChunkInput(f"t/id/{i}", b) for i, b in enumerate(parts)]
    data, index = encode_wal_object(node_id="n", seq=seq, created_ms=0, chunks=inputs)
    got_index, got = _decode_all(data)
    assert got_index == index
    assert [b.to_pylist() for b in got] == [b.to_pylist() for b in parts]


def _forged(column: str, values: pa.Array, value_type: pa.DataType | None = None) -> tuple[bytes, WalChunkIndex]:
    """A chunk whose ``column`` is replaced by ``values`` (RECORD_SCHEMA's type, or ``value_type``, but with
    nulls the schema forbids), and an index entry that agrees with it in everything else."""
    base = simple_batch([1, 2, 3], timestamps=[10, 20, 30])
    arrays = [values if name == column else base.column(name) for name in RECORD_SCHEMA.names]
    schema = pa.schema([pa.field(f.name, value_type or f.type) if f.name == column else f for f in RECORD_SCHEMA])
    batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
    body = batch.serialize().to_pybytes()
    _, index = encode_wal_object(node_id="n", seq=1, created_ms=0, chunks=[WalChunkInput("t/id/0", base)])
    chunk = dataclasses.replace(index.chunks[0], byte_end=index.chunks[0].byte_start + len(body),
                                crc32c=crc32c.crc32c(body), size_bytes=batch_nbytes(batch))
    return body, chunk


def test_nulls_where_the_schema_allows_none_are_corrupt() -> None:
    """Regression: a null offset leaked ArrowInvalid from ``to_numpy``; a null timestamp after the first
    record, a null header or a null header key was returned as a record (Arrow's IPC reader ignores
    nullability)."""
    loose_headers = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
    cases = [
        ("offset", pa.array([None, 2, 3], pa.int64()), None),
        ("timestamp", pa.array([10, None, 30], pa.int64()), None),
        ("headers", pa.array([[None], None, []], loose_headers), loose_headers),
        ("headers", pa.array([[{"key": None, "value": b"v"}], None, []], loose_headers), loose_headers),
    ]
    for column, values, value_type in cases:
        body, chunk = _forged(column, values, value_type)
        got = typed_or_value(lambda body=body, chunk=chunk: decode_chunk(body, chunk, source=SOURCE), CorruptData)
        assert isinstance(got, CorruptData) and "null" in str(got), (column, got)
