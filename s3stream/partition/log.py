"""PartitionLog: append, read and roll one partition over its WAL tail, WAL objects and sealed segments.

State of a partition *in the process that writes it* (guarded by ``_lock``):

* ``manifest``: the latest committed manifest (sealed segments, log start, WAL cursor, writer epoch);
* ``pending``: segments already rolled (a boundary decided at append, rule ROLL-1) but not yet sealed;
* ``active``: the segment receiving appends; ``leo``: the next offset;
* ``memory``: recent batches (the tail cache; unflushed ones are pinned until their WAL object lands);
* ``chunks``: where this node's WAL objects hold the partition's unsealed records.

Invariants: ``manifest.next_offset <= pending[0].base <= ... <= active.base <= leo``; every offset in
``[manifest.next_offset, leo)`` is in ``memory`` or ``chunks`` (or both); a record is acknowledged only
once it is in the fsynced local WAL (``ack=wal``) or in a committed WAL object (``ack=s3``).

A process that does not write the partition reads it from the manifest plus a scan of the writer's WAL
namespace (:mod:`s3stream.read.walscan`). The first write claims the partition (a writer-epoch commit); if
another node wrote it, that node's namespace is fenced and its unsealed records are sealed first, so
nothing acknowledged is lost.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from s3stream.base import layout
from s3stream.base.errors import (
    CorruptData,
    InvalidArgument,
    InvalidRecord,
    ObjectNotFound,
    OffsetOutOfRange,
    PolicyViolation,
    RecordTooLarge,
    UnknownTopic,
)
from s3stream.base.records import (
    INT64_MAX,
    INT64_MIN,
    AppendResult,
    PreparedColumns,
    Record,
    SegmentInfo,
    int_arg,
    prepare_columns,
    records_from_batch,
)
from s3stream.base.topic_config import TopicConfig
from s3stream.format.walentry import AppendEntry, RollEntry, encode_entry
from s3stream.manifest.intents import add_segment, advance_log_start
from s3stream.manifest.model import Epoch, FrozenMap, Manifest, SegmentRef, WalCursor
from s3stream.manifest.versioned import ManifestStore, manifest_store, writer_fence
from s3stream.partition.claim import claim_partition
from s3stream.partition.host import LogHost
from s3stream.policy.roll import ActiveStats, should_roll
from s3stream.read.tiers import LogView, MemBatch, read_table
from s3stream.read.walscan import ChunkRef, contiguous_chunks
from s3stream.write.localwal import append_failed
from s3stream.write.seal import read_chunks, segment_ref, write_segment_stream
from s3stream.write.sealjob import SealJob
from s3stream.write.uploader import BufferedAppend
from wal import WalError

if TYPE_CHECKING:
    import concurrent.futures

    from s3stream.manifest.topicdoc import TopicDoc
    from s3stream.write.node_runtime import NodeRuntime

__all__ = ["PUBLISH_MARKER_PREFIX", "PartitionLog", "StagedSegment"]

log = logging.getLogger(__name__)

_BATCH_OVERHEAD_BYTES = 61  # a Kafka record batch header; counts against max.message.bytes
_WRITER_MANIFEST_MAX_AGE_S = 1.0


@dataclass(slots=True)
class _Unsealed:
    """A segment not yet sealed: the active one, or one rolled and awaiting its seal."""

    base_offset: int
    end_offset: int
    size_bytes: int = 0
    record_count: int = 0
    max_timestamp: int = -1
    first_batch_max_ts: int = -1
    created_ms: int = 0
    jitter_ms: int = 0
    #: local WAL seq of the roll entry that closed it: kept replayable until it is sealed, so a restart
    #: after a crash claims the partition and seals it (the node never trims its local WAL past it)
    roll_seq: int | None = None

    def stats(self) -> ActiveStats:
        return ActiveStats(self.base_offset, self.size_bytes, self.record_count, self.first_batch_max_ts,
                           self.created_ms, self.jitter_ms)

    def add(self, nbytes: int, count: int, max_ts: int, end_offset: int, first_ts: int | None = None) -> None:
        """Account a batch; ``first_ts`` stands in for the first batch's max timestamp when rebuilding."""
        if self.record_count == 0 and self.first_batch_max_ts < 0:
            self.first_batch_max_ts = max_ts if first_ts is None else first_ts
        self.size_bytes += nbytes
        self.record_count += count
        self.max_timestamp = max(self.max_timestamp, max_ts)
        self.end_offset = end_offset


@dataclass(slots=True)
class _Writer:
    epoch: Epoch
    node: NodeRuntime
    leo: int
    active: _Unsealed
    pending: list[_Unsealed] = field(default_factory=list)
    memory: deque[MemBatch] = field(default_factory=deque)
    memory_bytes: int = 0
    unflushed_from: int = 0
    chunks: list[ChunkRef] = field(default_factory=list)


class PartitionLog:
    """One partition of a topic. Obtain it with ``Store.partition(topic, index)``; thread-safe."""

    def __init__(self, rt: LogHost, doc: TopicDoc, partition: int) -> None:
        self._rt = rt
        self._topic = doc.name
        self._topic_id = doc.topic_id
        self._partition = partition
        self.log_id = f"{doc.name}/{doc.topic_id}/{partition}"
        self._vstore: ManifestStore = manifest_store(
            rt.objstore, topic=doc.name, topic_id=doc.topic_id, partition=partition, clock=rt.clock, ids=rt.ids,
            crash_points=rt.crash)
        self._lock = threading.RLock()
        self._seal_lock = threading.Lock()
        self._w: _Writer | None = None
        self._manifest: Manifest | None = None
        self._manifest_at = 0.0

    # -- identity and config ---------------------------------------------------------------------

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def partition(self) -> int:
        return self._partition

    @property
    def topic_id(self) -> str:
        return self._topic_id

    @property
    def is_writer(self) -> bool:
        """True when this process holds the partition's writer epoch."""
        return self._w is not None

    def __repr__(self) -> str:
        return f"PartitionLog({self._topic!r}, {self._partition})"

    def _config(self, *, refresh: bool = False) -> TopicConfig:
        return TopicConfig.from_overrides(self._live_doc(refresh=refresh).config)

    def _live_doc(self, *, refresh: bool = False) -> TopicDoc:
        """The topic document, if this log's topic still exists (UnknownTopic once deleted or re-created)."""
        doc = self._rt.catalog.get(self._topic, refresh=refresh)
        if doc.topic_id != self._topic_id:
            raise UnknownTopic(f"topic {self._topic!r} was deleted (and re-created)")
        return doc

    @property
    def manifest_store(self) -> ManifestStore:
        return self._vstore

    def manifest(self, *, refresh: bool = True) -> Manifest:
        """The latest committed manifest of this partition (an empty one before the first commit)."""
        with self._lock:
            cached = self._manifest
        if refresh or cached is None:
            loaded = self._vstore.load_latest() or Manifest.empty(self._topic, self._topic_id, self._partition)
            with self._lock:
                if self._manifest is None or loaded.seq >= self._manifest.seq:
                    self._manifest = loaded
                self._manifest_at = self._rt.clock.monotonic()
        with self._lock:
            assert self._manifest is not None
            return self._manifest

    def writer_owner(self) -> str | None:
        """The node that last claimed this partition for writing (from the latest manifest), or None."""
        m = self.manifest(refresh=True)
        return None if m.writer is None else m.writer.owner

    # -- the public API ----------------------------------------------------------------------------

    def append(self, records: Iterable[Record]) -> AppendResult:
        """Append ``records`` as one atomic batch at consecutive offsets; return where they landed.

        Raises InvalidRecord (e.g. a null key on a compacted topic; nothing of the batch is appended),
        RecordTooLarge (a record or the batch over ``max.message.bytes``), Fenced, UnknownTopic;
        InvalidArgument when ``records`` is not an iterable (``append(None)``), Closed after ``close()``;
        retriable: BufferFull (no room in ``buffer.bytes`` within ``max.block.ms``, nothing written) and,
        with ``ack=s3``, StoreUnavailable (the object store is unreachable: see docs/operations.md).
        """
        started = self._rt.clock.monotonic()
        self._rt.check_open()
        try:
            items = iter(records)
        except TypeError:
            raise InvalidArgument(f"append takes an iterable of Records (a list), not "
                                  f"{type(records).__name__}") from None
        recs = list(items)
        if not recs:
            raise InvalidRecord("append needs at least one record")
        cfg = self._config()
        now = self._rt.clock.now_ms()
        cols, max_ts, nbytes = _validate(recs, cfg, now)
        node = self._rt.node_runtime()
        ack_s3 = self._rt.settings.ack == "s3"
        if ack_s3:
            node.uploader.check_available()  # a long outage: refuse before anything is written
        node.uploader.wait_for_room(nbytes)
        with self._lock:
            w = self._ensure_writer(node)
            base = w.leo
            last = base + len(recs) - 1
            roll = should_roll(w.active.stats(), incoming_bytes=nbytes, incoming_max_ts=max_ts,
                               incoming_last_offset=last, now_ms=now, segment_bytes=cfg.segment_bytes,
                               max_segment_ms=cfg.max_segment_ms)
            batch = cols.batch(base)
            wal_future, s3_future, local_seq = self._write_ahead(node, batch, nbytes, roll=roll, ack_s3=ack_s3)
            if roll:
                self._roll_locked(w, cfg, now)
                w.pending[-1].roll_seq = local_seq - 1  # the roll entry went just before the batch
            w.active.add(nbytes, len(recs), max_ts, last + 1)
            w.memory.append(MemBatch(base, last, nbytes, batch))
            w.memory_bytes += nbytes
            w.leo = last + 1
        self._rt.note_memory(self, nbytes)
        if roll:
            self._rt.request_seal(self)
        if s3_future is not None:
            node.uploader.wait_committed(s3_future)
        elif wal_future is not None:
            try:
                wal_future.result()
            except WalError as exc:  # a full disk, an I/O error: typed, and a full disk resumes by itself
                raise append_failed(node, exc) from exc
        self._rt.metrics.appended(self._topic, len(recs), nbytes)
        self._rt.metrics.ack_latency.observe(self._rt.clock.monotonic() - started)
        return AppendResult(base, last)

    def read(self, offset: int, max_records: int | None = None, max_bytes: int | None = None) -> list[Record]:
        """Records at offsets >= ``offset`` in offset order, up to ``max_records``/``max_bytes``.

        Returns ``[]`` only at the log end; inside a compaction gap returns the next records. As in Kafka,
        at least one record comes back when one exists, even if it alone exceeds ``max_bytes`` (0 included).
        Raises OffsetOutOfRange below the log start or above the log end; InvalidArgument for an offset or
        budget that is not an int (bools too) or a negative ``max_bytes``; Closed after ``close()``.
        """
        return records_from_batch(self.read_arrow(offset, max_records=max_records, max_bytes=max_bytes))

    def read_arrow(self, offset: int, *, max_records: int | None = None, max_bytes: int | None = None) -> pa.Table:
        """Like :meth:`read`, as an Arrow table of ``records.RECORD_SCHEMA`` (the fast path)."""
        self._rt.check_open()  # a closed store's caches and WAL are gone: never serve from them
        offset = int_arg("offset", offset)
        if max_records is not None:
            max_records = int_arg("max_records", max_records)
        if max_bytes is not None:
            # the read path stops at a budget of 0 before its first record: 1 keeps Kafka's "at least one"
            max_bytes = max(1, int_arg("max_bytes", max_bytes, minimum=0))
        self._live_doc()  # a handle kept across delete_topic must not serve the deleted data
        if max_records is not None and max_records <= 0:
            return pa.Table.from_batches([], schema=_schema())
        for attempt in range(3):
            optimistic = self._optimistic_view(offset) if attempt == 0 else None
            view, still_latest = optimistic if optimistic is not None else (self._view(for_offset=offset), None)
            _check_offset(offset, view)
            try:
                table = read_table(view, offset, log_id=self.log_id, segments=self._rt.segments,
                                   chunks=self._rt.chunks, max_records=max_records, max_bytes=max_bytes)
                if table.num_rows == 0 and offset < view.log_end_offset:
                    # only a compaction gap up to the end of a sealed-only view: the records are in the tail
                    table = read_table(self._view(), offset, log_id=self.log_id, segments=self._rt.segments,
                                       chunks=self._rt.chunks, max_records=max_records, max_bytes=max_bytes)
                    still_latest = None
            except ObjectNotFound:
                # a segment or WAL object was removed after our snapshot (retention, compaction, GC):
                # re-read the manifest and try again (manifest-protocol.md T4)
                if attempt == 2:
                    raise
                self.manifest(refresh=True)
                continue
            if still_latest is not None and not still_latest():
                continue  # the manifest moved while we read: read again from the new one
            return table
        raise AssertionError("unreachable")

    def _optimistic_view(self, offset: int) -> tuple[LogView, Callable[[], bool]] | None:
        """For a read of the sealed tier of the cached manifest: a view of that manifest, and a check (to
        call after reading) that it was still the latest while the read ran, or None for other reads.

        A read must see the latest manifest (a log start another process moved makes it fail at once), and
        asking for it is a request per read. Sealed data never changes under a manifest that is still the
        latest, so the request runs alongside the read instead of before it; the rare read whose manifest
        moved meanwhile is done again (linearized at the probe either way).
        """
        with self._lock:  # the manifest and the writer's tail from one instant (a seal trims the tail)
            cached = self._manifest
            if cached is None or not cached.log_start_offset <= offset < cached.next_offset:
                return None
            view = self._view_of(cached, for_offset=offset)  # no I/O: the read starts in the sealed tier
        try:
            probe = self._rt.manifest_probes.submit(self.manifest, refresh=True)
        except RuntimeError:  # the store is closing: read the plain way (which reports it)
            return None
        return view, lambda: probe.result().seq == cached.seq

    def flush(self) -> None:
        """Make everything appended so far durable in object storage (and seal what was rolled)."""
        node = self._rt.existing_node()
        if node is not None:
            node.uploader.flush()
        self.seal_pending()

    def roll(self) -> None:
        """Seal the active segment now (a no-op when it is empty) and wait until it is committed."""
        cfg = self._config()
        node = self._rt.node_runtime()
        with self._lock:
            w = self._ensure_writer(node)
            if w.active.record_count > 0 or w.active.size_bytes > 0:
                roll_seq = self._write_roll_marker(node, w.leo)
                self._roll_locked(w, cfg, self._rt.clock.now_ms())
                w.pending[-1].roll_seq = roll_seq
        self.seal_pending()

    def publish_segments(self, staged: Sequence[StagedSegment], *,
                         marker: tuple[str, int] | None = None) -> AppendResult | None:
        """Append already-uploaded segment objects (written with offsets 0..n-1) at the log end, atomically.

        Used by bulk writers (Spark tasks stage the objects; the driver publishes them). Claims the
        partition as writer, seals what was appended before, then adds every staged segment in order in
        ONE manifest commit, with ``offset_delta`` = its assigned base. ``marker=(writer_id, batch_id)``
        makes replays no-ops: the commit records the batch id, and a batch id at or below the recorded one
        publishes nothing and returns None.
        """
        items = [s for s in staged if s.record_count > 0]
        node = self._rt.node_runtime()
        while True:
            self.roll()
            with self._lock:
                w = self._ensure_writer(node)
                if w.pending or w.active.record_count:
                    continue  # an append raced in after the roll: seal it too
                return self._publish_locked(w, items, marker)

    def _publish_locked(self, w: _Writer, items: Sequence[StagedSegment],
                        marker: tuple[str, int] | None) -> AppendResult | None:
        now = self._rt.clock.now_ms()
        refs: list[SegmentRef] = []
        offset = w.leo
        for s in items:
            refs.append(SegmentRef(key=s.key, base_offset=offset, last_offset=offset + s.record_count - 1,
                                   size_bytes=s.size_bytes, object_size=s.object_size, record_count=s.record_count,
                                   max_timestamp=s.max_timestamp, first_batch_max_timestamp=s.first_timestamp,
                                   created_ms=now, crc32c=s.crc32c, offset_delta=offset))
            offset += s.record_count
        m = self._vstore.commit(_publish_intent(refs, marker), check=writer_fence(w.epoch))
        self._manifest = m
        first = refs[0] if refs else None
        if first is None or not any(s.key == first.key and s.base_offset == first.base_offset for s in m.segments):
            return None  # a replayed batch (or nothing to add)
        w.leo = m.next_offset
        w.active = _Unsealed(w.leo, w.leo, created_ms=now, jitter_ms=w.active.jitter_ms)
        w.unflushed_from = max(w.unflushed_from, w.leo)
        return AppendResult(refs[0].base_offset, refs[-1].last_offset)

    @property
    def log_start_offset(self) -> int:
        return self._view().log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._view().log_end_offset

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """The earliest offset whose record timestamp is >= ``timestamp``, or None.

        Raises InvalidArgument for a ``timestamp`` that is not an int in int64 range; Closed after ``close()``.
        """
        self._rt.check_open()
        timestamp = int_arg("timestamp", timestamp, minimum=INT64_MIN, maximum=INT64_MAX)
        view = self._view()
        for seg in view.segments:
            if seg.last_offset < view.log_start_offset or seg.max_timestamp < timestamp:
                continue
            found = self._rt.segments.get(seg).offset_for_timestamp(timestamp)
            if found is not None:
                found += seg.offset_delta
            if found is not None and found >= view.log_start_offset:
                return found
            if found is not None:
                rest = self._scan_for_timestamp(view, view.log_start_offset, timestamp, until=seg.end_offset)
                if rest is not None:
                    return rest
        start = max(view.next_offset, view.log_start_offset)
        return self._scan_for_timestamp(view, start, timestamp, until=None)

    def _scan_for_timestamp(self, view: LogView, start: int, timestamp: int, until: int | None) -> int | None:
        pos = start
        end = view.log_end_offset if until is None else until
        while pos < end:
            table = read_table(view, pos, log_id=self.log_id, segments=self._rt.segments, chunks=self._rt.chunks,
                               max_bytes=8 << 20, until=end)
            if table.num_rows == 0:
                return None
            mask = pc.greater_equal(table.column("timestamp"), timestamp)
            idx = pc.index(mask, True).as_py()
            if idx is not None and idx >= 0:
                return int(table.column("offset")[idx].as_py())
            pos = int(table.column("offset")[-1].as_py()) + 1
        return None

    def delete_records(self, before_offset: int) -> int:
        """Move the log start offset to ``before_offset`` (-1: the log end); return the new start.

        Never moves backwards; raises OffsetOutOfRange past the log end and PolicyViolation on a topic
        whose cleanup.policy lacks ``delete`` (rule RET-8). Segments wholly below the new start are deleted
        by the next retention pass; reads below it fail at once. InvalidArgument for a ``before_offset``
        that is not an int (``None``, a bool); Closed after ``close()``.
        """
        self._rt.check_open()
        before_offset = int_arg("before_offset", before_offset)
        cfg = self._config(refresh=True)
        if not cfg.delete:
            raise PolicyViolation(f"DeleteRecords is not allowed on {self._topic!r}: cleanup.policy="
                                  f"{','.join(sorted(cfg.cleanup_policy)) or '(empty)'} lacks 'delete'")
        view = self._view()
        target = view.log_end_offset if before_offset == -1 else before_offset
        if target < 0 or target > view.log_end_offset:
            raise OffsetOutOfRange(
                f"cannot delete records before offset {before_offset}: the log end offset is {view.log_end_offset}",
                offset=before_offset, log_start_offset=view.log_start_offset, log_end_offset=view.log_end_offset)
        m = self._vstore.commit(_on_empty(self, advance_log_start(target)))
        assert m is not None
        with self._lock:
            if self._manifest is None or m.seq >= self._manifest.seq:
                self._manifest = m
        return m.log_start_offset

    def segments(self) -> list[SegmentInfo]:
        """Sealed segments first (from the manifest), then rolled-but-unsealed ones, the active one last."""
        view = self._view()
        out = [SegmentInfo(s.base_offset, s.last_offset, s.size_bytes, s.record_count, s.max_timestamp,
                           True, s.key) for s in view.segments]
        with self._lock:
            w = self._w
            if w is not None:
                out.extend(SegmentInfo(u.base_offset, u.end_offset - 1, u.size_bytes, u.record_count,
                                       u.max_timestamp, False, None) for u in [*w.pending, w.active])
                return out
        # another process writes it: rebuild its rolled and active segments from the WAL objects (exact
        # sizes: a chunk straddling the sealed end or a roll offset is loaded and split)
        rolls: tuple[int, ...] = ()
        m = self.manifest(refresh=False)
        if m.wal is not None and view.chunks:
            _, rolls = contiguous_chunks(self._rt.walindex.scan(m.wal), self.log_id, view.next_offset,
                                         from_seq=m.wal.from_seq)
        unsealed = _split_unsealed(view.chunks, rolls, view.next_offset, 0, 0,
                                   lambda ref: self._rt.chunks.get(ref, self.log_id))
        out.extend(SegmentInfo(u.base_offset, u.end_offset - 1, u.size_bytes, u.record_count, u.max_timestamp,
                               False, None) for u in unsealed)
        return out

    # -- views -------------------------------------------------------------------------------------

    def _view(self, for_offset: int | None = None) -> LogView:
        if self._w is not None:
            # the writer serves the unsealed tail from memory; the manifest can change under it only by
            # another process's retention, DeleteRecords or compaction: re-read it for reads of the
            # sealed tier (so they fail at once below a moved log start) and at most a second stale otherwise
            cached = self._manifest
            age = self._rt.clock.monotonic() - self._manifest_at
            if cached is None or age > _WRITER_MANIFEST_MAX_AGE_S or (
                    for_offset is not None and for_offset < cached.next_offset):
                self.manifest(refresh=True)
            return self._view_of(None, for_offset=for_offset)
        return self._view_of(self.manifest(refresh=True), for_offset=for_offset)

    def _view_of(self, m: Manifest | None, *, for_offset: int | None) -> LogView:
        """The view of manifest ``m`` (None: the cached one), with the writer's unsealed tail in the writing
        process: the writer's manifest and tail are taken under the lock together (a seal commits one and
        trims the other), else offsets sealed since the manifest would be in neither."""
        with self._lock:
            if m is None:
                m = self.manifest(refresh=False)
            w = self._w
            if w is not None:
                return LogView(m.log_start_offset, w.leo, m.next_offset, m.segments,
                               tuple(c for c in w.chunks if c.chunk.last_offset >= m.next_offset),
                               tuple(w.memory))
        chunks: list[ChunkRef] = []
        # a read that starts in the sealed tier needs no scan of the writer's WAL namespace (a request per
        # call for a sequential consumer): its view ends at the sealed end, and the read that crosses it
        # asks again
        if m.wal is not None and (for_offset is None or for_offset >= m.next_offset):
            chunks, _ = contiguous_chunks(self._rt.walindex.scan(m.wal), self.log_id, m.next_offset,
                                          from_seq=m.wal.from_seq)
        leo = chunks[-1].chunk.last_offset + 1 if chunks else m.next_offset
        return LogView(m.log_start_offset, leo, m.next_offset, m.segments, tuple(chunks))

    # -- writing internals -------------------------------------------------------------------------

    def _write_ahead(self, node: NodeRuntime, batch: pa.RecordBatch, nbytes: int, *, roll: bool, ack_s3: bool
                     ) -> tuple[concurrent.futures.Future[int] | None, concurrent.futures.Future[int] | None, int]:
        import concurrent.futures as cf

        s3_future: cf.Future[int] | None = cf.Future() if ack_s3 else None
        base = int(batch.column(0)[0].as_py())
        with node.append_lock:
            node.uploader.check()
            try:
                if roll:
                    node.wal.append_async(encode_entry(RollEntry(self.log_id, base)))
                local_seq = node.wal.next_seq
                wal_future = node.wal.append_async(encode_entry(AppendEntry(self.log_id, batch)))
            except WalError as exc:  # the writer stopped earlier: nothing of this batch was queued
                raise append_failed(node, exc) from exc
            node.uploader.add(BufferedAppend(self.log_id, batch, nbytes, local_seq, (base,) if roll else (),
                                             s3_future))
        return wal_future, s3_future, local_seq

    def _write_roll_marker(self, node: NodeRuntime, base_offset: int) -> int:
        """An explicit roll, in the local WAL. ``roll()`` seals at once, so the boundary is durable in the
        manifest before ``roll()`` returns; a crash before that loses only an unacknowledged boundary."""
        with node.append_lock:
            node.uploader.check()
            try:
                seq = node.wal.next_seq
                node.wal.append_async(encode_entry(RollEntry(self.log_id, base_offset)))
            except WalError as exc:
                raise append_failed(node, exc) from exc
        return seq

    def _roll_locked(self, w: _Writer, cfg: TopicConfig, now_ms: int) -> None:
        w.pending.append(w.active)
        jitter = self._rt.ids.randrange(min(cfg.segment_jitter_ms, cfg.segment_ms)) if cfg.segment_jitter_ms else 0
        w.active = _Unsealed(w.leo, w.leo, created_ms=now_ms, jitter_ms=jitter)

    def _ensure_writer(self, node: NodeRuntime) -> _Writer:
        """Claim this partition for this node (once); adopt another node's unsealed data first."""
        if self._w is not None:
            if self._w.node is not node:
                raise UnknownTopic("internal: partition claimed by a closed node")
            return self._w
        claimed = claim_partition(self, node)
        m = claimed.manifest
        self._manifest = m
        cfg = self._config()
        now = self._rt.clock.now_ms()
        jitter = self._rt.ids.randrange(min(cfg.segment_jitter_ms, cfg.segment_ms)) if cfg.segment_jitter_ms else 0
        segments = _split_unsealed(claimed.chunks, claimed.rolls, m.next_offset, now, jitter,
                                   lambda ref: self._rt.chunks.get(ref, self.log_id))
        leo = claimed.chunks[-1].chunk.last_offset + 1 if claimed.chunks else m.next_offset
        w = _Writer(epoch=claimed.epoch, node=node, leo=leo, active=segments[-1], pending=segments[:-1],
                    unflushed_from=leo, chunks=list(claimed.chunks))
        self._w = w
        node.register(self)
        if w.pending:
            self._rt.request_seal(self)
        return w

    # -- callbacks from the node -------------------------------------------------------------------

    def on_flushed(self, ref: ChunkRef, last_offset: int) -> None:
        """A WAL object holding our records up to ``last_offset`` committed."""
        with self._lock:
            w = self._w
            if w is None:
                return
            w.chunks.append(ref)
            w.unflushed_from = max(w.unflushed_from, last_offset + 1)

    def oldest_pending_roll_seq(self) -> int | None:
        """The local WAL seq of the oldest roll entry whose segment is not sealed yet (None: none)."""
        with self._lock:
            w = self._w
            seqs = [] if w is None else [seg.roll_seq for seg in w.pending if seg.roll_seq is not None]
        return min(seqs, default=None)

    def published_end(self) -> int | None:
        """The end of this node's records in committed WAL objects (None when not the writer here)."""
        with self._lock:
            return None if self._w is None else self._w.unflushed_from

    def evict_memory(self, want_bytes: int) -> int:
        """Drop flushed batches from the tail cache (oldest first); return the bytes freed."""
        freed = 0
        with self._lock:
            w = self._w
            if w is None:
                return 0
            # oldest first; unflushed batches are the newest and are never evicted
            while w.memory and freed < want_bytes and w.memory[0].last < w.unflushed_from:
                freed += w.memory.popleft().nbytes
            w.memory_bytes -= freed
        return freed

    def recovery_end(self) -> int:
        """Claim this partition for the recovering node (once) and return where its log ends in the bucket:
        local WAL entries below it are skipped without being replayed (or costing a request)."""
        node = self._rt.node_runtime()
        with self._lock:
            return self._ensure_writer(node).leo

    def recover_entry(self, entry: AppendEntry | RollEntry, local_seq: int) -> bool:
        """Replay one local WAL entry after a restart; False when the bucket already holds it.

        Entries must come in local WAL order; CorruptData when one starts past the log's end (records the
        bucket and the replayed entries both lack).
        """
        node = self._rt.node_runtime()
        with self._lock:
            w = self._ensure_writer(node)
            if isinstance(entry, RollEntry):
                if entry.base_offset == w.active.base_offset or entry.base_offset != w.leo:
                    return False
                cfg = self._config()
                self._roll_locked(w, cfg, self._rt.clock.now_ms())
                return True
            batch = entry.batch
            if batch.num_rows == 0:
                return False
            base = int(batch.column(0)[0].as_py())
            last = int(batch.column(0)[-1].as_py())
            if last < w.leo:
                return False
            if base != w.leo:
                raise CorruptData(f"local WAL entry {local_seq} of {self.log_id} starts at offset {base} but the "
                                  f"log ends at {w.leo}: records are missing", source=self.log_id)
            nbytes = _nbytes(batch)
            max_ts = int(pc.max(batch.column("timestamp")).as_py())
            with node.append_lock:
                node.uploader.add(BufferedAppend(self.log_id, batch, nbytes, local_seq, ()))
            w.active.add(nbytes, batch.num_rows, max_ts, last + 1)
            w.memory.append(MemBatch(base, last, nbytes, batch))
            w.memory_bytes += nbytes
            w.leo = last + 1
            return True

    def detach(self) -> None:
        """Forget writer state (the node closed or was fenced)."""
        with self._lock:
            self._w = None

    # -- sealing -----------------------------------------------------------------------------------

    def has_pending_seals(self) -> bool:
        with self._lock:
            return bool(self._w is not None and self._w.pending)

    def seal_pending(self) -> None:
        """Seal every rolled segment, oldest first (rule: manifest segments stay contiguous)."""
        with self._seal_lock:
            while True:
                with self._lock:
                    waiting = self._w
                    if waiting is None or not waiting.pending:
                        return
                # a stale manifest is re-read here, not under the lock below: appends wait for that lock, and
                # in an object-store outage the read takes the store's whole retry time
                self._view()
                with self._lock:
                    w = self._w
                    if w is None or not w.pending:
                        return
                    seg = w.pending[0]
                    view = self._view()
                    epoch = w.epoch
                    node = w.node
                self._seal_one(seg, view, epoch, node)

    def _write_segment(self, seg: _Unsealed, view: LogView) -> SegmentRef:
        """PUT the segment object of ``seg`` (streamed: one read chunk, one row group and one upload part in
        memory, not the whole segment), here or in a seal worker process (s3stream.write.sealjob)."""
        rt = self._rt
        if rt.seal_workers is None:
            tables = read_chunks(view, seg.base_offset, seg.end_offset, log_id=self.log_id, segments=rt.segments,
                                 chunks=rt.chunks)
            return write_segment_stream(rt, topic_id=self._topic_id, partition=self._partition, tables=tables,
                                        base_offset=seg.base_offset, last_offset=seg.end_offset - 1,
                                        first_batch_max_ts=seg.first_batch_max_ts)
        now = rt.clock.now_ms()
        key = layout.segment_key(self._topic_id, self._partition, seg.base_offset, rt.ids.ulid(now))
        job = SealJob.of(view, log_id=self.log_id, key=key, base_offset=seg.base_offset, end_offset=seg.end_offset,
                         first_batch_max_ts=seg.first_batch_max_ts,
                         row_group_bytes=rt.settings.segment_row_group_bytes,
                         part_bytes=rt.settings.segment_upload_part_bytes)
        summary = rt.seal_workers.run(job)
        rt.crash.hit("seal.after_segment_put")
        return segment_ref(key, summary, now, cleaned=False)

    def _seal_one(self, seg: _Unsealed, view: LogView, epoch: Epoch, node: NodeRuntime) -> None:
        rt = self._rt
        with rt.seal_slot:
            ref = self._write_segment(seg, view)
        if ref.record_count != seg.record_count:  # never commit a segment that lost records on the way
            raise CorruptData(f"sealed {ref.record_count} records of [{seg.base_offset}, {seg.end_offset}), "
                              f"expected {seg.record_count}", source=ref.key)
        # read the uploader's floor BEFORE our chunks: an object published in between is then either in
        # ``later`` or at/above the floor; the other order could skip it and hide its records from readers
        unpublished = node.uploader.lowest_unpublished_seq
        with self._lock:
            w = self._w
            later = [c.seq for c in (w.chunks if w else []) if c.chunk.last_offset >= seg.end_offset]
        cursor = WalCursor(node.node_id, min([*later, unpublished]))
        m = self._vstore.commit(_on_empty(self, add_segment(ref, cursor)), check=writer_fence(epoch))
        assert m is not None
        rt.crash.hit("seal.after_manifest_commit")
        with self._lock:
            self._manifest = m
            w = self._w
            if w is not None and w.pending and w.pending[0] is seg:
                w.pending.pop(0)
                w.chunks = [c for c in w.chunks if c.chunk.last_offset >= m.next_offset]
                dropped = 0
                while w.memory and w.memory[0].last < m.next_offset:
                    dropped += w.memory.popleft().nbytes
                w.memory_bytes -= dropped
            else:
                dropped = 0
        rt.note_memory(self, -dropped)
        rt.metrics.sealed(self._topic, ref.object_size)


#: manifest attribute prefix recording the last published batch id per bulk writer (idempotent replays)
PUBLISH_MARKER_PREFIX = "s3stream.publish.batch."


@dataclass(frozen=True, slots=True)
class StagedSegment:
    """A segment object uploaded with offsets ``0..record_count-1``, waiting to be published."""

    key: str
    object_size: int
    record_count: int
    size_bytes: int
    max_timestamp: int
    first_timestamp: int
    crc32c: int


def _publish_intent(refs: Sequence[SegmentRef], marker: tuple[str, int] | None):  # type: ignore[no-untyped-def]
    def apply(cur: Manifest) -> Manifest | None:
        attrs = dict(cur.attributes)
        if marker is not None:
            name = PUBLISH_MARKER_PREFIX + marker[0]
            recorded = attrs.get(name)
            if recorded is not None and int(recorded) >= marker[1]:
                return None
            attrs[name] = str(marker[1])
        m = cur
        for ref in refs:
            m = add_segment(ref, None)(m) or m
        if marker is None and m is cur:
            return None
        return dataclasses.replace(m, attributes=FrozenMap(attrs))

    return apply


def _schema() -> pa.Schema:
    from s3stream.base.records import RECORD_SCHEMA

    return RECORD_SCHEMA


def _nbytes(batch: pa.RecordBatch) -> int:
    from s3stream.base.records import batch_nbytes

    return batch_nbytes(batch)


def _on_empty(plog: PartitionLog, intent):  # type: ignore[no-untyped-def]
    """Adapt an intent over Manifest to one that treats 'no manifest yet' as the empty manifest."""
    def wrapped(cur: Manifest | None) -> Manifest | None:
        base = cur if cur is not None else Manifest.empty(plog.topic, plog.topic_id, plog.partition)
        result: Manifest | None = intent(base)
        return result

    return wrapped


def _check_offset(offset: int, view: LogView) -> None:
    if offset < view.log_start_offset or offset > view.log_end_offset:
        raise OffsetOutOfRange(
            f"offset {offset} is out of range [{view.log_start_offset}, {view.log_end_offset}]",
            offset=offset, log_start_offset=view.log_start_offset, log_end_offset=view.log_end_offset)


def _validate(recs: Sequence[Record], cfg: TopicConfig, now: int) -> tuple[PreparedColumns, int, int]:
    """Check every record and build its columns; returns (columns, max timestamp, logical bytes).

    Raises InvalidRecord / RecordTooLarge naming the first offending record; nothing is appended then.
    """
    for i, r in enumerate(recs):
        if type(r) is not Record and not isinstance(r, Record):
            raise InvalidRecord(f"record {i} is a {type(r).__name__}, not an s3stream.Record")
    if cfg.compact:
        for i, r in enumerate(recs):
            if r.key is None:
                raise InvalidRecord(f"record {i} has a null key; compacted topics require a key on every record")
    log_append = cfg.message_timestamp_type == "LogAppendTime"
    raw = [r.timestamp for r in recs]
    timestamps = [now] * len(recs) if log_append else [now if t is None else t for t in raw]
    low, high = min(timestamps), max(timestamps)
    if low < 0 or (not log_append and (now - low > cfg.message_timestamp_before_max_ms
                                       or high - now > cfg.message_timestamp_after_max_ms)):
        for i, ts in enumerate(timestamps):
            if ts < 0:
                raise InvalidRecord(f"record {i} has a negative timestamp {ts}")
            if now - ts > cfg.message_timestamp_before_max_ms or ts - now > cfg.message_timestamp_after_max_ms:
                raise InvalidRecord(f"record {i} timestamp {ts} is outside the accepted range around {now} "
                                    "(message.timestamp.before.max.ms / message.timestamp.after.max.ms)")
    cols = prepare_columns(recs, timestamps)
    largest = int(pc.max(cols.sizes).as_py())
    if largest > cfg.max_message_bytes:
        i = int(pc.index(pc.greater(cols.sizes, cfg.max_message_bytes), True).as_py())
        raise RecordTooLarge(f"record {i} is {recs[i].size_bytes} bytes, larger than max.message.bytes="
                             f"{cfg.max_message_bytes}")
    nbytes = int(pc.sum(cols.sizes).as_py())
    if nbytes + _BATCH_OVERHEAD_BYTES > cfg.max_message_bytes:
        raise RecordTooLarge(f"the batch is {nbytes + _BATCH_OVERHEAD_BYTES} bytes, larger than "
                             f"max.message.bytes={cfg.max_message_bytes}")
    return cols, high, nbytes


def _split_unsealed(chunks: Sequence[ChunkRef], rolls: Sequence[int], next_offset: int, now_ms: int,
                    jitter_ms: int, load: Callable[[ChunkRef], pa.RecordBatch]) -> list[_Unsealed]:
    """Rebuild pending + active segments from WAL chunks and recorded roll offsets (after a restart).

    A chunk wholly inside one segment contributes its index stats; a chunk that straddles the sealed
    end or a roll offset is loaded and split, so sizes (which drive rule ROLL-1) stay exact.
    """
    end = chunks[-1].chunk.last_offset + 1 if chunks else next_offset
    bounds = sorted({r for r in rolls if next_offset < r < end})
    segs = [_Unsealed(next_offset, next_offset, created_ms=now_ms)]
    for ref in chunks:
        c = ref.chunk
        while bounds and bounds[0] <= c.base_offset:
            start = bounds.pop(0)
            segs.append(_Unsealed(start, start, created_ms=now_ms))
        inside = [b for b in bounds if b <= c.last_offset]
        if c.base_offset >= segs[-1].base_offset and not inside:
            segs[-1].add(c.size_bytes, c.record_count, c.max_timestamp, c.last_offset + 1, c.first_timestamp)
            continue
        batch = load(ref)
        for cut in [*inside, c.last_offset + 1]:
            part = batch.filter(pc.and_(pc.greater_equal(batch.column("offset"), segs[-1].base_offset),
                                        pc.less(batch.column("offset"), cut)))
            if part.num_rows:
                segs[-1].add(_nbytes(part), part.num_rows, int(pc.max(part.column("timestamp")).as_py()),
                             int(part.column("offset")[-1].as_py()) + 1, int(part.column("timestamp")[0].as_py()))
            if cut <= c.last_offset:
                bounds.pop(0)
                segs.append(_Unsealed(cut, cut, created_ms=now_ms))
    segs[-1].jitter_ms = jitter_ms
    return segs
