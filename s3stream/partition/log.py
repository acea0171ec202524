"""PartitionLog: append, read and roll one partition over its WAL tail, WAL objects and sealed segments.

A record is acknowledged only once it is in the fsynced local WAL (``ack=wal``) or in a committed WAL
object (``ack=s3``). A process that does not write the partition reads it from the manifest plus a scan of
the writer's WAL namespace (:mod:`s3stream.read.walscan`). The first write claims the partition (a
writer-epoch commit); if another node wrote it, that node's namespace is fenced and its unsealed records
are sealed first, so nothing acknowledged is lost.

The parts, each its own module: the shared state and views (:mod:`.state`), the writer state
(:mod:`.writer`), validation (:mod:`.validate`), the append queue and its WAL entries (:mod:`.appends`),
reads (:mod:`.reads`), sealing (:mod:`.sealing`), bulk publish (:mod:`.publish`), recovery replay
(:mod:`.recovery`) and the claim (:mod:`.claim`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING

import pyarrow as pa

from s3stream.base.errors import InvalidArgument, InvalidConfig, InvalidRecord, OffsetOutOfRange, PolicyViolation
from s3stream.base.producer import ProducerBatch
from s3stream.base.records import (
    INT64_MAX,
    INT64_MIN,
    RECORD_SCHEMA,
    AppendResult,
    LogExtent,
    Record,
    SegmentInfo,
    int_arg,
    records_from_batch,
)
from s3stream.format.walentry import AppendEntry, RollEntry
from s3stream.manifest.intents import advance_log_start
from s3stream.manifest.model import Manifest, SegmentRef
from s3stream.manifest.versioned import ManifestStore
from s3stream.partition import reads, recovery
from s3stream.partition.appends import Appender
from s3stream.partition.host import LogHost
from s3stream.partition.publish import PUBLISH_MARKER_PREFIX, StagedSegment, publish_segments
from s3stream.partition.sealing import Sealing
from s3stream.partition.state import LogState
from s3stream.partition.validate import PreparedAppend, check_producer, prepare_arrow, prepare_records
from s3stream.read.walscan import ChunkRef

if TYPE_CHECKING:
    from s3stream.manifest.topicdoc import TopicDoc

__all__ = ["PUBLISH_MARKER_PREFIX", "PartitionLog", "StagedSegment"]


class PartitionLog:
    """One partition of a topic. Obtain it with ``Store.partition(topic, index)``; thread-safe."""

    def __init__(self, rt: LogHost, doc: TopicDoc, partition: int) -> None:
        self._rt = rt
        self._state = LogState(rt, doc, partition, self)
        self.log_id = self._state.log_id
        self._appends = Appender(self._state)
        self._sealing = Sealing(self._state)

    # -- identity ----------------------------------------------------------------------------------

    @property
    def topic(self) -> str:
        return self._state.topic

    @property
    def partition(self) -> int:
        return self._state.partition

    @property
    def topic_id(self) -> str:
        return self._state.topic_id

    @property
    def is_writer(self) -> bool:
        """True when this process holds the partition's writer epoch."""
        return self._state.writer is not None

    def __repr__(self) -> str:
        return f"PartitionLog({self.topic!r}, {self.partition})"

    @property
    def manifest_store(self) -> ManifestStore:
        return self._state.manifest_store

    def manifest(self, *, refresh: bool = True) -> Manifest:
        """The latest committed manifest of this partition (an empty one before the first commit)."""
        return self._state.manifest(refresh=refresh)

    def writer_owner(self) -> str | None:
        """The node that last claimed this partition for writing (from the latest manifest), or None."""
        m = self.manifest(refresh=True)
        return None if m.writer is None else m.writer.owner

    # -- appends -----------------------------------------------------------------------------------

    def append(self, records: Iterable[Record], *, ack: str | None = None,
               producer: ProducerBatch | None = None) -> AppendResult:
        """Append ``records`` as one atomic batch at consecutive offsets; return where they landed.

        ``ack`` overrides the store's ``ack`` setting for this call: ``"wal"`` returns once the records are in
        the fsynced local WAL, ``"s3"`` once they are in a committed WAL object. Appends from concurrent
        threads share WAL entries and fsyncs (group commit); see :meth:`append_async` to pipeline from one.

        Raises InvalidRecord (e.g. a null key on a compacted topic; nothing of the batch is appended),
        RecordTooLarge (a record or the batch over ``max.message.bytes``), Fenced, UnknownTopic;
        InvalidArgument when ``records`` is not an iterable (``append(None)``) or ``ack`` is neither
        ``"wal"`` nor ``"s3"``, InvalidConfig for ``"s3"`` on a store whose ``max_block_ms`` is not above its
        ``flush_interval_ms``, Closed after ``close()``; LocalWalFull/LocalWalUnavailable (the local WAL
        refused it); retriable: BufferFull (no room in ``buffer.bytes`` within ``max.block.ms``, nothing
        written) and, with ``ack="s3"``, StoreUnavailable (the object store is unreachable: see
        docs/operations.md).

        ``producer`` makes the append an idempotent producer's batch (KIP-98, rules in
        :mod:`s3stream.base.producer`): a retry of one of the producer's last five batches returns the
        original offsets and writes nothing; ProducerFenced for an older epoch, OutOfOrderSequence for a
        gap (nothing written either); InvalidArgument unless ``producer.record_count`` is the number of records.
        """
        started = self._rt.clock.monotonic()
        return self._wait(self._submit(self._prepare(records, producer), ack, started, inline=True), ack)

    def append_async(self, records: Iterable[Record], *, ack: str | None = None,
                     producer: ProducerBatch | None = None) -> Future[AppendResult]:
        """Queue ``records`` as one atomic batch; the future resolves with where they landed once acknowledged.

        Many appends may be in flight from one thread: they are written in call order (offsets increase with
        it) and concurrent appends to a partition share one Arrow batch, one WAL entry and one fsync. Errors
        found before anything is written raise here (InvalidRecord, RecordTooLarge, InvalidArgument,
        UnknownTopic, Closed, BufferFull after ``max.block.ms`` of backpressure, StoreUnavailable when
        ``ack="s3"`` appends are refused during an outage); later ones (Fenced, Closed, LocalWalFull, the
        ``ack="s3"`` StoreUnavailable timeout) come through the future, always S3StreamErrors. The future's
        callbacks run on an s3stream thread (the WAL's or the flush pipeline's): keep them short and
        non-blocking (``asyncio.wrap_future`` and ``loop.call_soon_threadsafe`` are).

        With ``producer`` (see :meth:`append`) the sequence check runs in order with the partition's other
        appends when offsets are assigned, so one producer's pipelined batches are checked in call order;
        its errors (ProducerFenced, OutOfOrderSequence) come through the future, and a duplicate's future
        resolves with the original offsets (once the original is acknowledged, if it still is in flight).
        """
        started = self._rt.clock.monotonic()
        return self._submit(self._prepare(records, producer), ack, started, inline=False)

    def append_arrow(self, batch: pa.RecordBatch | pa.Table, *, ack: str | None = None,
                     producer: ProducerBatch | None = None) -> AppendResult:
        """Append the rows of an Arrow batch as one atomic batch, with no per-record Python.

        Columns (by name, any order, nothing else): ``value`` (binary or string; null = tombstone),
        required; optional ``key`` (binary or string; missing = all null, refused on compacted topics),
        ``timestamp`` (int64 ms or a timestamp type; missing or null = the store clock's, as for
        ``Record.timestamp=None``) and ``headers`` (``records.HEADER_TYPE``: list of struct<key: string,
        value: binary>; missing = none). Offsets are assigned by the log. Raises as :meth:`append`
        (``producer`` as there).
        """
        return self._wait(self.append_arrow_async(batch, ack=ack, producer=producer), ack)

    def append_arrow_async(self, batch: pa.RecordBatch | pa.Table, *, ack: str | None = None,
                           producer: ProducerBatch | None = None,
                           on_wal: Callable[[AppendResult], None] | None = None) -> Future[AppendResult]:
        """:meth:`append_arrow` without waiting: as :meth:`append_async` (``producer`` as there).

        ``on_wal`` is called with the append's offsets once its records are fsynced in the local WAL, after
        :attr:`high_watermark` covers them, even for ``ack="s3"`` (before the future, which waits for the
        bucket): a server can serve tailing readers the records it was handed instead of reading them back.
        It runs on the WAL's fsync thread (keep it short, never blocking) and not at all when the append fails
        or its node was fenced first.
        """
        started = self._rt.clock.monotonic()
        self._rt.check_open()
        prepared = prepare_arrow(batch, self._state.config(), self._rt.clock.now_ms())
        if producer is not None:
            check_producer(prepared, producer)
        return self._submit(prepared, ack, started, inline=False, on_wal=on_wal)

    def _wait(self, future: Future[AppendResult], ack: str | None) -> AppendResult:
        if (node := self._rt.existing_node()) is not None:  # background=manual: run what it waits for
            node.settle_inline(future, ack_s3=(ack or self._rt.settings.ack) == "s3")
        return future.result()

    def _prepare(self, records: Iterable[Record], producer: ProducerBatch | None) -> PreparedAppend:
        self._rt.check_open()
        if type(records) is list:
            recs: Sequence[Record] = records
        else:
            try:
                recs = list(iter(records))
            except TypeError:
                raise InvalidArgument(f"append takes an iterable of Records (a list), not "
                                      f"{type(records).__name__}") from None
        if not recs:
            raise InvalidRecord("append needs at least one record")
        prepared = prepare_records(recs, self._state.config(), self._rt.clock.now_ms())
        if producer is not None:
            check_producer(prepared, producer)
        return prepared

    def _submit(self, prepared: PreparedAppend, ack: str | None, started: float, *, inline: bool,
                on_wal: Callable[[AppendResult], None] | None = None) -> Future[AppendResult]:
        if ack is None:
            ack = self._rt.settings.ack
        elif ack not in ("wal", "s3"):
            raise InvalidArgument(f"ack must be 'wal' or 's3' (or None: the store's setting), not {ack!r}")
        if ack == "s3" and (s := self._rt.settings).max_block_ms <= s.flush_interval_ms:
            raise InvalidConfig(f"ack='s3' needs max_block_ms ({s.max_block_ms}) above flush_interval_ms "
                                f"({s.flush_interval_ms}): the append would time out waiting for its WAL object",
                                key="max_block_ms")
        node = self._rt.node_runtime()
        if ack == "s3":
            node.uploader.check_available()  # a long outage: refuse before anything is written
        node.uploader.wait_for_room(prepared.nbytes)
        if self._state.writer is None:  # claim here, not in a drain round (the drainer serves every partition)
            with self._state.lock:
                self._state.ensure_writer(node)
        return self._appends.submit(node, prepared, ack_s3=ack == "s3", started=started, inline=inline,
                                    on_wal=on_wal)

    # -- reads -------------------------------------------------------------------------------------

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
        self._state.live_doc()  # a handle kept across delete_topic must not serve the deleted data
        if max_records is not None and max_records <= 0:
            return pa.Table.from_batches([], schema=RECORD_SCHEMA)
        return reads.read_records(self._state, offset, max_records=max_records, max_bytes=max_bytes)

    @property
    def log_start_offset(self) -> int:
        return self._state.log_start_offset()

    @property
    def log_end_offset(self) -> int:
        return self._state.log_end_offset()

    @property
    def high_watermark(self) -> int:
        """The end of the records a crash of this process cannot lose: everything below it is in the fsynced
        local WAL or in the bucket; ``read``/``read_arrow`` may also return the few records above it whose WAL
        entry is still being fsynced. Kafka consumers read up to here (the server's high watermark)."""
        return self._appends.high_watermark(self.log_end_offset)

    def watch(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` each time :attr:`high_watermark` may have advanced (on an s3stream thread: keep it
        short and non-blocking, e.g. ``loop.call_soon_threadsafe``); returns the call that stops it."""
        return self._appends.watch(callback)

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """The earliest offset whose record timestamp is >= ``timestamp``, or None.

        Raises InvalidArgument for a ``timestamp`` that is not an int in int64 range; Closed after ``close()``.
        """
        self._rt.check_open()
        timestamp = int_arg("timestamp", timestamp, minimum=INT64_MIN, maximum=INT64_MAX)
        return reads.offset_for_timestamp(self._state, timestamp)

    def extent(self) -> LogExtent:
        """Log start, high watermark, log end and sealed segments from one look at the log's state.

        In a process that does not write the partition each of those properties is a look of its own (a
        manifest request, and a probe of the writer's WAL objects for the log end); a Kafka fetch needs all
        of them for every partition it reads."""
        view = self._state.view()
        sealed = tuple(map(_sealed_info, view.segments))
        return LogExtent(view.log_start_offset, self._appends.high_watermark(view.log_end_offset),
                         view.log_end_offset, sealed)

    def segments(self) -> list[SegmentInfo]:
        """Sealed segments first (from the manifest), then rolled-but-unsealed ones, the active one last."""
        st = self._state
        view = st.view()
        out = list(map(_sealed_info, view.segments))
        with st.lock:
            w = st.writer
            unsealed = None if w is None else [*w.pending, w.active]
        if unsealed is None:  # another process writes it: rebuilt from its WAL objects
            unsealed = st.unsealed_segments(view)
        out.extend(SegmentInfo(u.base_offset, u.end_offset - 1, u.size_bytes, u.record_count, u.max_timestamp,
                               False, None) for u in unsealed)
        return out

    # -- durability and the log's extent -------------------------------------------------------------

    def flush(self) -> None:
        """Make everything appended so far durable in object storage (and seal what was rolled)."""
        node = self._rt.existing_node()
        if node is not None:
            node.drain_inline()  # background=manual: no drainer thread writes the queued appends
        self._appends.wait_idle()
        if node is not None:
            node.uploader.flush()
        self.seal_pending()

    def roll(self) -> None:
        """Seal the active segment now (a no-op when it is empty) and wait until it is committed."""
        node = self._rt.node_runtime()
        node.drain_inline()
        self._appends.wait_idle()  # the appends queued before the call go into the rolled segment
        st = self._state
        cfg = st.config()
        with st.lock:
            w = st.ensure_writer(node)
            if not w.active.empty:
                roll_seq = self._appends.write_roll_marker(node, w.leo)
                w.roll(st.new_segment(cfg, self._rt.clock.now_ms()), roll_seq=roll_seq)
        self.seal_pending()

    def publish_segments(self, staged: Sequence[StagedSegment], *,
                         marker: tuple[str, int] | None = None) -> AppendResult | None:
        """Append already-uploaded segment objects (written with offsets 0..n-1) at the log end, atomically.

        Used by bulk writers (Spark tasks stage the objects; the driver publishes them). Claims the
        partition as writer, seals what was appended before, then adds every staged segment in order in
        ONE manifest commit, with ``offset_delta`` = its assigned base. ``marker=(writer_id, batch_id)``
        makes replays no-ops: the commit records the batch id, and a batch id at or below the recorded one
        publishes nothing and returns None. Before anything is claimed: InvalidArgument unless every item is
        a StagedSegment whose key is one of this partition's segment keys and whose object exists (one HEAD
        each), CorruptData when an object's size is not the staged one.
        """
        return publish_segments(self._state, staged, marker, self.roll)

    def delete_records(self, before_offset: int) -> int:
        """Move the log start offset to ``before_offset`` (-1: the log end); return the new start.

        Never moves backwards; raises OffsetOutOfRange past the log end and PolicyViolation on a topic
        whose cleanup.policy lacks ``delete`` (rule RET-8). Segments wholly below the new start are deleted
        by the next retention pass; reads below it fail at once. InvalidArgument for a ``before_offset``
        that is not an int (``None``, a bool); Closed after ``close()``.
        """
        self._rt.check_open()
        before_offset = int_arg("before_offset", before_offset)
        st = self._state
        cfg = st.config(refresh=True)
        if not cfg.delete:
            raise PolicyViolation(f"DeleteRecords is not allowed on {self.topic!r}: cleanup.policy="
                                  f"{','.join(sorted(cfg.cleanup_policy)) or '(empty)'} lacks 'delete'")
        view = st.view()
        target = view.log_end_offset if before_offset == -1 else before_offset
        if target < 0 or target > view.log_end_offset:
            raise OffsetOutOfRange(
                f"cannot delete records before offset {before_offset}: the log end offset is {view.log_end_offset}",
                offset=before_offset, log_start_offset=view.log_start_offset, log_end_offset=view.log_end_offset)
        m = st.manifest_store.commit(advance_log_start(target))
        st.adopt(m)
        return m.log_start_offset

    # -- the engine's and the node's side (HostedLog, NodeLog) -----------------------------------------

    def on_flushed(self, ref: ChunkRef, last_offset: int) -> None:
        """A WAL object holding our records up to ``last_offset`` committed."""
        with self._state.lock:
            if self._state.writer is not None:
                self._state.writer.flushed(ref, last_offset)

    def oldest_pending_roll_seq(self) -> int | None:
        """The local WAL seq of the oldest roll entry whose segment is not sealed yet (None: none)."""
        with self._state.lock:
            return None if self._state.writer is None else self._state.writer.oldest_roll_seq()

    def published_end(self) -> int | None:
        """The end of this node's records in committed WAL objects (None when not the writer here)."""
        with self._state.lock:
            return None if self._state.writer is None else self._state.writer.unflushed_from

    def evict_memory(self, want_bytes: int) -> int:
        """Drop flushed batches from the tail cache (oldest first); return the bytes freed."""
        with self._state.lock:
            return 0 if self._state.writer is None else self._state.writer.evict(want_bytes)

    def recovery_end(self) -> int:
        """Claim this partition for the recovering node (once) and return where its log ends in the bucket."""
        return recovery.recovery_end(self._state, self._rt.node_runtime())

    def recover_entry(self, entry: AppendEntry | RollEntry, local_seq: int) -> bool:
        """Replay one local WAL entry after a restart (in local WAL order); False when the bucket holds it."""
        return recovery.recover_entry(self._state, self._rt.node_runtime(), entry, local_seq)

    def detach(self) -> None:
        """Forget writer state (the node closed or was fenced)."""
        with self._state.lock:
            self._state.writer = None

    def has_pending_seals(self) -> bool:
        return self._sealing.has_pending()

    def seal_pending(self) -> None:
        """Seal every rolled segment, oldest first (rule: manifest segments stay contiguous)."""
        self._sealing.seal_pending()


def _sealed_info(s: SegmentRef) -> SegmentInfo:
    return SegmentInfo(s.base_offset, s.last_offset, s.size_bytes, s.record_count, s.max_timestamp, True, s.key)
