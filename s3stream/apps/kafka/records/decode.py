"""A produced v2 batch to the Arrow columns ``PartitionLog.append_arrow`` takes (key, value, timestamp, headers).

The records are walked by aiokafka's compiled ``DefaultRecordBatch`` (varints, lengths and bounds checked in
C); the fields are gathered with C-level ``map(attrgetter(...))`` and turned into Arrow arrays in bulk, so no
Python bytecode runs per record. A compressed batch is decompressed here first, bounded
(:mod:`.compression`), and handed to the codec as an uncompressed batch.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from aiokafka.record._crecords import DefaultRecordBatch  # type: ignore[import-untyped]

from s3stream.apps.kafka.errors import CorruptBatch
from s3stream.apps.kafka.records.batch import CODEC_MASK, CODEC_NONE, HEADER, HEADER_SIZE, BatchHeader
from s3stream.apps.kafka.records.compression import decompress_into
from s3stream.base.errors import InvalidRecord
from s3stream.base.records import HEADER_TYPE, binary_column

__all__ = ["DecodedBatch", "decode_batch", "decoded_limit"]

_KEY = operator.attrgetter("key")
_VALUE = operator.attrgetter("value")
_TIMESTAMP = operator.attrgetter("timestamp")
_OFFSET = operator.attrgetter("offset")
_HEADERS = operator.attrgetter("headers")


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    header: BatchHeader
    #: a RecordBatch, not a Table: ``append_arrow`` takes its columns as they are (a Table's would be
    #: combined from their chunks, a copy of every value)
    table: pa.RecordBatch


def decoded_limit(max_message_bytes: int) -> int:
    """How far a compressed batch may expand: anything larger fails the store's own size check anyway.

    The store counts 21 bytes plus key, value and headers per record against ``max.message.bytes``; the
    encoded form of a record is at most ~2x that (varint prefixes), so twice the limit plus slack never
    refuses a batch the store would take.
    """
    return 2 * max_message_bytes + (1 << 16)


def decode_batch(data: bytes | bytearray | memoryview, header: BatchHeader, *, limit: int) -> DecodedBatch:
    """The records of a checked batch (:func:`~.batch.parse_produced`) as an Arrow table.

    Raises CorruptBatch (damaged records or compression), InvalidRecord (offset deltas not 0..n-1), and
    RecordTooLarge (a compressed batch expanding past ``limit``).
    """
    view = memoryview(data)
    if header.codec != CODEC_NONE:
        view = _uncompressed_copy(view, header, limit)
    try:
        records = list(DefaultRecordBatch(view))
        headers = list(map(_HEADERS, records))
        header_col = pa.array(headers, type=HEADER_TYPE) if any(headers) else pa.nulls(len(records), HEADER_TYPE)
    except (MemoryError, RecursionError):
        raise
    except Exception as exc:  # noqa: BLE001  # the codec raises CorruptRecordException, struct, Unicode, ...
        raise CorruptBatch(f"corrupt records in the batch: {type(exc).__name__}: {exc}") from None
    n = len(records)
    if n != header.record_count:
        raise CorruptBatch(f"the batch holds {n} records, its header says {header.record_count}")
    offsets = np.fromiter(map(_OFFSET, records), dtype=np.int64, count=n)
    if not np.array_equal(offsets - header.base_offset, np.arange(n, dtype=np.int64)):
        raise InvalidRecord("a produced batch's records must have offset deltas 0, 1, ... in order")
    timestamps = pa.array(np.fromiter(map(_TIMESTAMP, records), dtype=np.int64, count=n))
    table = pa.RecordBatch.from_arrays(
        [binary_column(list(map(_KEY, records))), binary_column(list(map(_VALUE, records))), timestamps, header_col],
        names=["key", "value", "timestamp", "headers"])
    return DecodedBatch(header, table)


def _uncompressed_copy(view: memoryview, header: BatchHeader, limit: int) -> memoryview:
    """The batch with its records decompressed and its codec bits cleared (the CRC is not checked again)."""
    out = np.empty(HEADER_SIZE + limit, dtype=np.uint8)
    written = decompress_into(header.codec, view[HEADER_SIZE:], out[HEADER_SIZE:])
    fields = list(HEADER.unpack_from(view, 0))
    fields[5] = header.attributes & ~CODEC_MASK
    HEADER.pack_into(out, 0, *fields)  # type: ignore[arg-type]  # numpy arrays are writable buffers
    return out.data[:HEADER_SIZE + written]
