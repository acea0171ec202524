"""Which Parquet codec each column of a segment gets, decided once per segment on its first row group.

A codec is worth its cost only where it shrinks something:

* **Byte columns** (``key``, ``value``, the header keys and values) are often incompressible: payloads
  compressed or encrypted by producers, random ids as keys. zstd spent ~20% of the time encoding random
  1 KiB values for 1% of their size. So, as RocksDB and ZFS do per block, the writer tries the codec on
  a sample of each byte column of the first row group and uses it for that column only when the sample
  shrinks by at least an eighth; otherwise (an empty sample too: no headers) the column is uncompressed.
* **Integer columns** (``offset``, ``timestamp``, ``horizon_ms``) are delta-encoded, which already removes
  what a codec would find, and a codec still costs a context per page: decompressing them cost a
  cleaning round ~4% of its CPU in ``ZSTD_createDCtx`` alone. They are stored uncompressed.

A first row group with fewer than :data:`MIN_SAMPLE_BYTES` in its byte columns is too small to judge
(and to save anything on): every column keeps the segment's codec. Readers need nothing: Parquet
records the codec of every column chunk.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from s3stream.base.records import RECORD_SCHEMA

__all__ = ["INTEGER_COLUMNS", "MAX_RATIO", "MIN_SAMPLE_BYTES", "SAMPLE_BYTES", "column_codecs"]

#: Bytes tried per byte column: enough to judge, ~0.3 ms of zstd once per segment.
SAMPLE_BYTES = 256 << 10
#: Below this many sampled bytes (all byte columns together) there is nothing to judge: keep the codec.
MIN_SAMPLE_BYTES = 4 << 10
#: A column's sample must shrink to at most this fraction for the column to be compressed.
MAX_RATIO = 7 / 8
_UNCOMPRESSED = "none"
#: The integer columns: delta-encoded, with statistics (the writer's settings), never compressed once judged.
INTEGER_COLUMNS = ("offset", "timestamp", "horizon_ms")


@functools.cache
def _leaf_paths() -> tuple[str, ...]:
    """Parquet's leaf column paths of RECORD_SCHEMA (a per-column codec map must name every one)."""
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, RECORD_SCHEMA) as writer:
        writer.write_table(RECORD_SCHEMA.empty_table())
    schema = pq.ParquetFile(pa.BufferReader(sink.getvalue())).schema
    return tuple(schema.column(i).path for i in range(len(schema)))


def column_codecs(codec: str, first_group: pa.Table | None) -> str | dict[str, str]:
    """The Parquet writer's ``compression`` argument for a segment whose first row group is ``first_group``.

    ``codec`` everywhere when it is none, when there is no row group, or when the group is too small to
    judge; otherwise a map of every leaf column to ``codec`` or none (see the module docstring).
    """
    if codec.lower() == _UNCOMPRESSED or first_group is None:
        return codec
    samples = {path: _sample(leaf, SAMPLE_BYTES) for path, leaf in _byte_leaves(first_group).items()}
    if sum(s.size for s in samples.values()) < MIN_SAMPLE_BYTES:
        return codec
    compressor = pa.Codec(codec)
    return {path: codec if path in samples and _shrinks(compressor, samples[path]) else _UNCOMPRESSED
            for path in _leaf_paths()}


def _shrinks(compressor: pa.Codec, sample: pa.Buffer) -> bool:
    return sample.size > 0 and bool(len(compressor.compress(sample)) <= MAX_RATIO * sample.size)


def _byte_leaves(table: pa.Table) -> dict[str, list[pa.Array]]:
    """The chunks of every byte leaf column of a RECORD_SCHEMA table, by Parquet path."""
    key_chunks: list[pa.Array] = []
    value_chunks: list[pa.Array] = []
    for chunk in table.column("headers").chunks:
        entries = chunk.flatten()  # the list's entries (this chunk's slice only)
        key_chunks.append(entries.field("key").slice(entries.offset, len(entries)))
        value_chunks.append(entries.field("value").slice(entries.offset, len(entries)))
    return {"key": table.column("key").chunks, "value": table.column("value").chunks,
            "headers.list.element.key": key_chunks, "headers.list.element.value": value_chunks}


def _sample(chunks: list[pa.Array], limit: int) -> pa.Buffer:
    """Up to ``limit`` bytes of binary/string data, from the first chunks (no copy when one chunk suffices)."""
    pieces: list[pa.Buffer] = []
    size = 0
    for chunk in chunks:
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
