"""A straightforward per-record compaction in plain Python: the baseline the vectorized cleaner is compared to.

What a first implementation of Kafka's cleaner would look like without Arrow compute: segments are
decoded into :class:`s3stream.Record` objects (the API-edge conversion), a ``dict`` maps each key to its
latest offset (pass 1, one loop over every record), and pass 2 loops over every record again keeping
those whose offset is the latest of their key, then re-encodes the survivors as segments of the same
format (:func:`s3stream.format.segment.encode_segment`). Same rules as the cleaner for this workload (keyed
values, no tombstones): the latest record per key survives with its offset, timestamp and headers.

It is deliberately not optimized beyond the obvious; the benchmark runs it on a subset of the data and
scales its throughput (it is linear in the records).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from s3stream.base.records import RECORD_SCHEMA, Record, records_from_batch
from s3stream.format.segment import encode_segment

__all__ = ["BaselineSegment", "compact_segments", "latest_offsets", "rewrite_segment"]


@dataclass(frozen=True, slots=True)
class BaselineSegment:
    """One encoded segment object and the offset range it covers."""

    data: bytes
    base_offset: int
    last_offset: int


def _records(data: bytes) -> list[Record]:
    """Decode a segment object into Record objects, one per row."""
    return records_from_batch(pq.read_table(pa.BufferReader(data)))


def latest_offsets(segments: Iterable[BaselineSegment]) -> dict[bytes, int]:
    """Pass 1: key -> latest offset, one dict update per record."""
    latest: dict[bytes, int] = {}
    for seg in segments:
        for rec in _records(seg.data):
            if rec.key is not None and rec.offset is not None:
                latest[bytes(rec.key)] = rec.offset
    return latest


def rewrite_segment(seg: BaselineSegment, latest: dict[bytes, int], *, row_group_bytes: int) -> BaselineSegment:
    """Pass 2 for one segment: keep each record that is the latest of its key, re-encode the survivors."""
    kept: list[dict[str, object]] = []
    for rec in _records(seg.data):
        if rec.key is None or latest.get(bytes(rec.key)) != rec.offset:
            continue
        kept.append({"offset": rec.offset, "timestamp": rec.timestamp, "key": rec.key, "value": rec.value,
                     "headers": [{"key": k, "value": v} for k, v in rec.headers] or None, "horizon_ms": None})
    table = pa.Table.from_pylist(kept, schema=RECORD_SCHEMA)
    first_ts = int(kept[0]["timestamp"]) if kept else -1  # type: ignore[call-overload]
    data, _ = encode_segment(table, base_offset=seg.base_offset, last_offset=seg.last_offset,
                             first_batch_max_timestamp=first_ts, row_group_bytes=row_group_bytes)
    return BaselineSegment(data, seg.base_offset, seg.last_offset)


def compact_segments(segments: Sequence[BaselineSegment], *, row_group_bytes: int = 1 << 20
                     ) -> Iterator[BaselineSegment]:
    """Compact ``segments`` (oldest first) as one round: the latest record of every key survives."""
    latest = latest_offsets(segments)
    for seg in segments:
        yield rewrite_segment(seg, latest, row_group_bytes=row_group_bytes)
