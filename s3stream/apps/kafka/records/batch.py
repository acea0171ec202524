"""The v2 record-batch header: parse and check a produced batch, write one, patch the fields outside the CRC.

Layout (Kafka's ``DefaultRecordBatch``; big-endian), 61 bytes, then the records (compressed as a whole when
the codec bits say so)::

    0 baseOffset i64 | 8 batchLength i32 | 12 partitionLeaderEpoch i32 | 16 magic i8 | 17 crc u32
    21 attributes i16 | 23 lastOffsetDelta i32 | 27 firstTimestamp i64 | 35 maxTimestamp i64
    43 producerId i64 | 51 producerEpoch i16 | 53 baseSequence i32 | 57 recordCount i32 | 61 records

The CRC32C covers ``attributes`` to the end, so the base offset and the leader epoch are patched without
recomputing it. Bytes from a client are never trusted: every length is checked against the buffer before
it is used, and every failure is a typed error (CORRUPT_MESSAGE, INVALID_RECORD, ...), never an IndexError.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

from s3stream.apps.kafka.errors import CorruptBatch, UnsupportedCompression
from s3stream.base.errors import InvalidRecord

__all__ = ["ATTRIBUTES_OFFSET", "CODEC_GZIP", "CODEC_LZ4", "CODEC_MASK", "CODEC_NONE", "CODEC_SNAPPY", "CODEC_ZSTD",
           "CONTROL_FLAG", "HEADER", "HEADER_SIZE", "LEADER_EPOCH", "LOG_OVERHEAD", "TIMESTAMP_TYPE_FLAG",
           "TRANSACTIONAL_FLAG", "Batch", "BatchHeader", "InvalidTxnState", "Spliced", "pack_header", "parse_produced",
           "patch_offset", "rebased"]

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: batchLength counts the bytes after them
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
_BASE_AND_EPOCH = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch
_EPOCH = struct.Struct(">i")
#: CRC32C of a batch keeps the GIL: ~50 us for 1 MB, while giving it up meant waiting up to the 5 ms switch
#: interval to get it back whenever other threads were busy (the produce worker's wall time was ~4x its CPU)
_KEEP_GIL = 0
_REBASED = _BASE_AND_EPOCH.size  # 16: what rebased() writes anew

CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = 0, 1, 2, 3, 4
CODEC_MASK = 0x07
TIMESTAMP_TYPE_FLAG = 0x08  # LogAppendTime
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
MAGIC_V2 = 2
#: the partition leader epoch this server stamps on every batch it serves (Metadata reports epoch 0)
LEADER_EPOCH = 0
#: the first produce version allowed to send zstd (Kafka: older ones get UNSUPPORTED_COMPRESSION_TYPE)
ZSTD_MIN_PRODUCE_VERSION = 7


class InvalidTxnState(InvalidRecord):
    """A transactional batch: this server has no transactions (Kafka's INVALID_TXN_STATE)."""


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The fields of a checked v2 batch header."""

    base_offset: int
    leader_epoch: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_FLAG)


def parse_produced(data: bytes | bytearray | memoryview | None, *, produce_version: int) -> BatchHeader:
    """Check the ``records`` of one produced partition: exactly one v2 batch, intact, of a known codec.

    Kafka's rules (``ProduceRequest.validateRecords`` and ``LogValidator``): no batch, another magic, more
    than one batch, a control batch, or a count that disagrees with the offset deltas is INVALID_RECORD
    (:class:`InvalidRecord`); a short, truncated or CRC-failing batch is CORRUPT_MESSAGE
    (:class:`CorruptBatch`); an unknown codec, or zstd before produce v7, UNSUPPORTED_COMPRESSION_TYPE.
    """
    if data is None or len(data) < LOG_OVERHEAD:
        raise InvalidRecord("a produce request must carry one record batch per partition")
    size = len(data)
    if size < HEADER_SIZE:
        raise CorruptBatch(f"a record batch of {size} bytes is shorter than its {HEADER_SIZE}-byte header")
    (base, length, epoch, magic, crc, attributes, last_delta, first_ts, max_ts, pid, pepoch, base_seq,
     count) = HEADER.unpack_from(data, 0)
    if magic != MAGIC_V2:
        raise InvalidRecord(f"record batch magic {magic}: produce requests v3+ take magic v2 batches only")
    if length < HEADER_SIZE - LOG_OVERHEAD or length > size - LOG_OVERHEAD:
        raise CorruptBatch(f"record batch length {length} does not fit the {size} bytes received")
    if length != size - LOG_OVERHEAD:
        raise InvalidRecord("a produce request may carry only one record batch per partition")
    if crc32c.crc32c(memoryview(data)[ATTRIBUTES_OFFSET:], gil_release_mode=_KEEP_GIL) != crc:
        raise CorruptBatch("record batch CRC32C mismatch")
    if attributes & CONTROL_FLAG:
        raise InvalidRecord("clients may not produce control batches")
    if attributes & TRANSACTIONAL_FLAG:
        raise InvalidTxnState("transactional batches need a transaction (this server has none)")
    codec = attributes & CODEC_MASK
    if codec > CODEC_ZSTD:
        raise UnsupportedCompression(f"unknown compression codec {codec}")
    if codec == CODEC_ZSTD and produce_version < ZSTD_MIN_PRODUCE_VERSION:
        raise UnsupportedCompression(f"zstd needs produce v{ZSTD_MIN_PRODUCE_VERSION}+ (got v{produce_version})")
    if count <= 0 or last_delta != count - 1:
        raise InvalidRecord(f"record batch count {count} disagrees with its last offset delta {last_delta}")
    if pid >= 0 and (base_seq < 0 or pepoch < 0):
        raise InvalidRecord(f"idempotent batch of producer {pid} with sequence {base_seq}, epoch {pepoch}")
    return BatchHeader(base, epoch, attributes, last_delta, first_ts, max_ts, pid, pepoch, base_seq, count)


def patch_offset(data: bytes | bytearray | memoryview, base_offset: int, *, leader_epoch: int = LEADER_EPOCH
                 ) -> bytearray:
    """A copy of one batch with its base offset and leader epoch set (both outside the CRC)."""
    out = bytearray(data)
    (length,) = struct.unpack_from(">i", out, 8)
    _BASE_AND_EPOCH.pack_into(out, 0, base_offset, length, leader_epoch)
    return out


class Spliced:
    """One batch as buffers sent one after the other, never joined into one (:attr:`parts`, in order)."""

    __slots__ = ("parts", "size")

    def __init__(self, *parts: bytes | bytearray | memoryview) -> None:
        self.parts = parts
        self.size = sum(len(p) for p in parts)

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return b"".join(self.parts)


def rebased(data: bytes | bytearray | memoryview, base_offset: int, *, leader_epoch: int = LEADER_EPOCH) -> Spliced:
    """One batch at another base offset without copying it: the 16 bytes of base offset, length and leader
    epoch written anew (all outside the CRC), the rest of the producer's bytes by reference."""
    (length,) = struct.unpack_from(">i", data, 8)
    return Spliced(_BASE_AND_EPOCH.pack(base_offset, length, leader_epoch), memoryview(data)[_REBASED:])


#: a batch as fetch serves it: encoded bytes, or a producer's batch at its base offset
Batch = bytes | bytearray | Spliced


def pack_header(*, base_offset: int, records: bytes | bytearray | memoryview, attributes: int,
                last_offset_delta: int, first_timestamp: int, max_timestamp: int, record_count: int,
                producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                leader_epoch: int = LEADER_EPOCH) -> bytearray:
    """The 61-byte header of a batch whose records section is ``records``, its CRC32C filled in.

    The CRC covers the header from ``attributes`` on and then the records: computed incrementally, so the
    records are never copied next to the header for it.
    """
    out = bytearray(HEADER_SIZE)
    HEADER.pack_into(out, 0, base_offset, HEADER_SIZE - LOG_OVERHEAD + len(records), leader_epoch, MAGIC_V2, 0,
                     attributes, last_offset_delta, first_timestamp, max_timestamp, producer_id, producer_epoch,
                     base_sequence, record_count)
    crc = crc32c.crc32c(records, crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]), gil_release_mode=_KEEP_GIL)
    struct.pack_into(">I", out, CRC_OFFSET, crc)
    return out
