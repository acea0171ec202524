"""Local WAL entries: the payloads the ``wal`` package frames and fsyncs on the append path.

Three kinds of entry, one per call of :func:`encode_entry`:

* :class:`AppendEntry` -- one log's appended records (offsets already assigned), and the idempotent
  producers' batches among them (``producers``, usually none);
* :class:`RollEntry` -- a segment boundary: a new segment of the log starts at ``base_offset``;
* :class:`ClaimEntry` -- this node takes the log over from another node (whose records end at
  ``base_offset``): every earlier entry of the log in this local WAL is void (it was written in an epoch
  another node ended; its offsets belong to that node's successor), so recovery never replays it.

Byte layout (little-endian; see ``docs/formats.md``)::

    version u8 | kind u8 (1 append, 2 roll, 4 producer append, 5 claim) | log_id_len u16 | body_len u32 |
    log_id (UTF-8) | body | crc32c u32 (over every preceding byte of the entry)

    append body: an Arrow IPC encapsulated record-batch message of RECORD_SCHEMA, uncompressed
                 (local disk: speed over size; schema-less, fixed by the version)
    roll body:   base_offset i64
    claim body:  base_offset i64
    producer append body: count u32 | count x (producer_id i64 | epoch i16 | base_sequence i32 |
                 record_count i32 | base_offset i64) | the append body
                 (written only when ``producers`` is not empty: other appends keep kind 1, byte for byte)

The ``wal`` frame already carries a length and CRC; this format still has its own version, lengths and
CRC32C so a payload is self-validating wherever it travels (tests, tools, a future WAL). Invariants checked
on encode and decode: the batch has RECORD_SCHEMA and strictly increasing offsets >= 0 (on decode also
no null where RECORD_SCHEMA allows none: offset, timestamp, a header, a header key); ``base_offset >= 0``;
the lengths add up to the payload length exactly; producer batches lie in the batch's offset range, in order.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c
import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from s3stream.base.errors import CorruptData, InternalError
from s3stream.base.producer import ProducerAppend
from s3stream.base.records import RECORD_SCHEMA
from s3stream.format.nulls import required_present

__all__ = ["WAL_ENTRY_VERSION", "AppendEntry", "ClaimEntry", "RollEntry", "WalEntryKind", "decode_entry",
           "encode_entry"]

WAL_ENTRY_VERSION = 1

_KIND_APPEND = 1
_KIND_ROLL = 2
_KIND_PRODUCER_APPEND = 4
_KIND_CLAIM = 5
_COUNT = struct.Struct("<I")
_PRODUCER = struct.Struct("<qhiiq")
_HEAD = struct.Struct("<BBHI")
_ROLL = struct.Struct("<q")
_CRC = struct.Struct("<I")
_DECODE_ERRORS = (pa.ArrowException, ValueError, TypeError, KeyError, IndexError, OverflowError, OSError,
                  EOFError)


@dataclass(frozen=True, slots=True)
class AppendEntry:
    """Records appended to one log; offsets are in the batch, idempotent producers' batches in ``producers``."""

    log_id: str
    batch: pa.RecordBatch
    producers: tuple[ProducerAppend, ...] = ()


@dataclass(frozen=True, slots=True)
class RollEntry:
    """A segment boundary of one log: a new segment starts at ``base_offset``."""

    log_id: str
    base_offset: int


@dataclass(frozen=True, slots=True)
class ClaimEntry:
    """This node claimed the log from another node, whose records end at ``base_offset``: the log's earlier
    entries in this local WAL are void."""

    log_id: str
    base_offset: int


#: Any decoded entry.
WalEntryKind = AppendEntry | RollEntry | ClaimEntry


def _offsets_ok(batch: pa.RecordBatch) -> bool:
    if batch.num_rows == 0:
        return True
    offs = batch.column("offset").to_numpy()
    return int(offs[0]) >= 0 and bool(np.all(np.diff(offs) > 0))


def _producers_ok(batch: pa.RecordBatch, producers: tuple[ProducerAppend, ...]) -> bool:
    """Producer batches are valid, in order, and at offsets the batch holds."""
    if not producers:
        return True
    if batch.num_rows == 0:
        return False
    offs = batch.column("offset")
    end, last = int(offs[0].as_py()), int(offs[-1].as_py())
    for p in producers:
        if not p.valid() or p.base_offset < end or p.last_offset > last:
            return False
        end = p.last_offset + 1
    return True


def encode_entry(entry: WalEntryKind) -> bytes:
    """Encode one entry (validated first).

    Raises:
        InternalError: wrong schema, offsets not strictly increasing, negative offset, or a log id
            longer than 65535 UTF-8 bytes.
    """
    log_id = entry.log_id.encode()
    if not log_id or len(log_id) > 0xFFFF:
        raise InternalError(f"log_id must be 1..65535 UTF-8 bytes: {entry.log_id[:40]!r}")
    if isinstance(entry, AppendEntry):
        batch = entry.batch
        if not batch.schema.equals(RECORD_SCHEMA) or not _offsets_ok(batch):
            raise InternalError("AppendEntry batch must have RECORD_SCHEMA and increasing offsets >= 0")
        if not entry.producers:
            kind, body = _KIND_APPEND, batch.serialize().to_pybytes()
        else:
            if not _producers_ok(batch, entry.producers):
                raise InternalError("AppendEntry producer batches must be valid, in order, inside the batch")
            kind = _KIND_PRODUCER_APPEND
            body = b"".join((_COUNT.pack(len(entry.producers)),
                             *(_PRODUCER.pack(p.producer_id, p.producer_epoch, p.base_sequence, p.record_count,
                                              p.base_offset) for p in entry.producers),
                             batch.serialize().to_pybytes()))
    else:
        if entry.base_offset < 0:
            raise InternalError(f"{type(entry).__name__} base_offset must be >= 0, got {entry.base_offset}")
        kind = _KIND_ROLL if isinstance(entry, RollEntry) else _KIND_CLAIM
        body = _ROLL.pack(entry.base_offset)
    head = _HEAD.pack(WAL_ENTRY_VERSION, kind, len(log_id), len(body)) + log_id
    return b"".join((head, body, _CRC.pack(crc32c.crc32c(body, crc32c.crc32c(head)))))


def decode_entry(payload: bytes, *, source: str) -> WalEntryKind:
    """Decode and validate one entry.

    Raises:
        CorruptData: wrong version, kind or lengths, CRC32C mismatch, undecodable or invalid records.
    """
    view = memoryview(payload)
    if len(view) < _HEAD.size + _CRC.size:
        raise CorruptData(f"WAL entry of {len(view)} bytes is too short", source=source)
    version, kind, id_len, body_len = _HEAD.unpack_from(view)
    if version != WAL_ENTRY_VERSION:
        raise CorruptData(f"unsupported WAL entry version {version}", source=source)
    if _HEAD.size + id_len + body_len + _CRC.size != len(view):
        raise CorruptData("WAL entry lengths do not add up to the payload length", source=source)
    (crc,) = _CRC.unpack_from(view, len(view) - _CRC.size)
    if crc32c.crc32c(view[: len(view) - _CRC.size]) != crc:
        raise CorruptData("WAL entry CRC32C mismatch", source=source)
    body_start = _HEAD.size + id_len
    try:
        log_id = bytes(view[_HEAD.size: body_start]).decode()
    except UnicodeDecodeError as e:
        raise CorruptData("WAL entry log_id is not UTF-8", source=source) from e
    body = view[body_start: body_start + body_len]
    if not log_id:
        raise CorruptData("WAL entry has an empty log_id", source=source)
    if kind == _KIND_ROLL:
        return _decode_roll(log_id, body, source)
    if kind == _KIND_CLAIM:
        return ClaimEntry(log_id, _decode_roll(log_id, body, source).base_offset)
    if kind == _KIND_APPEND:
        return AppendEntry(log_id, _decode_batch(body, source))
    if kind == _KIND_PRODUCER_APPEND:
        return _decode_producer_append(log_id, body, source)
    raise CorruptData(f"unknown WAL entry kind {kind}", source=source)


def _decode_roll(log_id: str, body: memoryview, source: str) -> RollEntry:
    if len(body) != _ROLL.size:
        raise CorruptData(f"roll entry body has {len(body)} bytes, expected {_ROLL.size}", source=source)
    (base_offset,) = _ROLL.unpack(body)
    if base_offset < 0:
        raise CorruptData(f"roll entry base_offset {base_offset} < 0", source=source)
    return RollEntry(log_id, int(base_offset))


def _decode_producer_append(log_id: str, body: memoryview, source: str) -> AppendEntry:
    if len(body) < _COUNT.size:
        raise CorruptData("producer append entry is too short", source=source)
    (count,) = _COUNT.unpack_from(body)
    start = _COUNT.size + count * _PRODUCER.size
    if count == 0 or start > len(body):
        raise CorruptData(f"producer append entry lists {count} producer batches in {len(body)} bytes",
                          source=source)
    producers = tuple(ProducerAppend(*_PRODUCER.unpack_from(body, _COUNT.size + i * _PRODUCER.size))
                      for i in range(count))
    batch = _decode_batch(body[start:], source)
    if not _producers_ok(batch, producers):
        raise CorruptData("producer append entry: producer batches outside the records or out of order",
                          source=source)
    return AppendEntry(log_id, batch, producers)


def _decode_batch(body: memoryview, source: str) -> pa.RecordBatch:
    try:
        batch = ipc.read_record_batch(pa.py_buffer(bytes(body)), RECORD_SCHEMA)
        batch.validate(full=True)
    except _DECODE_ERRORS as e:
        raise CorruptData(f"cannot decode WAL entry records: {e}", source=source) from e
    if not required_present(batch):
        raise CorruptData("WAL entry records hold nulls where RECORD_SCHEMA allows none", source=source)
    if not _offsets_ok(batch):
        raise CorruptData("WAL entry offsets are not strictly increasing and >= 0", source=source)
    return batch
