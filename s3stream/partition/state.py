"""One partition's state in this process: its cached manifest, its writer state when this node writes it, and
the views reads take of both. Shared by the parts of a partition (appends, seals, publish, recovery, reads);
:class:`~s3stream.partition.log.PartitionLog` is its public face.

The manifest and the writer's unsealed tail are taken under one lock (``lock``): a seal commits one and trims
the other, so offsets sealed since the manifest would otherwise be in neither. A writer re-reads its manifest
at least every second for reads of the tail (another process's retention, DeleteRecords or compaction can
change it); a reader re-reads it for every view.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from s3stream.base.errors import UnknownTopic
from s3stream.base.topic_config import TopicConfig
from s3stream.manifest.model import Manifest
from s3stream.manifest.versioned import ManifestStore, cache_ttl_for, manifest_store
from s3stream.partition.claim import claim_partition
from s3stream.partition.host import HostedLog, LogHost
from s3stream.partition.writer import Unsealed, WriterState, rebuild_producers, split_unsealed
from s3stream.read.tiers import LogView
from s3stream.read.walscan import ChunkRef, contiguous_chunks
from s3stream.write.node_runtime import NodeLog

if TYPE_CHECKING:
    from s3stream.manifest.topicdoc import TopicDoc
    from s3stream.write.node_runtime import NodeRuntime

__all__ = ["LogState", "OwnerLog"]

_WRITER_MANIFEST_MAX_AGE_S = 1.0


class OwnerLog(NodeLog, HostedLog, Protocol):
    """The partition as its node and the engine see it (registered with the node, sealed by the engine)."""


class LogState:
    """See the module docstring; every member is for the partition's own modules, none for its users."""

    def __init__(self, host: LogHost, doc: TopicDoc, partition: int, owner: OwnerLog) -> None:
        self.host = host
        self.owner = owner
        self.topic = doc.name
        self.topic_id = doc.topic_id
        self.partition = partition
        self.log_id = f"{doc.name}/{doc.topic_id}/{partition}"
        self.manifest_store: ManifestStore = manifest_store(
            host.objstore, topic=doc.name, topic_id=doc.topic_id, partition=partition, clock=host.clock,
            ids=host.ids, crash_points=host.crash,
            cache_ttl_s=cache_ttl_for(host.settings.manifest_min_age_ms))
        self.lock = threading.RLock()
        self.writer: WriterState | None = None
        self._manifest: Manifest | None = None
        self._manifest_at = 0.0
        self._config_of: tuple[TopicDoc, TopicConfig] | None = None

    # -- the topic ---------------------------------------------------------------------------------

    def live_doc(self, *, refresh: bool = False) -> TopicDoc:
        """The topic document, if this log's topic still exists (UnknownTopic once deleted or re-created)."""
        doc = self.host.catalog.get(self.topic, refresh=refresh)
        if doc.topic_id != self.topic_id:
            raise UnknownTopic(f"topic {self.topic!r} was deleted (and re-created)")
        return doc

    def config(self, *, refresh: bool = False) -> TopicConfig:
        """The topic's config (parsed once per document version: appends ask for it every time)."""
        doc = self.live_doc(refresh=refresh)
        cached = self._config_of
        if cached is not None and cached[0] is doc:
            return cached[1]
        cfg = TopicConfig.from_overrides(doc.config)
        self._config_of = (doc, cfg)
        return cfg

    def last_config(self) -> TopicConfig:
        """The config an append of this process last saw (no catalog call: drain rounds must not do I/O)."""
        cached = self._config_of
        return cached[1] if cached is not None else self.config()

    def new_segment(self, cfg: TopicConfig, now_ms: int) -> Unsealed:
        """An empty active segment at the log end, with its ROLL-1(b) jitter drawn."""
        assert self.writer is not None, f"internal: {self.log_id} has no writer state"
        jitter = self.host.ids.randrange(min(cfg.segment_jitter_ms, cfg.segment_ms)) if cfg.segment_jitter_ms else 0
        return Unsealed(self.writer.leo, self.writer.leo, created_ms=now_ms, jitter_ms=jitter)

    # -- the manifest ------------------------------------------------------------------------------

    def manifest(self, *, refresh: bool = True) -> Manifest:
        """The latest committed manifest (an empty one before the first commit); cached without ``refresh``."""
        with self.lock:
            cached = self._manifest
        if refresh or cached is None:
            loaded = self.manifest_store.load_latest() or Manifest.empty(self.topic, self.topic_id, self.partition)
            with self.lock:
                if self._manifest is None or loaded.seq >= self._manifest.seq:
                    self._manifest = loaded
                self._manifest_at = self.host.clock.monotonic()
        with self.lock:
            assert self._manifest is not None
            return self._manifest

    def adopt(self, m: Manifest) -> None:
        """A manifest this process committed: cache it unless a newer one is cached already."""
        with self.lock:
            if self._manifest is None or m.seq >= self._manifest.seq:
                self._manifest = m

    # -- views -------------------------------------------------------------------------------------

    def view(self, for_offset: int | None = None) -> LogView:
        """Where each offset lives now; ``for_offset`` is where the read starts (if it is one)."""
        if self.writer is not None:
            self._refresh_for_writer(for_offset)
            return self.view_of(None, for_offset=for_offset)
        return self.view_of(self.manifest(refresh=True), for_offset=for_offset)

    def _refresh_for_writer(self, for_offset: int | None) -> None:
        # the writer serves the unsealed tail from memory; the manifest can change under it only by
        # another process's retention, DeleteRecords or compaction: re-read it for reads of the
        # sealed tier (so they fail at once below a moved log start) and at most a second stale otherwise
        cached = self._manifest
        age = self.host.clock.monotonic() - self._manifest_at
        if cached is None or age > _WRITER_MANIFEST_MAX_AGE_S or (
                for_offset is not None and for_offset < cached.next_offset):
            self.manifest(refresh=True)

    def log_start_offset(self) -> int:
        """``view().log_start_offset``, in the writing process without building the view (a Kafka server
        asks on every produce and fetch)."""
        if self.writer is not None:
            self._refresh_for_writer(None)
            # no lock: a cached manifest is immutable and replacing it is one attribute store, while the
            # lock is held by the appender for a whole round (a produce would wait for other batches' rounds)
            cached = self._manifest
            if cached is not None and self.writer is not None:
                return cached.log_start_offset
        return self.view().log_start_offset

    def log_end_offset(self) -> int:
        """``view().log_end_offset``, in the writing process without building the view or any request (the
        writer's log end is its own; only the log start can move under it)."""
        if self.writer is not None:
            with self.lock:
                if (w := self.writer) is not None:
                    return w.leo
        return self.view().log_end_offset

    def view_of(self, m: Manifest | None, *, for_offset: int | None) -> LogView:
        """The view of manifest ``m`` (None: the cached one), with the writer's unsealed tail in the writing
        process (manifest and tail from one instant, see the module docstring)."""
        with self.lock:
            if m is None:
                m = self.manifest(refresh=False)
            w = self.writer
            if w is not None:
                return LogView(m.log_start_offset, w.leo, m.next_offset, m.segments, w.unsealed_chunks(m.next_offset),
                               tuple(w.memory))
        chunks: list[ChunkRef] = []
        # a read that starts in the sealed tier needs no scan of the writer's WAL namespace (a request per
        # call for a sequential consumer): its view ends at the sealed end, and the read that crosses it
        # asks again
        if m.wal is not None and (for_offset is None or for_offset >= m.next_offset):
            chunks, _ = contiguous_chunks(self.host.walindex.scan(m.wal), self.log_id, m.next_offset,
                                          from_seq=m.wal.from_seq)
        leo = chunks[-1].chunk.last_offset + 1 if chunks else m.next_offset
        return LogView(m.log_start_offset, leo, m.next_offset, m.segments, tuple(chunks))

    def optimistic_view(self, offset: int) -> tuple[LogView, Callable[[], bool]] | None:
        """For a read of the sealed tier of the cached manifest: a view of that manifest, and a check (to
        call after reading) that it was still the latest while the read ran, or None for other reads.

        A read must see the latest manifest (a log start another process moved makes it fail at once), and
        asking for it is a request per read. Sealed data never changes under a manifest that is still the
        latest, so the request runs alongside the read instead of before it; the rare read whose manifest
        moved meanwhile is done again (linearized at the probe either way).
        """
        with self.lock:
            cached = self._manifest
            if cached is None or not cached.log_start_offset <= offset < cached.next_offset:
                return None
            view = self.view_of(cached, for_offset=offset)  # no I/O: the read starts in the sealed tier
        try:
            probe = self.host.manifest_probes.submit(self.manifest, refresh=True)
        except RuntimeError:  # the store is closing: read the plain way (which reports it)
            return None
        return view, lambda: probe.result().seq == cached.seq

    def unsealed_segments(self, view: LogView) -> list[Unsealed]:
        """Rolled and active segments of a partition another process writes, rebuilt from its WAL objects
        (exact sizes: a chunk straddling the sealed end or a roll offset is loaded and split)."""
        rolls: tuple[int, ...] = ()
        m = self.manifest(refresh=False)
        if m.wal is not None and view.chunks:
            _, rolls = contiguous_chunks(self.host.walindex.scan(m.wal), self.log_id, view.next_offset,
                                         from_seq=m.wal.from_seq)
        return split_unsealed(view.chunks, rolls, view.next_offset, 0, 0,
                              lambda ref: self.host.chunks.get(ref, self.log_id))

    # -- the writer --------------------------------------------------------------------------------

    def ensure_writer(self, node: NodeRuntime) -> WriterState:
        """Claim this partition for ``node`` (once; caller holds ``lock``); adopt another node's unsealed data."""
        w = self.writer
        if w is not None:
            assert w.node is node, f"internal: {self.log_id} is written by node {w.node.node_id}, not {node.node_id}"
            return w
        claimed = claim_partition(self, node)
        m = claimed.manifest
        self._manifest = m
        cfg = self.config()
        now = self.host.clock.now_ms()
        jitter = self.host.ids.randrange(min(cfg.segment_jitter_ms, cfg.segment_ms)) if cfg.segment_jitter_ms else 0
        segments = split_unsealed(claimed.chunks, claimed.rolls, m.next_offset, now, jitter,
                                  lambda ref: self.host.chunks.get(ref, self.log_id))
        leo = claimed.chunks[-1].chunk.last_offset + 1 if claimed.chunks else m.next_offset
        # the producers' state: the manifest's snapshot, then the batches our WAL objects list past it
        producers = rebuild_producers(m.producers, [p for ref in claimed.chunks for p in ref.chunk.producers],
                                      segments, now)
        w = WriterState(epoch=claimed.epoch, node=node, leo=leo, active=segments[-1], pending=segments[:-1],
                        unflushed_from=leo, chunks=list(claimed.chunks), producers=producers)
        self.writer = w
        node.register(self.owner)
        if w.pending:
            self.host.request_seal(self.owner)
        return w
