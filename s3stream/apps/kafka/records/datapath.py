"""The state Produce and Fetch share (one broker component): the fetch caches and the append signals.

* ``appended`` (event loop, after an append is acknowledged): keep the producer's batch for tailing
  consumers (:mod:`.tail_cache`), wake the fetches waiting on the partition (:mod:`.signals`);
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
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from kio.schema.errors import ErrorCode

from s3stream.apps.kafka.records.batch import BatchHeader, patch_offset
from s3stream.apps.kafka.records.cold_cache import ColdCache
from s3stream.apps.kafka.records.encode import encode_batches
from s3stream.apps.kafka.records.signals import AppendSignals
from s3stream.apps.kafka.records.tail_cache import TailCache
from s3stream.base.records import AppendResult, SegmentInfo
from s3stream.base.topic_config import TopicConfig

if TYPE_CHECKING:
    from s3stream.apps.kafka.broker import Broker
    from s3stream.partition.log import PartitionLog

__all__ = ["COLD_BATCH_BYTES", "DataPath", "PartitionRead", "topic_config"]

#: cold reads are encoded into batches of about this size (a small fetch budget is not sent a big batch)
COLD_BATCH_BYTES = 256 * 1024
Batch = bytes | bytearray


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
        self._watch_lock = threading.Lock()

    def background(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run ``work`` (an acks=0 produce's wait for its appends) with no one awaiting it."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        with self._watch_lock:
            stops, self._watched = list(self._watched.values()), {}
        for stop in stops:
            stop()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- produce (event loop) ------------------------------------------------------------------------

    def appended(self, plog: PartitionLog, header: BatchHeader, data: Batch, result: AppendResult, *,
                 cacheable: bool) -> None:
        """An append was acknowledged: keep its batch for tailing fetches and wake the ones waiting."""
        self.broker.metrics.produce_records.inc(header.record_count)
        if cacheable and result.last_offset - result.base_offset + 1 == header.record_count:
            self.tail.put((plog.topic_id, plog.partition), result.base_offset, result.last_offset + 1,
                          patch_offset(data, result.base_offset))
        self.signals.notify(plog.topic, plog.partition)

    # -- fetch (pool thread) -------------------------------------------------------------------------

    def read(self, plog: PartitionLog, offset: int, budget: int, *, first: bool, log_append_time: bool
             ) -> PartitionRead:
        """The batches from ``offset`` on, within ``budget`` bytes; with ``first``, at least one batch.

        OFFSET_OUT_OF_RANGE outside ``[log start, log end]``; nothing at or past the high watermark. Blocking.
        """
        self._watch(plog)
        start, end, hw = plog.log_start_offset, plog.log_end_offset, plog.high_watermark
        out = PartitionRead(high_watermark=hw, log_start_offset=start)
        if offset < start or offset > end:
            out.error = ErrorCode.offset_out_of_range
            return out
        if offset >= hw or (budget <= 0 and not first):
            return out
        key = (plog.topic_id, plog.partition)
        # sealed records may be compacted (new segment objects): they are served by segment key, never from
        # the tail cache, which keeps what producers sent before any cleaning
        segment = _sealed_segment(plog.segments(), offset)
        if not plog.is_writer:
            self.tail.drop(key)  # another node wrote it meanwhile: what this one kept may not be the log
        elif segment is None and (hit := self.tail.get(key, offset, budget, end=hw)) is not None:
            out.batches = _fit(hit[0], budget, first)
            self._sources["tail"].inc(len(out.batches))
            return out
        if segment is not None and (cached := self.cold.get(segment.key or "", offset, budget)) is not None:
            out.batches = _fit(list(cached[0]), budget, first)
            self._sources["cold-cache"].inc(len(out.batches))
            return out
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
        encoded = encode_batches(table, log_append_time=log_append_time, max_batch_bytes=COLD_BATCH_BYTES,
                                 last_offset=range_end - 1 if range_end > 0 else None)
        if segment is not None and segment.key and encoded.batches and range_end > offset:
            self.cold.put(segment.key, offset, range_end, encoded.batches, encoded.bases)
        elif segment is None and plog.is_writer and encoded.batches:
            # unsealed records never change: keep them with the producers' batches (an acks=all batch
            # arrives there only with its acknowledgement, after the fsync that woke its consumers)
            ends = [*encoded.bases[1:], int(table.column("offset")[-1].as_py()) + 1]
            for data, base, end_offset in zip(encoded.batches, encoded.bases, ends, strict=True):
                self.tail.put(key, base, end_offset, data)
        out.batches = _fit(list(encoded.batches), budget, first)
        self._sources["cold"].inc(len(out.batches))
        return out


    def _watch(self, plog: PartitionLog) -> None:
        """Wake this partition's long polls whenever its high watermark may have moved (once per partition)."""
        key = (plog.topic_id, plog.partition)
        if key in self._watched:
            return
        signals, topic, partition = self.signals, plog.topic, plog.partition

        def moved() -> None:  # on an s3stream thread, after each fsync: only a loop call when someone waits
            loop = signals.loop
            if loop is not None and (topic, partition) in signals.waiters:
                loop.call_soon_threadsafe(signals.notify, topic, partition)

        with self._watch_lock:
            if key not in self._watched:
                self._watched[key] = plog.watch(moved)


def _sealed_segment(segments: list[SegmentInfo], offset: int) -> SegmentInfo | None:
    for seg in segments:
        if seg.sealed and seg.key and seg.base_offset <= offset <= seg.last_offset:
            return seg
    return None


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
