"""The shared machinery of one open store: object store, caches, catalog, the node, the sealer.

:class:`Runtime` is what every :class:`~s3stream.partition.log.PartitionLog` of a store talks to.
:class:`NodeRuntime` exists once this process writes: it holds the local WAL directory lock, the
claimed WAL namespace and the flush pipeline. It opens lazily on the first write — or at store open
when an earlier process left a WAL directory behind, which is then replayed (recovery) so every
acknowledged record becomes visible again.
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path

from s3stream.base.clock import Clock
from s3stream.base.crashpoints import CrashPoints
from s3stream.base.errors import (
    Closed,
    Fenced,
    InvalidConfig,
    S3StreamError,
    UnknownTopic,
)
from s3stream.base.ids import IdSource
from s3stream.base.inline import InlineExecutor
from s3stream.base.settings import StoreSettings
from s3stream.engine.replay import Replay
from s3stream.engine.sealer import Sealer
from s3stream.engine.steps import EngineSteps
from s3stream.manifest.catalog import TopicCatalog
from s3stream.objectstore.protocol import ObjectStore
from s3stream.partition.host import HostedLog
from s3stream.partition.log import PartitionLog
from s3stream.read.tiers import ChunkCache, SegmentReaderCache
from s3stream.read.walscan import WalIndexCache
from s3stream.write.localwal import WalStorageFactory, open_wal, wal_errors
from s3stream.write.metrics import StoreMetrics
from s3stream.write.node import claim_namespace, pick_node_directory
from s3stream.write.node_runtime import NodeRuntime
from s3stream.write.sealworker import SealWorkers
from wal import WalError, WalLocked, WalWriter

__all__ = ["NodeRuntime", "Runtime"]

log = logging.getLogger(__name__)

_NODE_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class Runtime:
    """Everything a store's partitions share (thread-safe)."""

    def __init__(self, *, url: str, objstore: ObjectStore, settings: StoreSettings, clock: Clock, ids: IdSource,
                 crash: CrashPoints, wal_root: str, metrics: StoreMetrics, seal_in_workers: bool = False,
                 wal_storage: WalStorageFactory | None = None) -> None:
        self.url = url
        # every request of this store's components counts in s3stream_object_store_requests/errors
        self.objstore = objstore = metrics.meter(objstore)
        self.settings = settings
        self.clock = clock
        self.ids = ids
        self.crash = crash
        self.wal_root = wal_root
        self.wal_storage = wal_storage  # makes a node directory's WalStorage (None: files)
        self.metrics = metrics
        self.catalog = TopicCatalog(objstore, clock=clock, ids=ids, default_config=settings.default_topic_config)
        manual = settings.background == "manual"
        # background fetches of reads and seals (read-ahead, warming, chunk prefetch): the process-wide fetch
        # pool, or (background=manual) inline, in the reading thread and in request order
        self.fetches: Executor | None = InlineExecutor() if manual else None
        # a reader holds at most 14 blocks (window + in flight); bound the readers by cache_bytes
        block = max(settings.read_ahead_bytes, 1 << 20)
        self.segments = SegmentReaderCache(objstore, block_bytes=block,
                                           max_entries=max(4, settings.cache_bytes // (14 * block)),
                                           executor=self.fetches)
        # decoded WAL-object chunks share cache_bytes with the tail cache, which has priority (note_memory)
        self.chunks = ChunkCache(objstore, max_bytes=settings.cache_bytes, room=self._chunk_room,
                                 executor=self.fetches)
        # relisted when GC (orphan_min_age_ms) may have made a gap in what it knows of a namespace
        self.walindex = WalIndexCache(objstore, clock=clock, relist_after_s=settings.orphan_min_age_ms / 2000.0)
        # reads of the sealed tier check the manifest is still the latest while they read (PartitionLog)
        # (background=manual: inline, before the read; the same linearization point, one thread)
        self.manifest_probes: Executor = (
            ThreadPoolExecutor(max_workers=4, thread_name_prefix="s3stream-manifest-probe")
            if not manual else InlineExecutor())
        self._node: NodeRuntime | None = None  # set while recovering (seen only under _node_lock)
        self._ready_node: NodeRuntime | None = None  # published once recovery is done (lock-free reads)
        self._node_lock = threading.RLock()
        self._logs: dict[tuple[str, str, int], PartitionLog] = {}
        self._logs_lock = threading.Lock()
        self._memory_bytes = 0
        self._memory_lock = threading.Lock()
        self._closed = False
        self.sealer = Sealer(clock, concurrency=settings.seal_concurrency,
                             background=settings.background == "threads")
        # at most seal_concurrency seals at once in this process, whichever threads run them (the sealer,
        # or a caller's flush() or roll()): a seal holds an upload part and a row group, and the memory
        # bound counts seal_concurrency of each
        self.seal_slot = threading.BoundedSemaphore(settings.seal_concurrency)
        # seals read, encode and upload in worker processes (settings.seal_workers): see s3stream.write.sealjob
        self.seal_workers = SealWorkers(url, metrics) if seal_in_workers else None
        metrics.watch_buffered_bytes(self._buffered_bytes)

    # -- partitions --------------------------------------------------------------------------------

    def partition(self, topic: str, index: int) -> PartitionLog:
        self.check_open()
        doc = self.catalog.get(topic)
        value: object = index  # callers outside mypy may pass anything
        if isinstance(value, int) and not isinstance(value, bool) and value >= doc.partitions:
            doc = self.catalog.get(topic, refresh=True)  # another process may have added partitions
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < doc.partitions:
            raise UnknownTopic(f"topic {topic!r} has no partition {index!r} (it has {doc.partitions})")
        key = (doc.name, doc.topic_id, index)
        with self._logs_lock:
            plog = self._logs.get(key)
            if plog is None:
                plog = PartitionLog(self, doc, index)
                self._logs[key] = plog
            return plog

    def partition_for_log_id(self, log_id: str) -> PartitionLog | None:
        """The partition a WAL entry belongs to, or None when its topic is gone."""
        try:
            name, topic_id, part = log_id.split("/")
            doc = self.catalog.get(name, refresh=True)
        except (ValueError, UnknownTopic):
            return None
        if doc.topic_id != topic_id or not part.isdigit() or int(part) >= doc.partitions:
            return None
        return self.partition(name, int(part))

    def open_logs(self) -> list[PartitionLog]:
        with self._logs_lock:
            return list(self._logs.values())

    def written_logs(self) -> list[PartitionLog]:
        """The open partitions this process's node writes."""
        node = self._node
        if node is None:
            return []
        ids = {plog.log_id for plog in node.logs()}
        return [plog for plog in self.open_logs() if plog.log_id in ids]

    # -- the node ----------------------------------------------------------------------------------

    def existing_node(self) -> NodeRuntime | None:
        """The node if one was opened (possibly still recovering, or left half-recovered by a crash)."""
        return self._node

    def node_runtime(self) -> NodeRuntime:
        """This process's writer node, opened (and recovered) on first use.

        Other threads see the node only once recovery is done: recovery ends by detaching the partitions
        it replayed, so an append that claimed a partition mid-recovery would lose its writer state (and
        the next append would reuse its offsets). The recovering thread itself re-enters through the lock.
        """
        node = self._ready_node
        if node is not None:
            node.uploader.check()
            return node
        with self._node_lock:
            self.check_open()
            if self._node is None:
                self._open_node()
            assert self._node is not None
            return self._node

    def _open_node(self, *, only_existing: bool = False) -> None:
        s = self.settings
        wal: WalWriter | None = None
        chosen = None
        with wal_errors(self.wal_root, os_errors=True):  # a read-only WAL root is a typed error too
            candidates = pick_node_directory(self.wal_root, self.ids, self.clock.now_ms(), self._node_id_setting())
        for cand in candidates:
            if only_existing and not cand.reused:
                return
            try:
                # WAL errors come out as S3StreamError (s3stream.write.localwal)
                wal = open_wal(cand.path, s, self.wal_storage)
            except WalLocked:
                if self._node_id_setting() is not None:
                    raise InvalidConfig(f"node {self._node_id_setting()!r}: its WAL directory {cand.path} is in use "
                                        "by another process", key="node_id") from None
                continue
            chosen = cand
            break
        assert wal is not None
        assert chosen is not None
        try:
            fence = claim_namespace(self.objstore, chosen.node_id, clock=self.clock)
        except BaseException:
            wal.close()
            raise
        node = self._node = NodeRuntime(self, chosen.node_id, wal, fence)
        log.info("node %s opened (WAL %s, fence seq %d)", chosen.node_id, chosen.path, fence)
        with wal_errors(chosen.path):
            self._recover(node)
        self._ready_node = node

    def recover_leftovers(self) -> None:
        """At store open: if an earlier process left a WAL directory behind, adopt and replay it."""
        root = Path(self.wal_root)
        node_id = self._node_id_setting()
        if node_id is None and not (root.exists() and any(
                p.is_dir() and p.name.startswith("n-") for p in root.iterdir())):
            return
        if node_id is not None and not (root / node_id).exists():
            return
        with self._node_lock:
            if self._node is None:
                self._open_node(only_existing=True)

    def _recover(self, node: NodeRuntime) -> None:
        """Replay the local WAL from its trim point at O(partitions) requests, not O(entries).

        Entries below the trim point are in published WAL objects (the uploader trims after each publish, a
        clean close trims everything), so they are not even read. Each log of the rest is resolved and
        claimed once, and an entry the bucket already holds is skipped by its offsets alone. Should the
        bucket lack records the trim point covers (a WAL object deleted while this node was down), the
        older entries of those logs are replayed too, as long as the local WAL still holds them.
        """
        wal = node.wal
        start = wal.trim_seq
        replay = Replay(self, node)
        pending = replay.unpublished(wal.entries(start))
        gaps = replay.gaps(pending)
        if gaps and start > wal.first_seq:
            log.warning("node %s: the bucket lacks records of %s below the local WAL's trim point; replaying "
                        "them from the local WAL", node.node_id, ", ".join(sorted(gaps)))
            older = itertools.takewhile(lambda e: e.seq < start, wal.entries(0))
            pending = replay.unpublished(older, only=gaps) + pending
        replayed = replay.run(pending)
        if replayed:
            log.info("node %s: replayed %d WAL entries not yet in object storage", node.node_id, replayed)
        node.uploader.flush()
        for plog in self.written_logs():
            # seal what the replay rolled, then let go of the partition: a process that only reads
            # must see what later writers commit, not its own frozen writer view (the next append
            # claims the partition again, cheaply: same node, same WAL namespace)
            try:
                plog.seal_pending()
            except S3StreamError as exc:
                log.warning("sealing %s after recovery failed, the sealer retries: %s", plog.log_id, exc)
                self.request_seal(plog)
                continue
            plog.detach()

    @staticmethod
    def _trim_published(node: NodeRuntime) -> None:
        """At close, once every append is in a WAL object and every roll sealed: trim the whole local WAL,
        so the next open replays nothing (the uploader's trims stop at the last published append; a roll
        marker after it would still make the next open claim its partition)."""
        with node.append_lock:  # no append can slip in between the check and the trim
            try:
                node.uploader.check()
            except S3StreamError:
                return  # failed or fenced: what it did not publish stays for the next open
            if node.uploader.buffered_bytes or any(plog.has_pending_seals() for plog in node.logs()):
                return
            try:
                node.wal.trim(node.wal.next_seq - 1)
            except WalError as exc:
                log.warning("node %s: cannot trim the local WAL at close, the next open replays it: %s",
                            node.node_id, exc)

    # -- background work ---------------------------------------------------------------------------

    def request_seal(self, plog: HostedLog) -> None:
        self.sealer.request(plog)

    def pool(self, workers: int, name: str) -> Executor:
        """A pool for one pass's concurrent work (the cleaner's key scans, decodes and output uploads), to use as
        a context manager; with ``background=manual`` an inline one: the work runs in the caller's thread, in
        submission order."""
        if self.settings.background == "manual":
            return InlineExecutor()
        return ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)

    def steps(self) -> EngineSteps:
        """The background work as step functions, for a store opened with ``background=manual`` (they are what
        the threads run with ``background=threads``; calling them there is allowed but races the threads)."""
        return EngineSteps(self)

    def note_memory(self, plog: HostedLog, delta: int) -> None:
        """Account tail-cache bytes; evict WAL chunks, then flushed batches, when over ``cache_bytes``."""
        with self._memory_lock:
            self._memory_bytes += delta
            over = self._memory_bytes - self.settings.cache_bytes
        if self.chunks.nbytes > -over:  # the chunk cache gets what the tail cache leaves
            self.chunks.shrink(-over)
        if over <= 0:
            return
        freed = plog.evict_memory(over)
        if freed < over:
            for other in self.open_logs():
                if other is not plog:
                    freed += other.evict_memory(over - freed)
                if freed >= over:
                    break
        with self._memory_lock:
            self._memory_bytes -= freed

    def _chunk_room(self) -> int:
        """What ``cache_bytes`` leaves the WAL-chunk cache beside the tail cache (read unlocked: a bound)."""
        return self.settings.cache_bytes - self._memory_bytes

    def _buffered_bytes(self) -> float:
        """What the node's uploader holds not yet in a WAL object (the s3stream_buffered_bytes gauge)."""
        node = self._node
        return 0.0 if node is None else float(node.uploader.buffered_bytes)

    def _node_id_setting(self) -> str | None:
        node_id = self.settings.node_id
        if node_id is not None and not _NODE_ID_RE.fullmatch(node_id):
            raise InvalidConfig(f"node_id {node_id!r} must match [A-Za-z0-9._-]{{1,64}} (it names a directory "
                                "and an object key prefix)", key="node_id")
        return node_id

    def check_open(self) -> None:
        if self._closed:
            raise Closed("the store is closed")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        errors: list[BaseException] = []
        node = self._node
        if node is not None:
            try:
                node.drainer.wait_idle(self.settings.commit_timeout_ms / 1000.0)  # queued appends: written
                node.uploader.flush(self.settings.commit_timeout_ms / 1000.0)
            except (S3StreamError, TimeoutError) as exc:
                errors.append(exc)
            self.sealer.drain(timeout_s=self.settings.commit_timeout_ms / 1000.0)
        self.sealer.stop()
        self.manifest_probes.shutdown(wait=True)
        if self.seal_workers is not None:
            self.seal_workers.close()
        if node is not None and node is self._ready_node and not errors:
            # only after recovery finished: a store whose open failed mid-replay (a damaged entry, an
            # expired credential during a claim) must leave its local WAL for the next open to replay
            self._trim_published(node)
        if node is not None:
            try:
                node.close()
            except (S3StreamError, OSError) as exc:
                errors.append(exc)
        self.objstore.close()
        if errors and not isinstance(errors[0], Fenced):
            log.warning("store closed with errors: %s", errors)
