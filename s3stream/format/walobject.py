"""WAL objects: one flush of many partitions ("logs") in one bucket object; its key is the commit point.

Byte layout (little-endian; see ``docs/formats.md``)::

    header   8 B   magic b"S3WO" | version u8 | 3 zero bytes
    chunks   ...   one per log: an Arrow IPC encapsulated record-batch message of RECORD_SCHEMA
                   (schema-less, LZ4-frame body compression), back to back
    index    ...   compact JSON (sorted keys), versioned, describing the object and every chunk
    trailer 24 B   index_offset u64 | index_length u32 | index_crc32c u32 | version u8 | 3 zero bytes |
                   magic b"S3WO"

Checksums: each chunk's CRC32C (over its exact bytes) is in the index; the index's CRC32C is in the
trailer; the trailer is self-checking (``index_offset + index_length + 24 == object_size``, magic, version,
zero padding), so every byte of the object is covered. A reader fetches the last :data:`INDEX_SUFFIX_BYTES`,
decodes the index (:func:`decode_wal_index`), then ranged-fetches only the chunks it needs
(:func:`decode_chunk`).

Invariants (checked on encode and again on decode): one chunk per log; a chunk's offsets strictly increase
from ``base_offset`` to ``last_offset``; chunk byte ranges lie between the header and the index, in order,
without overlap; ``roll_offsets`` (segment boundaries the writer decided, so another process reproduces
them) are strictly increasing within ``[base_offset, last_offset + 1]``. A chunk may hold zero records only
to carry a roll: then ``base_offset = roll_offsets[0]`` and ``last_offset = base_offset - 1``. A *fence*
object has no chunks and ``fence = true``: it claims a sequence number so a zombie writer cannot.

Two optional index fields let a reader tell a WAL object still in flight from one that is gone
(``walscan.contiguous_chunks``): ``committed`` ``[lo, hi)``, sequence numbers of the same namespace that
were all committed before this object was written; and, on the *close marker* a node writes at a clean
close (a fence object), ``ends``: each log's end offset then; and ``hole``, on a fence object a claiming
process put at a sequence number its fenced owner had not committed (so it never will). They are omitted
when unset, so objects without them encode exactly as before. Likewise a chunk's idempotent-producer
batches (``producers``: ``[producer_id, epoch, base_sequence, record_count, base_offset]`` each, in offset
order, inside the chunk's range) are a 12th element of its index entry only when it has any, so a process
that takes the partition over rebuilds the producers' state from the objects alone.
"""

from __future__ import annotations

import itertools
import json
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import crc32c
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from s3stream.base.errors import CorruptData, InternalError
from s3stream.base.producer import ProducerAppend
from s3stream.base.records import RECORD_SCHEMA, batch_nbytes
from s3stream.format.nulls import required_present

__all__ = [
    "INDEX_SUFFIX_BYTES",
    "WAL_OBJECT_VERSION",
    "WalChunkIndex",
    "WalChunkInput",
    "WalObjectIndex",
    "decode_chunk",
    "decode_wal_index",
    "encode_fence_object",
    "encode_wal_object",
    "read_wal_index",
]

WAL_OBJECT_VERSION = 1
#: How many trailing bytes a reader fetches first; enough for the index of a few hundred chunks.
INDEX_SUFFIX_BYTES = 64 << 10

_MAGIC = b"S3WO"
_HEADER = struct.Struct("<4sB3x")
_TRAILER = struct.Struct("<QIIB3x4s")
_HEADER_BYTES = _HEADER.size
_TRAILER_BYTES = _TRAILER.size
_WRITE_OPTIONS = ipc.IpcWriteOptions(compression="lz4")
_DECODE_ERRORS = (pa.ArrowException, ValueError, TypeError, KeyError, IndexError, OverflowError, OSError,
                  EOFError)


@dataclass(frozen=True, slots=True)
class WalChunkInput:
    """One log's records for a WAL object, and the segment boundaries that start inside or right after."""

    log_id: str
    batch: pa.RecordBatch
    roll_offsets: tuple[int, ...] = ()
    producers: tuple[ProducerAppend, ...] = ()  #: idempotent producers' batches among its records


@dataclass(frozen=True, slots=True)
class WalChunkIndex:
    """Where one log's chunk lies in a WAL object (``[byte_start, byte_end)``) and what it holds."""

    log_id: str
    base_offset: int
    last_offset: int
    record_count: int
    size_bytes: int  #: logical bytes (records.batch_nbytes)
    max_timestamp: int  #: -1 when empty
    first_timestamp: int  #: timestamp of the first record (rule ROLL-2); -1 when empty
    byte_start: int
    byte_end: int
    crc32c: int  #: CRC32C of the chunk bytes
    roll_offsets: tuple[int, ...]
    producers: tuple[ProducerAppend, ...] = ()  #: idempotent producers' batches, in offset order


@dataclass(frozen=True, slots=True)
class WalObjectIndex:
    """The decoded index of a WAL object."""

    node_id: str
    seq: int
    created_ms: int
    fence: bool
    chunks: tuple[WalChunkIndex, ...]
    #: ``[lo, hi)``: every WAL object of this namespace with a seq in it was committed before this one
    committed: tuple[int, int] | None = None
    #: on a close marker: ``(log_id, end offset)`` of every log the node wrote (its records end there)
    ends: tuple[tuple[str, int], ...] = ()
    #: a fence put by another process where the owner's object was missing (never committed by the owner)
    hole: bool = False

    def committed_before(self, seq: int) -> bool:
        """Whether this object proves that WAL object ``seq`` of its namespace was committed."""
        return self.committed is not None and self.committed[0] <= seq < self.committed[1]

    def end_of(self, log_id: str) -> int | None:
        """The end offset of ``log_id`` this close marker records, or None."""
        for name, end in self.ends:
            if name == log_id:
                return end
        return None

    def chunk_for(self, log_id: str) -> WalChunkIndex | None:
        """The chunk of ``log_id``, or None when this object holds nothing for it."""
        for chunk in self.chunks:
            if chunk.log_id == log_id:
                return chunk
        return None


# ----------------------------------------------------------------------------------------------- encoding


def _schema_prefix() -> bytes:
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, RECORD_SCHEMA, options=_WRITE_OPTIONS):
        pass
    stream: bytes = sink.getvalue().to_pybytes()
    return stream[:-8]  # drop the end-of-stream marker


_STREAM_PREFIX = _schema_prefix()
_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"


def _ipc_message(batch: pa.RecordBatch) -> pa.Buffer:
    """The encapsulated, compressed record-batch message (a stream minus its schema and EOS markers)."""
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, RECORD_SCHEMA, options=_WRITE_OPTIONS) as writer:
        writer.write_batch(batch)
    stream = sink.getvalue()
    n = len(_STREAM_PREFIX)
    if stream.size < n + 8 or stream[:n].to_pybytes() != _STREAM_PREFIX or stream[-8:].to_pybytes() != _EOS:
        raise InternalError("unexpected Arrow IPC stream layout")
    return stream.slice(n, stream.size - n - 8)  # zero-copy; joined into the object once


def _check_input(chunk: WalChunkInput) -> tuple[int, int, int, int]:
    """Validate a chunk before writing; returns (base, last, first_ts, max_ts)."""
    batch = chunk.batch
    if not isinstance(batch, pa.RecordBatch) or not batch.schema.equals(RECORD_SCHEMA):
        raise InternalError(f"WAL chunk for {chunk.log_id!r} must be a RecordBatch of RECORD_SCHEMA")
    rolls = chunk.roll_offsets
    if batch.num_rows == 0:
        if not rolls:
            raise InternalError(f"empty WAL chunk for {chunk.log_id!r} carries no roll")
        base, last, first_ts, max_ts = rolls[0], rolls[0] - 1, -1, -1
    else:
        offs = batch.column("offset").to_numpy()
        if not bool(np.all(np.diff(offs) > 0)) or int(offs[0]) < 0:
            raise InternalError(f"WAL chunk offsets of {chunk.log_id!r} must be >= 0, strictly increasing")
        base, last = int(offs[0]), int(offs[-1])
        ts = batch.column("timestamp")
        first_ts, max_ts = int(ts[0].as_py()), int(pc.max(ts).as_py())
    if not _rolls_ok(rolls, base, last):
        raise InternalError(f"roll_offsets {rolls} of {chunk.log_id!r} outside [{base}, {last + 1}]")
    return base, last, first_ts, max_ts


def _rolls_ok(rolls: Sequence[int], base: int, last: int) -> bool:
    return (all(type(r) is int for r in rolls) and all(a < b for a, b in itertools.pairwise(rolls))
            and all(base <= r <= last + 1 for r in rolls))


def encode_wal_object(*, node_id: str, seq: int, created_ms: int, chunks: Sequence[WalChunkInput],
                      committed: tuple[int, int] | None = None) -> tuple[bytes, WalObjectIndex]:
    """Encode one WAL object holding one chunk per log, and return its index.

    Raises:
        InternalError: duplicate log ids, wrong schema, bad offsets or roll offsets.
    """
    if len({c.log_id for c in chunks}) != len(chunks):
        raise InternalError("a WAL object holds at most one chunk per log_id")
    parts: list[bytes | pa.Buffer] = [_HEADER.pack(_MAGIC, WAL_OBJECT_VERSION)]
    pos = _HEADER_BYTES
    entries: list[WalChunkIndex] = []
    for chunk in chunks:
        base, last, first_ts, max_ts = _check_input(chunk)
        payload = _ipc_message(chunk.batch)
        entries.append(WalChunkIndex(chunk.log_id, base, last, chunk.batch.num_rows,
                                     batch_nbytes(chunk.batch), max_ts, first_ts, pos, pos + len(payload),
                                     crc32c.crc32c(payload), tuple(chunk.roll_offsets), tuple(chunk.producers)))
        parts.append(payload)
        pos += len(payload)
    index = WalObjectIndex(node_id, seq, created_ms, False, tuple(entries), committed)
    return _finish(parts, pos, index), index


def encode_fence_object(*, node_id: str, seq: int, created_ms: int, committed: tuple[int, int] | None = None,
                        ends: Sequence[tuple[str, int]] = (), hole: bool = False) -> bytes:
    """A WAL object with no chunks and ``fence = true``: claims ``seq`` for a new writer epoch; with
    ``committed`` and ``ends``, closes a node's epoch (the close marker); with ``hole``, takes a sequence
    number a fenced node left uncommitted."""
    index = WalObjectIndex(node_id, seq, created_ms, True, (), committed, tuple(sorted(ends)), hole)
    return _finish([_HEADER.pack(_MAGIC, WAL_OBJECT_VERSION)], _HEADER_BYTES, index)


def _finish(parts: list[bytes | pa.Buffer], index_offset: int, index: WalObjectIndex) -> bytes:
    _check_index(index, index_offset, InternalError, "")
    doc = {"v": WAL_OBJECT_VERSION, "node_id": index.node_id, "seq": index.seq,
           "created_ms": index.created_ms, "fence": index.fence, "chunks": [
               [c.log_id, c.base_offset, c.last_offset, c.record_count, c.size_bytes, c.max_timestamp,
                c.first_timestamp, c.byte_start, c.byte_end, c.crc32c, list(c.roll_offsets),
                *([[p.to_list() for p in c.producers]] if c.producers else [])]
               for c in index.chunks]}
    if index.committed is not None:
        doc["committed"] = list(index.committed)
    if index.ends:
        doc["ends"] = [list(e) for e in index.ends]
    if index.hole:
        doc["hole"] = True
    body = json.dumps(doc, separators=(",", ":"), sort_keys=True, ensure_ascii=True).encode()
    parts += [body, _TRAILER.pack(index_offset, len(body), crc32c.crc32c(body), WAL_OBJECT_VERSION, _MAGIC)]
    return b"".join(parts)


# ----------------------------------------------------------------------------------------------- decoding


def decode_wal_index(tail: bytes, object_size: int, *, source: str) -> WalObjectIndex | int:
    """Decode the index from the object's last ``len(tail)`` bytes.

    Returns:
        The index, or the number of trailing bytes needed when ``tail`` is too short to hold it.

    Raises:
        CorruptData: bad magic/version, index CRC mismatch, or an invalid index.
    """
    if object_size < _HEADER_BYTES + _TRAILER_BYTES or len(tail) > object_size:
        raise CorruptData(f"object of {object_size} bytes cannot be a WAL object", source=source)
    if len(tail) < _TRAILER_BYTES:
        return _TRAILER_BYTES
    trailer = _TRAILER.unpack_from(tail, len(tail) - _TRAILER_BYTES)
    index_offset, index_len, index_crc, version, magic = (int(trailer[0]), int(trailer[1]), int(trailer[2]),
                                                          int(trailer[3]), bytes(trailer[4]))
    if magic != _MAGIC or tail[-4 - 3: -4] != b"\0\0\0":
        raise CorruptData("not a WAL object (bad trailer magic)", source=source)
    if version != WAL_OBJECT_VERSION:
        raise CorruptData(f"unsupported WAL object version {version}", source=source)
    if index_offset < _HEADER_BYTES or index_offset + index_len + _TRAILER_BYTES != object_size:
        raise CorruptData("WAL object trailer does not match the object size", source=source)
    needed = index_len + _TRAILER_BYTES
    if len(tail) < needed:
        return needed
    body = tail[len(tail) - needed: len(tail) - _TRAILER_BYTES]
    if crc32c.crc32c(body) != index_crc:
        raise CorruptData("WAL object index CRC32C mismatch", source=source)
    if len(tail) == object_size and tail[:_HEADER_BYTES] != _HEADER.pack(_MAGIC, WAL_OBJECT_VERSION):
        raise CorruptData("bad WAL object header", source=source)
    index = _parse_index(body, source)
    _check_index(index, index_offset, CorruptData, source)
    return index


def _parse_index(body: bytes, source: str) -> WalObjectIndex:
    try:
        doc = json.loads(body)
        if not isinstance(doc, dict) or doc.get("v") != WAL_OBJECT_VERSION:
            raise CorruptData(f"unsupported WAL index version {doc.get('v')!r}", source=source)
        chunks = tuple(_parse_chunk(c, source) for c in _typed(doc["chunks"], list, source))
        committed = None
        if "committed" in doc:
            lo, hi = (_typed(v, int, source) for v in _pair(doc["committed"], source))
            committed = (lo, hi)
        ends = tuple((_typed(name, str, source), _typed(end, int, source))
                     for name, end in (_pair(e, source) for e in _typed(doc.get("ends", []), list, source)))
        return WalObjectIndex(_typed(doc["node_id"], str, source), _typed(doc["seq"], int, source),
                              _typed(doc["created_ms"], int, source), _typed(doc["fence"], bool, source),
                              chunks, committed, ends, _typed(doc.get("hole", False), bool, source))
    except CorruptData:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        raise CorruptData(f"invalid WAL object index: {e}", source=source) from e


def _typed(value: Any, kind: type, source: str) -> Any:
    if type(value) is not kind:
        raise CorruptData(f"WAL index field has type {type(value).__name__}, expected {kind.__name__}",
                          source=source)
    return value


def _pair(raw: Any, source: str) -> tuple[Any, Any]:
    if type(raw) is not list or len(raw) != 2:
        raise CorruptData("malformed WAL index pair", source=source)
    return raw[0], raw[1]


def _parse_chunk(raw: Any, source: str) -> WalChunkIndex:
    if type(raw) is not list or len(raw) not in (11, 12):
        raise CorruptData("malformed WAL index chunk entry", source=source)
    ints = [_typed(v, int, source) for v in raw[1:10]]
    rolls = tuple(_typed(v, int, source) for v in _typed(raw[10], list, source))
    producers = tuple(ProducerAppend.from_list(p, source=source) for p in _typed(raw[11], list, source)) \
        if len(raw) == 12 else ()
    return WalChunkIndex(_typed(raw[0], str, source), ints[0], ints[1], ints[2], ints[3], ints[4], ints[5],
                         ints[6], ints[7], ints[8], rolls, producers)


def _check_index(index: WalObjectIndex, index_offset: int, error: type[Exception], source: str) -> None:
    """The index invariants, shared by the encoder (InternalError) and the decoder (CorruptData)."""
    prefix = f"{source}: " if source else ""
    if not index.node_id or index.seq < 0 or (index.fence and index.chunks):
        raise error(prefix + "WAL index header is invalid (node_id, seq, or a fence with chunks)")
    if len({c.log_id for c in index.chunks}) != len(index.chunks):
        raise error(prefix + "WAL index lists a log twice")
    if index.committed is not None and not 0 <= index.committed[0] <= index.committed[1] <= index.seq:
        raise error(prefix + f"WAL index committed range {index.committed} is invalid")
    if ((index.ends or index.hole) and not index.fence) or any(not name or end < 0 for name, end in index.ends) or (
            len({name for name, _ in index.ends}) != len(index.ends)):
        raise error(prefix + "WAL index log ends are invalid")
    pos = _HEADER_BYTES
    for c in index.chunks:
        if not _chunk_ok(c, pos, index_offset):
            raise error(prefix + f"WAL index entry for {c.log_id!r} is invalid")
        pos = c.byte_end


def _chunk_ok(c: WalChunkIndex, pos: int, index_offset: int) -> bool:
    """One index entry is self-consistent and its bytes lie after ``pos`` and before the index."""
    if c.record_count == 0:  # a roll-only chunk
        content_ok = (len(c.roll_offsets) > 0 and c.last_offset == c.base_offset - 1 and c.size_bytes == 0
                      and c.max_timestamp == -1 and c.first_timestamp == -1)
    else:
        content_ok = (c.record_count <= c.last_offset - c.base_offset + 1
                      and c.size_bytes >= 21 * c.record_count)
    return (content_ok and bool(c.log_id) and c.base_offset >= 0 and c.record_count >= 0
            and pos <= c.byte_start < c.byte_end <= index_offset and 0 <= c.crc32c < 1 << 32
            and _rolls_ok(c.roll_offsets, c.base_offset, c.last_offset) and _producers_ok(c))


def _producers_ok(c: WalChunkIndex) -> bool:
    """A chunk's producer batches lie inside its range, in offset order, without overlap."""
    end = c.base_offset
    for p in c.producers:
        if not p.valid() or p.base_offset < end or p.last_offset > c.last_offset:
            return False
        end = p.last_offset + 1
    return True


def read_wal_index(fetch: Callable[[int, int], bytes], object_size: int, *, source: str) -> WalObjectIndex:
    """Fetch and decode a WAL object's index: one suffix fetch, a second only for a large index."""
    start = max(0, object_size - INDEX_SUFFIX_BYTES)
    tail = _fetch_exact(fetch, start, object_size, source)
    result = decode_wal_index(tail, object_size, source=source)
    if isinstance(result, int):
        start = max(0, object_size - result)
        tail = _fetch_exact(fetch, start, object_size, source)
        result = decode_wal_index(tail, object_size, source=source)
        if isinstance(result, int):
            raise CorruptData("WAL index larger than its trailer claims", source=source)
    return result


def _fetch_exact(fetch: Callable[[int, int], bytes], start: int, end: int, source: str) -> bytes:
    data = fetch(start, end)
    if len(data) != end - start:
        raise CorruptData(f"fetch [{start}, {end}) returned {len(data)} bytes", source=source)
    return bytes(data)


def decode_chunk(data: bytes, chunk: WalChunkIndex, *, source: str) -> pa.RecordBatch:
    """Decode one chunk given exactly its bytes ``[byte_start, byte_end)``; CRC- and content-checked.

    Raises:
        CorruptData: length or CRC32C mismatch, undecodable message, nulls in a non-nullable field, or
            records that disagree with the index entry (count, offsets, timestamps, size).
    """
    if len(data) != chunk.byte_end - chunk.byte_start:
        raise CorruptData(f"chunk of {chunk.log_id!r} has {len(data)} bytes, index says "
                          f"{chunk.byte_end - chunk.byte_start}", source=source)
    if crc32c.crc32c(data) != chunk.crc32c:
        raise CorruptData(f"chunk of {chunk.log_id!r} CRC32C mismatch", source=source)
    try:
        batch = ipc.read_record_batch(pa.py_buffer(data), RECORD_SCHEMA)
        batch.validate(full=True)
    except _DECODE_ERRORS as e:
        raise CorruptData(f"cannot decode chunk of {chunk.log_id!r}: {e}", source=source) from e
    if not required_present(batch):
        raise CorruptData(f"chunk of {chunk.log_id!r} holds nulls where RECORD_SCHEMA allows none", source=source)
    if not _chunk_matches(batch, chunk):
        raise CorruptData(f"chunk of {chunk.log_id!r} disagrees with the WAL index", source=source)
    return batch


def _chunk_matches(batch: pa.RecordBatch, chunk: WalChunkIndex) -> bool:
    n = batch.num_rows
    if n != chunk.record_count or batch_nbytes(batch) != chunk.size_bytes:
        return False
    if n == 0:
        return True
    offs = batch.column("offset").to_numpy()
    ts = batch.column("timestamp")
    return (int(offs[0]) == chunk.base_offset and int(offs[-1]) == chunk.last_offset
            and bool(np.all(np.diff(offs) > 0)) and ts[0].as_py() == chunk.first_timestamp
            and pc.max(ts).as_py() == chunk.max_timestamp)
