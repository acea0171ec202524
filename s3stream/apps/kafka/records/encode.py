"""Stored records (Arrow, ``RECORD_SCHEMA``) to v2 record batches, vectorised: no Python per record.

A v2 record is ``varint(len) int8(attrs=0) varlong(tsDelta) varint(offsetDelta) varint(keyLen) key
varint(valueLen) value varint(headerCount) headers`` (zigzag varints; a null key or value has length -1).
The numeric prefixes of every record are written at once into an ``[n, 26]`` byte matrix and compacted with
a mask (row-major, so the bytes of each row stay together); Arrow's ``binary_join_element_wise`` then
interleaves prefix, key, value-length, value and headers, and the values buffer of its result *is* the
records section. Headers get the same treatment one level down. The cost is a few memcpy passes plus the
CRC32C.

Records are split into batches where Kafka would have had separate ones: at every change of timestamp on
LogAppendTime topics (a consumer takes each record's time from its batch's max timestamp there), where
offsets cross a 2**30 boundary (offset deltas are int32; compaction may leave huge gaps), and about every
``max_batch_bytes`` (so a fetch with a small budget is not sent a large batch).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from s3stream.apps.kafka.records.batch import TIMESTAMP_TYPE_FLAG, Spliced, pack_header

__all__ = ["Encoded", "encode_batches", "encode_spliced"]

I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]
U8 = npt.NDArray[np.uint8]

_LOW7 = np.uint64(0x7F)
#: a varint of z takes k + 1 bytes where k = how many of these z reaches
_VARINT_STEPS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)
_OFFSET_BLOCK = 30  # a batch never spans a 2**30-aligned block of offsets (int32 deltas)
_MAX_DELTA = (1 << 31) - 1


@dataclass(frozen=True, slots=True)
class Encoded:
    """Batches in offset order and each one's base offset."""

    batches: list[bytes]
    bases: list[int]

    @property
    def nbytes(self) -> int:
        return sum(len(b) for b in self.batches)


def encode_batches(table: pa.Table | pa.RecordBatch, *, log_append_time: bool = False,
                   max_batch_bytes: int = 1 << 20, last_offset: int | None = None) -> Encoded:
    """The v2 batches (uncompressed, CRC32C set) holding the rows of ``table`` (``RECORD_SCHEMA``), in order.

    ``last_offset`` (at or after the last row's) makes the last batch cover offsets up to it, as a compacted
    Kafka batch keeps its original last offset: a consumer's next fetch then starts after the records
    compacted away at the end of a segment instead of inside them.
    """
    spliced, bases = _encode(table, log_append_time, max_batch_bytes, last_offset)
    return Encoded([bytes(b) for b in spliced], bases)


def encode_spliced(table: pa.Table | pa.RecordBatch, *, log_append_time: bool = False,
                   max_batch_bytes: int = 1 << 20, last_offset: int | None = None
                   ) -> tuple[list[Spliced], list[int]]:
    """:func:`encode_batches` for the fetch path: each batch its 61-byte header and a view of the records
    section Arrow wrote (never joined: the response sends both), and the batches' base offsets."""
    return _encode(table, log_append_time, max_batch_bytes, last_offset)


def _encode(table: pa.Table | pa.RecordBatch, log_append_time: bool, max_batch_bytes: int,
            last_offset: int | None) -> tuple[list[Spliced], list[int]]:
    n = table.num_rows
    if n == 0:
        return [], []
    offsets = _int64(table.column("offset"))
    stamps = _int64(table.column("timestamp"))
    keys = _binary(table.column("key"))
    values = _binary(table.column("value"))
    headers = _column(table.column("headers"))

    key_len = _lengths(keys)
    value_len = _lengths(values)
    rough = np.cumsum(np.maximum(key_len, 0) + np.maximum(value_len, 0) + 16) // max(1, max_batch_bytes)
    starts = _batch_starts(offsets, stamps, rough, log_append_time=log_append_time)
    run_of_row = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, n)))
    first_row = starts[run_of_row]
    ts_delta = _zigzag(stamps - stamps[first_row])
    off_delta = _zigzag(offsets - offsets[first_row])
    suffix, suffix_len = _headers_section(headers, n)

    ts_size, off_size = _varint_size(ts_delta), _varint_size(off_delta)
    klen_z, vlen_z = _zigzag(key_len), _zigzag(value_len)
    klen_size, vlen_size = _varint_size(klen_z), _varint_size(vlen_z)
    body = 1 + ts_size + off_size + klen_size + np.maximum(key_len, 0) + vlen_size + np.maximum(value_len, 0) \
        + suffix_len
    body_z = _zigzag(body)
    prefix = _varints(n, [(body_z, 5), (np.zeros(n, np.uint64), 1), (ts_delta, 10), (off_delta, 5),
                          (klen_z, 5)])
    mid = _varints(n, [(vlen_z, 5)])
    joined = pc.binary_join_element_wise(prefix, pc.fill_null(keys, b""), mid, pc.fill_null(values, b""), suffix,
                                         b"")
    section = _values(joined)
    record_size = body + _varint_size(body_z)
    ends = np.cumsum(record_size)

    attributes = TIMESTAMP_TYPE_FLAG if log_append_time else 0
    out: list[Spliced] = []
    bases: list[int] = []
    bounds = np.append(starts, n)
    for i in range(len(starts)):
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        begin = int(ends[lo - 1]) if lo else 0
        records = section[begin:int(ends[hi - 1])]
        last_delta = int(offsets[hi - 1] - offsets[lo])
        if hi == n and last_offset is not None and last_delta < last_offset - int(offsets[lo]) < _MAX_DELTA:
            last_delta = last_offset - int(offsets[lo])
        head = pack_header(base_offset=int(offsets[lo]), records=records, attributes=attributes,
                           last_offset_delta=last_delta, first_timestamp=int(stamps[lo]),
                           max_timestamp=int(stamps[lo:hi].max()), record_count=hi - lo)
        out.append(Spliced(head, records))
        bases.append(int(offsets[lo]))
    return out, bases


def _batch_starts(offsets: I64, stamps: I64, size_block: I64, *, log_append_time: bool
                  ) -> npt.NDArray[np.intp]:
    """The first row of each batch (row 0 always)."""
    blocks = offsets >> _OFFSET_BLOCK
    cut = (blocks[1:] != blocks[:-1]) | (size_block[1:] != size_block[:-1])
    if log_append_time:
        cut |= stamps[1:] != stamps[:-1]
    return np.concatenate(([0], np.flatnonzero(cut) + 1)).astype(np.intp)


def _headers_section(headers: pa.Array, n: int) -> tuple[pa.Array, I64]:
    """Each record's ``varint(count) (varint(klen) key varint(vlen) value)*`` and its length."""
    counts = pc.fill_null(pc.list_value_length(headers), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    count_z = _zigzag(counts)
    count_size = _varint_size(count_z)
    if not counts.any():
        return _binary_from(np.zeros(n, np.uint8), np.arange(n + 1, dtype=np.int64)), count_size
    flat = headers.flatten()  # the headers of every record, in record order
    hkeys = pc.cast(flat.field("key"), pa.binary())
    hvalues = flat.field("value")
    m = len(flat)
    hk_len, hv_len = _lengths(hkeys), _lengths(hvalues)
    hk_z, hv_z = _zigzag(hk_len), _zigzag(hv_len)
    one = pc.binary_join_element_wise(_varints(m, [(hk_z, 5)]), hkeys, _varints(m, [(hv_z, 5)]),
                                      pc.fill_null(hvalues, b""), b"")
    one_len = _varint_size(hk_z) + hk_len + _varint_size(hv_z) + np.maximum(hv_len, 0)
    per_record = np.bincount(pc.list_parent_indices(headers).to_numpy(), weights=one_len, minlength=n)
    blob_offsets = np.concatenate(([0], np.cumsum(per_record.astype(np.int64))))
    blobs = _binary_from(np.frombuffer(_values(one), dtype=np.uint8), blob_offsets)
    suffix = pc.binary_join_element_wise(_varints(n, [(count_z, 5)]), blobs, b"")
    return suffix, count_size + per_record.astype(np.int64)


# -- numpy helpers ---------------------------------------------------------------------------------


def _zigzag(x: I64) -> U64:
    return ((x << 1) ^ (x >> 63)).astype(np.uint64)


def _varint_size(z: U64) -> I64:
    return np.searchsorted(_VARINT_STEPS, z, side="right").astype(np.int64) + 1


def _varints(n: int, fields: list[tuple[U64, int]]) -> pa.Array:
    """A binary array whose row i is the varints of ``fields[*][0][i]`` back to back (a field declared 1 byte
    wide is taken as one byte without measuring it).

    Each field is written as an ``[n, w]`` block of 7-bit groups at once (row-major, so a row's bytes stay
    together), ``w`` the widest that field is in this batch (not the widest it may be: deltas and lengths
    are mostly one or two bytes); a mask keeps each varint's own bytes, unless every row is full width.
    """
    sizes = [_varint_size(z) if w > 1 else np.ones(n, dtype=np.int64) for z, w in fields]
    widths = [int(size.max()) for size in sizes]
    width = sum(widths)
    matrix = np.empty((n, width), dtype=np.uint8)
    ragged = any(int(size.min()) < w for size, w in zip(sizes, widths, strict=True))
    keep = np.empty((n, width), dtype=bool) if ragged else None
    col = 0
    for (z, _), size, w in zip(fields, sizes, widths, strict=True):
        lanes = np.arange(w)
        groups = (z[:, None] >> (np.uint64(7) * lanes.astype(np.uint64))) & _LOW7
        more = lanes + 1 < size[:, None]  # the continuation bit: another byte follows
        matrix[:, col:col + w] = groups.astype(np.uint8) | (more.astype(np.uint8) << 7)
        if keep is not None:
            keep[:, col:col + w] = lanes < size[:, None]
        col += w
    if keep is None:
        return _binary_from(matrix.reshape(-1), np.arange(0, (n + 1) * width, width, dtype=np.int64))
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(keep.sum(axis=1), out=offsets[1:])
    return _binary_from(matrix[keep], offsets)


def _binary_from(data: U8, offsets: I64) -> pa.Array:
    return pa.BinaryArray.from_buffers(pa.binary(), len(offsets) - 1,
                                       [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)])


def _values(arr: pa.Array) -> memoryview:
    """The concatenated bytes of a binary array (its values buffer between the first and last offsets)."""
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32, count=len(arr) + 1, offset=arr.offset * 4)
    data = arr.buffers()[2]
    if data is None:
        return memoryview(b"")
    return memoryview(data)[int(offsets[0]):int(offsets[-1])]


def _lengths(arr: pa.Array) -> I64:
    """Byte lengths, -1 for nulls."""
    lengths: I64 = np.asarray(pc.fill_null(pc.binary_length(arr), -1).to_numpy(zero_copy_only=False), dtype=np.int64)
    return lengths


def _column(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    if not isinstance(col, pa.ChunkedArray):
        return col
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def _int64(col: pa.Array | pa.ChunkedArray) -> I64:
    return np.asarray(_column(col).to_numpy(zero_copy_only=False), dtype=np.int64)


def _binary(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    arr = _column(col)
    return arr if arr.type == pa.binary() else arr.cast(pa.binary())
