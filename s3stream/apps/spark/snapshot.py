"""Read-only views of a store for Spark planning: topics, and partition snapshots from manifests.

A :class:`LogReader` opens nothing but the ObjectStore of the URL: no Store, no local WAL, no node, so
planning a read can never claim a partition, replay a WAL directory or write a fence object. It loads
topic documents (the catalog), the latest manifest of a partition, and the writer's WAL objects after the
manifest's cursor (:mod:`s3stream.read.walscan`), and freezes them into a :class:`PartitionSnapshot`: a
:class:`~s3stream.read.tiers.LogView` plus the manifest version it came from.

Invariant: a snapshot is internally consistent (segments and chunks come from one manifest version and a
scan after it); it may be stale a moment later, and readers cope with objects that vanished since
(retention, compaction, GC) by re-planning from a fresh snapshot.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from s3stream.apps.spark.schema import TIMESTAMP_TYPES
from s3stream.apps.spark.segio import SegmentSource, chunk_table, segment_tables
from s3stream.base.clock import Clock, SystemClock
from s3stream.base.errors import ObjectNotFound
from s3stream.base.ids import IdSource
from s3stream.base.topic_config import TopicConfig
from s3stream.manifest.catalog import TopicCatalog
from s3stream.manifest.model import Manifest, SegmentRef
from s3stream.manifest.versioned import ManifestStore, manifest_store
from s3stream.objectstore.protocol import ObjectStore
from s3stream.objectstore.url import open_object_store
from s3stream.read.tiers import LogView
from s3stream.read.walscan import ChunkRef, WalIndexCache, contiguous_chunks

__all__ = ["LogReader", "PartitionSnapshot", "TopicInfo", "segment_source"]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A live topic: identity, partition count, config, and its ``timestampType`` column value."""

    name: str
    topic_id: str
    partitions: int
    config: TopicConfig

    @property
    def timestamp_type(self) -> int:
        return TIMESTAMP_TYPES[self.config.message_timestamp_type]


@dataclass(frozen=True, slots=True)
class PartitionSnapshot:
    """One partition at one manifest version: where each offset lives."""

    topic: TopicInfo
    partition: int
    manifest: Manifest
    view: LogView

    @property
    def log_start_offset(self) -> int:
        return self.view.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.view.log_end_offset

    @property
    def manifest_seq(self) -> int:
        return self.manifest.seq


def segment_source(ref: SegmentRef) -> SegmentSource:
    """The picklable read description of a manifest segment entry."""
    return SegmentSource(ref.key, ref.object_size, ref.base_offset, ref.last_offset, ref.offset_delta,
                         ref.max_timestamp, ref.record_count, ref.size_bytes)


class LogReader:
    """Topics and partition snapshots of the store behind one ObjectStore (thread-safe, read-only)."""

    def __init__(self, store: ObjectStore, *, clock: Clock | None = None, ids: IdSource | None = None,
                 owns_store: bool = False) -> None:
        self._store = store
        self._clock = clock or SystemClock()
        self._ids = ids or IdSource()
        self._owns = owns_store
        self._catalog = TopicCatalog(store, clock=self._clock, ids=self._ids, refresh_s=0.0)
        self._walindex = WalIndexCache(store)
        self._lock = threading.Lock()
        self._manifests: dict[tuple[str, int], ManifestStore] = {}

    @classmethod
    def open(cls, url: str, *, clock: Clock | None = None) -> LogReader:
        """A reader of the store at ``url`` (it opens, and later closes, its own ObjectStore)."""
        clock = clock or SystemClock()
        return cls(open_object_store(url, clock=clock), clock=clock, owns_store=True)

    @property
    def object_store(self) -> ObjectStore:
        return self._store

    def close(self) -> None:
        if self._owns:
            self._store.close()

    def __enter__(self) -> LogReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- topics --------------------------------------------------------------------------------------

    def topic(self, name: str) -> TopicInfo:
        """The live topic ``name`` (UnknownTopic if it does not exist)."""
        doc = self._catalog.get(name, refresh=True)
        return TopicInfo(doc.name, doc.topic_id, doc.partitions, TopicConfig.from_overrides(doc.config))

    def topic_names(self) -> list[str]:
        return self._catalog.names()

    # -- partitions ----------------------------------------------------------------------------------

    def manifest_store(self, topic: TopicInfo, partition: int) -> ManifestStore:
        with self._lock:
            key = (topic.topic_id, partition)
            vs = self._manifests.get(key)
            if vs is None:
                vs = manifest_store(self._store, topic=topic.name, topic_id=topic.topic_id, partition=partition,
                                    clock=self._clock, ids=self._ids)
                self._manifests[key] = vs
            return vs

    def snapshot(self, topic: TopicInfo, partition: int) -> PartitionSnapshot:
        """The partition now: its latest manifest plus the unsealed chunks after the manifest's cursor."""
        m = self.manifest_store(topic, partition).load_latest_or_empty()
        log_id = f"{topic.name}/{topic.topic_id}/{partition}"
        chunks: list[ChunkRef] = []
        if m.wal is not None:
            chunks, _ = contiguous_chunks(self._walindex.scan(m.wal), log_id, m.next_offset,
                                                from_seq=m.wal.from_seq)
        leo = chunks[-1].chunk.last_offset + 1 if chunks else m.next_offset
        view = LogView(m.log_start_offset, max(leo, m.log_start_offset), m.next_offset, m.segments, tuple(chunks))
        return PartitionSnapshot(topic, partition, m, view)

    def offset_for_timestamp(self, snap: PartitionSnapshot, timestamp: int) -> int | None:
        """The earliest offset at or after the log start whose timestamp is ``>= timestamp``, or None.

        Timestamps need not be monotonic, so the first segment whose max timestamp qualifies is searched
        (row groups by their index), then the unsealed chunks. Raises ObjectNotFound when an object
        vanished since the snapshot (the caller takes a new one).
        """
        view = snap.view
        start = view.log_start_offset
        for ref in view.segments:
            if ref.last_offset < start or ref.max_timestamp < timestamp:
                continue
            for table in segment_tables(self._store, segment_source(ref), max(start, ref.base_offset),
                                        ref.end_offset, min_ts=timestamp, columns=["offset", "timestamp"]):
                found = _first_at_or_after(table, timestamp)
                if found is not None:
                    return found
        for cref in view.chunks:
            if cref.chunk.max_timestamp < timestamp or cref.chunk.record_count == 0:
                continue
            found = _first_at_or_after(chunk_table(self._store, cref.key, cref.chunk, max(start, view.next_offset),
                                                   view.log_end_offset), timestamp)
            if found is not None:
                return found
        return None

    def fresh_snapshot(self, topic: TopicInfo, partition: int, attempts: int = 3) -> PartitionSnapshot:
        """A snapshot whose WAL objects still exist (retries a scan that raced with GC)."""
        for attempt in range(attempts):
            try:
                return self.snapshot(topic, partition)
            except ObjectNotFound:
                if attempt == attempts - 1:
                    raise
        raise AssertionError("unreachable")


def _first_at_or_after(table: pa.Table, timestamp: int) -> int | None:
    if table.num_rows == 0:
        return None
    idx = pc.index(pc.greater_equal(table.column("timestamp"), timestamp), True).as_py()
    if idx is None or idx < 0:
        return None
    return int(table.column("offset")[idx].as_py())
