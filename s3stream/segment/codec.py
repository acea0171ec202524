"""Which Parquet codec each column of a segment gets: the segment's codec, except on values it cannot shrink.

Record values are often compressed or encrypted already (producers compress payloads, images, Avro with
its own codec, ciphertext), and compressing them again costs a full pass for nothing: zstd spent ~20% of
the time encoding random 1 KiB values and gave back 1% of their size (measured, 64 MiB segments). So, as
RocksDB and ZFS do per block, the writer tries the codec on a sample of the first row group's values and
stores the ``value`` column uncompressed when the sample does not shrink by at least an eighth. The
other columns (offsets, timestamps, keys, headers) always use the segment's codec. Readers need nothing:
Parquet records the codec of every column chunk.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from s3stream.records import RECORD_SCHEMA

__all__ = ["MAX_RATIO", "MIN_SAMPLE_BYTES", "SAMPLE_BYTES", "column_codecs", "values_compress"]

#: Value bytes tried: enough to judge, ~0.3 ms of zstd once per segment.
SAMPLE_BYTES = 256 << 10
#: Below this many sampled bytes there is nothing to judge (and nothing to save): keep the codec.
MIN_SAMPLE_BYTES = 4 << 10
#: The sample must shrink to at most this fraction for the values to be compressed.
MAX_RATIO = 7 / 8
_UNCOMPRESSED = "none"


@functools.cache
def _leaf_paths() -> tuple[str, ...]:
    """Parquet's leaf column paths of RECORD_SCHEMA (a per-column codec map must name every one)."""
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, RECORD_SCHEMA) as writer:
        writer.write_table(RECORD_SCHEMA.empty_table())
    schema = pq.ParquetFile(pa.BufferReader(sink.getvalue())).schema
    return tuple(schema.column(i).path for i in range(len(schema)))


def column_codecs(codec: str, *, compress_values: bool) -> str | dict[str, str]:
    """The ``compression`` argument of the Parquet writer: ``codec`` everywhere, or all but ``value``."""
    if compress_values or codec.lower() == _UNCOMPRESSED:
        return codec
    return {path: _UNCOMPRESSED if path == "value" else codec for path in _leaf_paths()}


def values_compress(table: pa.Table, codec: str) -> bool:
    """Whether ``codec`` shrinks the first :data:`SAMPLE_BYTES` of ``table``'s values by an eighth or more.

    True (compress, the safe default) when the codec is none or too few value bytes are there to judge.
    """
    if codec.lower() == _UNCOMPRESSED:
        return True
    sample = _value_sample(table.column("value"), SAMPLE_BYTES)
    if sample.size < MIN_SAMPLE_BYTES:
        return True
    return bool(len(pa.Codec(codec).compress(sample)) <= MAX_RATIO * sample.size)


def _value_sample(values: pa.ChunkedArray, limit: int) -> pa.Buffer:
    """Up to ``limit`` bytes of the values' data, from the first chunks (no copy when one chunk suffices)."""
    pieces: list[pa.Buffer] = []
    size = 0
    for chunk in values.chunks:
        if size >= limit:
            break
        if len(chunk) == 0:
            continue
        offsets = np.frombuffer(chunk.buffers()[1], dtype=np.int32)[chunk.offset:chunk.offset + len(chunk) + 1]
        data = chunk.buffers()[2]
        start, end = int(offsets[0]), int(offsets[-1])
        if data is None or end <= start:
            continue
        take = min(end - start, limit - size)
        pieces.append(data.slice(start, take))
        size += take
    if len(pieces) == 1:
        return pieces[0]
    return pa.py_buffer(b"".join(p.to_pybytes() for p in pieces))
