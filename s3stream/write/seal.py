"""Writing one segment object: encode the records as Parquet, upload under a fresh unique key.

The key embeds a ULID, so a retried or zombie seal can never overwrite anything; an object whose
manifest commit never happens is an orphan that GC removes after ``orphan_min_age_ms``.

Two forms. Seals stream (:func:`write_segment_stream`): the records are read in chunks of
:data:`SEAL_READ_BYTES` (:func:`read_chunks`), encoded row group by row group
(:class:`~s3stream.format.segment.SegmentWriter`) and uploaded part by part (``ObjectStore.open_upload`` with
``segment.upload.part.bytes``), so a seal holds one read chunk, one row group and one upload part
whatever ``segment.bytes`` is; the object becomes visible only when the upload completes. The cleaner
streams its outputs the same way, fed with each chunk's survivors (:mod:`cleaner.output`).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from typing import Protocol

import pyarrow as pa

from s3stream.base import layout
from s3stream.base.clock import Clock
from s3stream.base.crashpoints import CrashPoints
from s3stream.base.ids import IdSource
from s3stream.base.settings import StoreSettings
from s3stream.format.segment import SegmentSummary, SegmentWriter
from s3stream.manifest.model import SegmentRef
from s3stream.objectstore.protocol import ObjectStore
from s3stream.read.tiers import ChunkCache, LogView, SegmentReaderCache, chunks_to_fetch, read_table

__all__ = ["SEAL_READ_BYTES", "SealContext", "read_chunks", "segment_ref", "stream_segment", "write_segment_stream"]

#: Logical record bytes a seal reads (and hands the encoder) at a time.
SEAL_READ_BYTES = 8 << 20


def read_chunks(view: LogView, start: int, end: int, *, log_id: str, segments: SegmentReaderCache,
                chunks: ChunkCache, max_bytes: int = SEAL_READ_BYTES) -> Iterator[pa.Table]:
    """The records at offsets ``[start, end)`` of ``view`` in order, as tables of about ``max_bytes``.

    WAL-object chunks below the tail cache are prefetched about two read chunks ahead, so the GETs overlap
    the decoding and encoding. After each chunk the view forgets the tail-cache batches already read, so a
    batch the cache evicts while a long seal runs is freed instead of being pinned by the seal until it ends.
    """
    pos = start
    while pos < end:
        # the GETs of the next two chunks' worth of WAL-object data run while this one is decoded and encoded
        chunks.prefetch(chunks_to_fetch(view, pos, end, 2 * max_bytes), log_id)
        table = read_table(view, pos, log_id=log_id, segments=segments, chunks=chunks, max_bytes=max_bytes,
                           until=end)
        if table.num_rows == 0:
            return
        pos = int(table.column("offset")[-1].as_py()) + 1
        yield table
        del table
        view = _without_memory_before(view, pos)


def _without_memory_before(view: LogView, pos: int) -> LogView:
    done = bisect.bisect_left([m.last for m in view.memory], pos)
    if done == 0:
        return view
    return LogView(log_start_offset=view.log_start_offset, log_end_offset=view.log_end_offset,
                   next_offset=view.next_offset, segments=view.segments, chunks=view.chunks,
                   memory=view.memory[done:])


class SealContext(Protocol):
    """What a seal needs of the store: where to write, its settings, time, ids and crash points."""

    @property
    def objstore(self) -> ObjectStore: ...
    @property
    def settings(self) -> StoreSettings: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def ids(self) -> IdSource: ...
    @property
    def crash(self) -> CrashPoints: ...


def write_segment_stream(rt: SealContext, *, topic_id: str, partition: int, tables: Iterable[pa.Table],
                         base_offset: int, last_offset: int, first_batch_max_ts: int, cleaned: bool = False,
                         crash_point: str = "seal.after_segment_put") -> SegmentRef:
    """Encode ``tables`` (in offset order) as the segment covering ``[base_offset, last_offset]`` while
    uploading it; a failure anywhere aborts the upload, so nothing is left visible."""
    now = rt.clock.now_ms()
    key = layout.segment_key(topic_id, partition, base_offset, rt.ids.ulid(now))
    summary = stream_segment(rt.objstore, key, tables, base_offset=base_offset, last_offset=last_offset,
                             first_batch_max_ts=first_batch_max_ts,
                             row_group_bytes=rt.settings.segment_row_group_bytes,
                             part_bytes=rt.settings.segment_upload_part_bytes)
    rt.crash.hit(crash_point)
    return segment_ref(key, summary, now, cleaned)


def stream_segment(objstore: ObjectStore, key: str, tables: Iterable[pa.Table], *, base_offset: int,
                   last_offset: int, first_batch_max_ts: int, row_group_bytes: int, part_bytes: int
                   ) -> SegmentSummary:
    """Encode ``tables`` as the segment object ``key`` while uploading it part by part (the I/O of a seal,
    wherever it runs: a sealer thread or a seal worker process)."""
    with objstore.open_upload(key, part_bytes=part_bytes) as upload:
        writer = SegmentWriter(upload.write, base_offset=base_offset, last_offset=last_offset,
                               first_batch_max_timestamp=first_batch_max_ts, row_group_bytes=row_group_bytes)
        for table in tables:
            writer.write(table)
        summary = writer.finish()
        upload.complete()
    return summary


def segment_ref(key: str, summary: SegmentSummary, created_ms: int, cleaned: bool) -> SegmentRef:
    """The manifest entry of the segment object ``key`` the encoder summarized as ``summary``."""
    return SegmentRef(key=key, base_offset=summary.base_offset, last_offset=summary.last_offset,
                      size_bytes=summary.size_bytes, object_size=summary.object_size,
                      record_count=summary.record_count, max_timestamp=summary.max_timestamp,
                      first_batch_max_timestamp=summary.first_batch_max_timestamp, created_ms=created_ms,
                      crc32c=summary.crc32c, cleaned=cleaned)
