"""Sealing the segments this node's writer rolled: each becomes a Parquet segment object and one manifest
commit (``add_segment``, writer-fenced) that also moves the partition's WAL cursor.

Oldest first (the manifest's segments stay contiguous), one seal at a time per partition (its own lock), at
most ``seal.concurrency`` per process (``seal_slot``). The segment is streamed (one read chunk, one row
group and one upload part in memory), here or in a seal worker process (:mod:`s3stream.write.sealjob`), and
refused if its record count differs from the rolled segment's. The same commit records the idempotent
producers' state as of the segment's end (``set_producers``). After the commit the writer drops the sealed
segment, and the WAL chunks and tail batches below the new sealed end.
"""

from __future__ import annotations

import threading

from s3stream.base import layout
from s3stream.base.errors import CommitConflict, CorruptData
from s3stream.manifest.intents import add_segment, compose, set_producers
from s3stream.manifest.model import Epoch, Manifest, SegmentRef, WalCursor
from s3stream.manifest.versioned import writer_fence
from s3stream.partition.state import LogState
from s3stream.partition.writer import Unsealed
from s3stream.read.tiers import LogView
from s3stream.write.node_runtime import NodeRuntime
from s3stream.write.seal import read_chunks, segment_ref, write_segment_stream
from s3stream.write.sealjob import SealJob

__all__ = ["Sealing"]


def _check_still_ours(m: Manifest, epoch: Epoch, seg: Unsealed) -> None:
    """Refuse (before reading anything) to seal a segment whose offsets another writer took over: the view
    serves offsets below the manifest's sealed end from that writer's segments, maybe compacted or deleted
    since, so the seal would read their records instead of this writer's (seed 9606: CorruptData)."""
    writer_fence(epoch)(m)  # Fenced
    if m.next_offset != seg.base_offset:
        raise CommitConflict(f"segment [{seg.base_offset}, {seg.end_offset}) of {m.topic_id}/{m.partition} "
                             f"does not start at the sealed end {m.next_offset}")


class Sealing:
    """The seals of one partition's rolled segments (thread-safe)."""

    def __init__(self, state: LogState) -> None:
        self._state = state
        self._lock = threading.Lock()

    def has_pending(self) -> bool:
        st = self._state
        with st.lock:
            return bool(st.writer is not None and st.writer.pending)

    def seal_pending(self) -> None:
        """Seal every rolled segment, oldest first."""
        st = self._state
        with self._lock:
            while True:
                if not self.has_pending():
                    return
                # a stale manifest is re-read here, not under the lock below: appends wait for that lock, and
                # in an object-store outage the read takes the store's whole retry time
                st.view()
                with st.lock:
                    w = st.writer
                    if w is None or not w.pending:
                        return
                    seg = w.pending[0]
                    view = st.view()
                    epoch = w.epoch
                    node = w.node
                    _check_still_ours(st.manifest(refresh=False), epoch, seg)
                self._seal_one(seg, view, epoch, node)

    def _write_segment(self, seg: Unsealed, view: LogView) -> SegmentRef:
        """PUT the segment object of ``seg``, here or in a seal worker process."""
        st = self._state
        rt = st.host
        if rt.seal_workers is None:
            tables = read_chunks(view, seg.base_offset, seg.end_offset, log_id=st.log_id, segments=rt.segments,
                                 chunks=rt.chunks)
            return write_segment_stream(rt, topic_id=st.topic_id, partition=st.partition, tables=tables,
                                        base_offset=seg.base_offset, last_offset=seg.end_offset - 1,
                                        first_batch_max_ts=seg.first_batch_max_ts)
        now = rt.clock.now_ms()
        key = layout.segment_key(st.topic_id, st.partition, seg.base_offset, rt.ids.ulid(now))
        job = SealJob.of(view, log_id=st.log_id, key=key, base_offset=seg.base_offset, end_offset=seg.end_offset,
                         first_batch_max_ts=seg.first_batch_max_ts,
                         row_group_bytes=rt.settings.segment_row_group_bytes,
                         part_bytes=rt.settings.segment_upload_part_bytes)
        summary = rt.seal_workers.run(job)
        rt.crash.hit("seal.after_segment_put")
        return segment_ref(key, summary, now, cleaned=False)

    def _seal_one(self, seg: Unsealed, view: LogView, epoch: Epoch, node: NodeRuntime) -> None:
        st = self._state
        rt = st.host
        with rt.seal_slot:
            ref = self._write_segment(seg, view)
        if ref.record_count != seg.record_count:  # never commit a segment that lost records on the way
            raise CorruptData(f"sealed {ref.record_count} records of [{seg.base_offset}, {seg.end_offset}), "
                              f"expected {seg.record_count}", source=ref.key)
        # read the uploader's floor BEFORE our chunks: an object published in between is then either in
        # ``later`` or at/above the floor; the other order could skip it and hide its records from readers
        unpublished = node.uploader.lowest_unpublished_seq
        with st.lock:
            w = st.writer
            later = [] if w is None else w.chunk_seqs_from(seg.end_offset)
            known = w is not None and seg.producers is not None  # else the manifest keeps the snapshot it has
            producers = w.producer_snapshot(seg, rt.clock.now_ms()) if w is not None and known else None
        cursor = WalCursor(node.node_id, min([*later, unpublished]))
        intent = add_segment(ref, cursor)
        if known:
            intent = compose(intent, set_producers(producers, at_offset=seg.end_offset))
        m = st.manifest_store.commit(intent, check=writer_fence(epoch))
        rt.crash.hit("seal.after_manifest_commit")
        with st.lock:
            st.adopt(m)
            dropped = 0 if st.writer is None else st.writer.sealed(seg, m.next_offset)
        rt.note_memory(st.owner, -dropped)
        rt.metrics.sealed(st.topic, ref.object_size)
