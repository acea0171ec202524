"""Decompress a produced batch's records section, bounded: a small batch can never expand without limit.

Kafka's codecs as clients send them: gzip (a gzip stream), snappy (raw, as librdkafka sends it, or the
xerial framing of the Java client and kafka-python), lz4 (the LZ4 frame format) and zstd (a zstd frame).
Each is decompressed straight into a preallocated buffer of at most ``limit`` bytes by cramjam, which stops
at the end of that buffer: a decompression bomb is :class:`~s3stream.base.errors.RecordTooLarge` after
``limit`` bytes of work, and damaged input is :class:`~s3stream.apps.kafka.errors.CorruptBatch`.
"""

from __future__ import annotations

import struct

import cramjam
import numpy as np
import numpy.typing as npt

from s3stream.apps.kafka.errors import CorruptBatch, UnsupportedCompression
from s3stream.apps.kafka.records.batch import CODEC_GZIP, CODEC_LZ4, CODEC_SNAPPY, CODEC_ZSTD
from s3stream.base.errors import RecordTooLarge

__all__ = ["decompress_into"]

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16  # magic, int32 version, int32 compatible version
_BLOCK_LEN = struct.Struct(">i")


def decompress_into(codec: int, data: memoryview, out: npt.NDArray[np.uint8]) -> int:
    """Decompress ``data`` into ``out``; return the bytes written. RecordTooLarge when it does not fit."""
    try:
        if codec == CODEC_SNAPPY:
            return _snappy(data, out)
        if codec == CODEC_GZIP:
            return int(cramjam.gzip.decompress_into(data, out.data))
        if codec == CODEC_LZ4:
            return int(cramjam.lz4.decompress_into(data, out.data))
        if codec == CODEC_ZSTD:
            return int(cramjam.zstd.decompress_into(data, out.data))
    except cramjam.DecompressionError as exc:
        if "whole buffer" in str(exc) or "smaller than required" in str(exc):
            raise RecordTooLarge(f"a compressed batch expands past {len(out)} bytes") from None
        raise CorruptBatch(f"cannot decompress the batch: {exc}") from None
    raise UnsupportedCompression(f"unknown compression codec {codec}")


def _snappy(data: memoryview, out: npt.NDArray[np.uint8]) -> int:
    if bytes(data[:len(_XERIAL_MAGIC)]) != _XERIAL_MAGIC:
        return _snappy_block(data, out, 0)
    pos, written = _XERIAL_HEADER, 0
    end = len(data)
    if end < _XERIAL_HEADER:
        raise CorruptBatch("truncated xerial snappy header")
    while pos < end:
        if end - pos < _BLOCK_LEN.size:
            raise CorruptBatch("truncated xerial snappy block length")
        (size,) = _BLOCK_LEN.unpack_from(data, pos)
        pos += _BLOCK_LEN.size
        if size < 0 or size > end - pos:
            raise CorruptBatch(f"xerial snappy block of {size} bytes past the end of the batch")
        written += _snappy_block(data[pos:pos + size], out, written)
        pos += size
    return written


def _snappy_block(block: memoryview, out: npt.NDArray[np.uint8], at: int) -> int:
    """One raw snappy block into ``out[at:]``: its header states its length, checked before any work."""
    need = int(cramjam.snappy.decompress_raw_len(block))
    if need > len(out) - at:
        raise RecordTooLarge(f"a compressed batch expands past {len(out)} bytes")
    return int(cramjam.snappy.decompress_raw_into(block, out[at:at + need].data))
