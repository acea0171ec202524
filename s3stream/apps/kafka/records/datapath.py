"""The state Produce and Fetch share (one broker component): the fetch caches and the append signals.

* ``in_wal`` (the store's fsync thread, once a produced batch is in the local WAL): keep the producer's
  batch for tailing consumers (:mod:`.tail_cache`); ``appended`` (event loop, after an append is
  acknowledged): wake the fetches waiting on the partition (:mod:`.signals`);
* ``read`` (a pool thread): one partition's part of a fetch, from the tail cache, the cold cache, or the
  store (``read_arrow`` encoded into v2 batches: kept in the cold cache when they came from a sealed
  segment, in the tail cache when from unsealed records, which never change either).

Consumers see records below the partition's high watermark (``PartitionLog.high_watermark``: what a crash
of this process cannot lose), not the log end; each partition a fetch has read is watched
(``PartitionLog.watch``), so a long poll also wakes when the watermark moves (an fsync), before an acks=all
append's acknowledgement from the bucket and for appends that did not come through Produce.

``BrokerConfig.fetch_cache_bytes`` bounds both caches together (half each).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from kio.schema.errors import ErrorCode

from s3stream.apps.kafka.records.batch import Batch, BatchHeader, rebased
from s3stream.apps.kafka.records.cold_cache import ColdCache
from s3stream.apps.kafka.records.encode import encode_spliced
from s3stream.apps.kafka.records.signals import AppendSignals
from s3stream.apps.kafka.records.tail_cache import TailCache
from s3stream.base.records import AppendResult, SegmentInfo
from s3stream.base.topic_config import TopicConfig

if TYPE_CHECKING:
    from s3stream.apps.kafka.broker import Broker
    from s3stream.partition.log import PartitionLog

__all__ = ["COLD_BATCH_BYTES", "DataPath", "PartitionRead", "topic_config"]

log = logging.getLogger(__name__)

#: cold reads are encoded into batches of about this size (a small fetch budget is not sent a big batch)
COLD_BATCH_BYTES = 256 * 1024
#: a read-ahead reads and encodes at least this much at once (fewer, larger reads: less per-call cost)
AHEAD_BYTES = 4 << 20
#: ranges a read-ahead keeps ready past a consumer's next fetch (slack for when encoding runs behind)
AHEAD_RANGES = 3
#: how long a fetch waits for the read-ahead of its partition before reading itself
_AHEAD_WAIT_S = 5.0


@dataclass(slots=True)
class PartitionRead:
    """One partition's answer to a fetch."""

    error: ErrorCode = ErrorCode.none
    high_watermark: int = -1
    log_start_offset: int = -1
    batches: list[Batch] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        return sum(len(b) for b in self.batches)


def topic_config(broker: Broker, topic: str) -> TopicConfig:
    """The topic's config as appends see it (cached by the catalog; blocking when it re-reads)."""
    return broker.store.runtime.catalog.config(topic)


class DataPath:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        total = broker.config.fetch_cache_bytes
        self.tail = TailCache(total // 2)
        self.cold = ColdCache(total - total // 2)
        self.signals = AppendSignals()
        self._sources = {name: broker.metrics.fetch_cache.labels(name) for name in ("tail", "cold", "cold-cache")}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._watched: dict[tuple[str, int], Callable[[], None]] = {}
        self._moves: dict[tuple[str, int], int] = {}  # fsyncs seen per watched partition (see moves())
        self._watch_lock = threading.Lock()
        self._ahead: dict[tuple[str, int], Future[None]] = {}
        self._ahead_lock = threading.Lock()
        self._ahead_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafka-readahead")
        self._closed = False

    def background(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run ``work`` (an acks=0 produce's wait for its appends) with no one awaiting it."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        with self._ahead_lock:
            self._closed = True
        self._ahead_pool.shutdown(wait=False, cancel_futures=True)
        with self._watch_lock:
            stops, self._watched = list(self._watched.values()), {}
        for stop in stops:
            stop()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- produce (event loop) ------------------------------------------------------------------------

    def in_wal(self, plog: PartitionLog, header: BatchHeader, data: bytes, result: AppendResult) -> None:
        """A produced batch is fsynced (the store's ``on_wal`` hook, on its fsync thread): keep it for tailing
        fetches, which may serve it from now on (it is below the high watermark), long before an acks=all
        acknowledgement from the bucket."""
        if result.last_offset - result.base_offset + 1 == header.record_count:
            self.tail.put((plog.topic_id, plog.partition), result.base_offset, result.last_offset + 1,
                          rebased(data, result.base_offset))

    def appended(self, plog: PartitionLog, header: BatchHeader) -> None:
        """An append was acknowledged: count it and wake the fetches waiting on the partition."""
        self.broker.metrics.produce_records.inc(header.record_count)
        self.signals.notify(plog.topic, plog.partition)

    # -- fetch (pool thread) -------------------------------------------------------------------------

    def read(self, plog: PartitionLog, offset: int, budget: int, *, first: bool, log_append_time: bool
             ) -> PartitionRead:
        """The batches from ``offset`` on, within ``budget`` bytes; with ``first``, at least one batch.

        OFFSET_OUT_OF_RANGE outside ``[log start, log end]``; nothing at or past the high watermark. Blocking.
        """
        self._watch(plog)
        extent = plog.extent()  # one look at the log's state (a request or two where another node writes it)
        start, hw = extent.log_start_offset, extent.high_watermark
        out = PartitionRead(high_watermark=hw, log_start_offset=start)
        if offset < start or (offset > hw and offset > extent.log_end_offset):
            out.error = ErrorCode.offset_out_of_range
            return out
        if offset >= hw or (budget <= 0 and not first):
            return out
        key = (plog.topic_id, plog.partition)
        # sealed records may be compacted (new segment objects): they are served by segment key, never from
        # the tail cache, which keeps what producers sent before any cleaning
        segment = extent.sealed_at(offset)
        if not plog.is_writer:
            self.tail.drop(key)  # another node wrote it meanwhile: what this one kept may not be the log
        elif segment is None and (hit := self.tail.get(key, offset, budget, end=hw)) is not None:
            out.batches = _fit(hit[0], budget, first)
            self._sources["tail"].inc(len(out.batches))
            return out
        if segment is not None:
            cached = self.cold.get(segment.key or "", offset, budget)
            if cached is None and self._wait_ahead(key):  # this consumer's next batches were being encoded
                cached = self.cold.get(segment.key or "", offset, budget)
            if cached is not None:
                out.batches = _fit(list(cached[0]), budget, first)
                self._sources["cold-cache"].inc(len(out.batches))
                self._read_ahead(plog, segment, cached[1], budget, log_append_time)
                return out
        batches, range_end = self._encode(plog, segment, offset, budget, hw, log_append_time)
        if segment is not None and range_end > offset:
            self._read_ahead(plog, segment, range_end, budget, log_append_time)
        out.batches = _fit(batches, budget, first)
        self._sources["cold"].inc(len(out.batches))
        return out

    def _encode(self, plog: PartitionLog, segment: SegmentInfo | None, offset: int, budget: int, hw: int,
                log_append_time: bool) -> tuple[list[Batch], int]:
        """Read and encode from ``offset`` within ``budget``, and keep what was encoded; (batches, the end
        of the range kept for a sealed segment, else -1)."""
        key = (plog.topic_id, plog.partition)
        table = plog.read_arrow(offset, max_bytes=max(budget, 1))
        if table.num_rows and table.column("offset")[-1].as_py() >= hw:  # the few records still being fsynced
            table = table.slice(0, int(np.searchsorted(table.column("offset").to_numpy(), hw)))
        range_end = -1
        if segment is not None and table.num_rows:
            offsets = table.column("offset").to_numpy()
            inside = int(np.searchsorted(offsets, segment.last_offset, side="right"))
            if inside == table.num_rows:
                range_end = int(offsets[-1]) + 1
            elif inside:  # the read went past the segment: cache only the segment's part, up to its end
                table = table.slice(0, inside)
                range_end = segment.last_offset + 1
            # else: the segment has nothing at or after ``offset`` (compacted away): serve the next one, uncached
        batches, bases = encode_spliced(table, log_append_time=log_append_time, max_batch_bytes=COLD_BATCH_BYTES,
                                        last_offset=range_end - 1 if range_end > 0 else None)
        if segment is not None and segment.key and batches and range_end > offset:
            self.cold.put(segment.key, offset, range_end, batches, bases)
        elif segment is None and plog.is_writer and batches:
            # unsealed records never change: keep them with the producers' batches (a produced batch
            # arrives there just after the fsync that may have woken this fetch)
            ends = [*bases[1:], int(table.column("offset")[-1].as_py()) + 1]
            for data, base, end_offset in zip(batches, bases, ends, strict=True):
                self.tail.put(key, base, end_offset, data)
        return list(batches), range_end

    # -- read-ahead of sealed segments (pool thread, then the read-ahead thread) ---------------------------

    def _read_ahead(self, plog: PartitionLog, segment: SegmentInfo, offset: int, budget: int,
                    log_append_time: bool) -> None:
        """Encode the records of ``segment`` a catching-up consumer asks for next (from ``offset``, or after
        the kept ranges after it; at most ``AHEAD_RANGES`` ranges ahead of it), on the read-ahead thread, while that
        consumer takes in this answer."""
        key = (plog.topic_id, plog.partition)
        with self._ahead_lock:
            if key in self._ahead or self._closed or offset > segment.last_offset:
                return
            self._ahead[key] = self._ahead_pool.submit(self._ahead_job, plog, segment, offset, budget,
                                                       log_append_time)

    def _ahead_job(self, plog: PartitionLog, segment: SegmentInfo, offset: int, budget: int,
                   log_append_time: bool) -> None:
        try:
            for _ in range(AHEAD_RANGES):  # skip the ranges kept already, up to far enough ahead
                if (end := self.cold.covered_end(segment.key or "", offset)) is None:
                    break
                offset = end
            else:
                return
            extent = plog.extent()
            if offset > segment.last_offset or offset >= extent.high_watermark or offset < extent.log_start_offset:
                return
            if extent.sealed_at(offset) != segment:  # compacted or deleted meanwhile
                return
            self._encode(plog, segment, offset, max(budget, AHEAD_BYTES), extent.high_watermark, log_append_time)
        except Exception:  # a read-ahead that fails costs the consumer its own read, nothing else
            log.debug("read-ahead of %s at %d failed", plog, offset, exc_info=True)
        finally:
            with self._ahead_lock:
                self._ahead.pop((plog.topic_id, plog.partition), None)

    def _wait_ahead(self, key: tuple[str, int]) -> bool:
        """Wait for the partition's read-ahead; whether there was one."""
        with self._ahead_lock:
            pending = self._ahead.get(key)
        if pending is None:
            return False
        with contextlib.suppress(Exception):
            pending.result(timeout=_AHEAD_WAIT_S)
        return True


    def moves(self, plog: PartitionLog) -> int | None:
        """How often the partition's high watermark may have moved since it was first read here (a count
        to compare, not an offset); None when that is not known (never read, or another process writes it:
        its records arrive without an fsync here). A long poll re-reads only partitions whose count changed."""
        key = (plog.topic_id, plog.partition)
        if key not in self._watched or not plog.is_writer:
            return None
        return self._moves.get(key, 0)

    def _watch(self, plog: PartitionLog) -> None:
        """Wake this partition's long polls whenever its high watermark may have moved (once per partition)."""
        key = (plog.topic_id, plog.partition)
        if key in self._watched:
            return
        signals, topic, partition, moves = self.signals, plog.topic, plog.partition, self._moves

        def moved() -> None:  # on an s3stream thread, after each fsync: only a loop call when someone waits
            moves[key] = moves.get(key, 0) + 1
            loop = signals.loop
            if loop is not None and (topic, partition) in signals.waiters:
                loop.call_soon_threadsafe(signals.notify, topic, partition)

        with self._watch_lock:
            if key not in self._watched:
                self._watched[key] = plog.watch(moved)


def _fit(batches: list[Batch], budget: int, first: bool) -> list[Batch]:
    """The leading batches within ``budget``; the first one even if larger when ``first``."""
    out: list[Batch] = []
    total = 0
    for b in batches:
        if total + len(b) > budget and (out or not first):
            break
        out.append(b)
        total += len(b)
    return out
