"""The Store facade: ``open_store(url)`` and the topic-level API; it composes the parts below it.

URLs: ``memory://NAME`` (tests), ``file:///ABS/DIR`` (the embedded default), and
``s3://BUCKET/PREFIX?endpoint_url=...&region=...`` (credentials from the standard AWS chain).
Options (``open_store(url, flush_interval_ms=100, ack="s3", wal_dir=...)``) are the fields of
:class:`~s3stream.base.settings.StoreSettings`, under their Python or dotted Kafka-style names.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from concurrent.futures import Executor
from types import TracebackType
from typing import Any

from cleaner.service import Cleaner, CleanerPassReport
from s3stream.base.clock import Clock, SystemClock
from s3stream.base.crashpoints import CrashPoints
from s3stream.base.errors import InvalidArgument, InvalidConfig, UnknownTopic
from s3stream.base.ids import IdSource
from s3stream.base.inline import InlineExecutor
from s3stream.base.settings import StoreSettings, default_wal_dir
from s3stream.base.topic_config import effective_topic_config
from s3stream.engine.runtime import Runtime
from s3stream.maintenance.gc import GarbageReport, collect_garbage
from s3stream.maintenance.retention import RetentionReport, run_retention_pass
from s3stream.manifest.producer_ids import ProducerIdAllocator, producer_id_store
from s3stream.objectstore.protocol import ObjectStore
from s3stream.objectstore.url import open_object_store, parse_store_url
from s3stream.partition.log import PartitionLog
from s3stream.write.localwal import WalStorageFactory
from s3stream.write.metrics import StoreMetrics

__all__ = ["Store", "open_store"]

log = logging.getLogger(__name__)


def open_store(url: str, *, clock: Clock | None = None, ids: IdSource | None = None,
               object_store: ObjectStore | None = None, crash_points: CrashPoints | None = None,
               wal_storage: WalStorageFactory | None = None, **options: Any) -> Store:
    """Open the store at ``url`` (see the module docstring); recovers what an earlier process left.

    Args:
        url: where the data lives.
        clock: wall time for semantics (``ManualClock`` in tests); the system clock by default.
        ids: the id/randomness source (seed it for reproducible simulations).
        object_store: use this ObjectStore instead of opening ``url`` (wrappers in tests/benchmarks).
        crash_points: named crash points for crash tests.
        wal_storage: makes the ``wal.WalStorage`` of a node's local WAL directory from its path (a simulated
            disk with faults in tests); files in the directory by default.
        **options: StoreSettings fields.

    Raises:
        InvalidConfig: an unknown or invalid option.
        InvalidRequest: a malformed URL (or an ``endpoint_url`` carrying credentials).
        StoreAccessError: the endpoint, bucket or credentials cannot be used (an endpoint that refuses
            connections fails in seconds).
        UnsafeStore: the store's conditional writes are broken (capability probe); never for an
            unreachable endpoint or rejected credentials.
    """
    if not isinstance(url, str):
        raise InvalidArgument(f"the store URL must be a str, not {type(url).__name__}")
    settings = StoreSettings.from_options(options)
    clock = clock or SystemClock()
    ids = ids or IdSource()
    scheme = parse_store_url(url).scheme
    seal_in_workers = _seal_in_workers(settings, scheme, injected=object_store is not None)
    # background=manual: what would run on threads of the object store's own (a file:// store's direct
    # writes, the probe's racing PUTs) runs inline, in the opening or writing thread, in order
    inline: Executor | None = InlineExecutor() if settings.background == "manual" else None
    # an S3 store opened here is listed once first, failing fast: a closed port or a wrong secret is a
    # StoreAccessError in seconds, not a probe finding (UnsafeStore) after ~20 s of retries
    objstore = object_store or open_object_store(url, clock=clock, ids=ids, check_access=True, io_executor=inline)
    if settings.probe and scheme != "memory":
        from s3stream.objectstore.probe import probe_conditional_writes, require_safe

        result = probe_conditional_writes(objstore, ids, executor=inline)
        require_safe(result)
        if result.mode != "full":
            log.warning("object store %s: %s", objstore.url, "; ".join(result.findings))
    wal_root = settings.wal_dir or default_wal_dir(url)
    return Store(url, objstore, settings, clock, ids, crash_points or CrashPoints(), wal_root,
                 seal_in_workers=seal_in_workers, wal_storage=wal_storage)


def _seal_in_workers(settings: StoreSettings, scheme: str, *, injected: bool) -> bool:
    """Whether seals run in worker processes (settings.seal_workers; a memory:// store cannot be shared; a store
    without background work of its own runs everything in the caller's thread, seals too)."""
    if settings.background == "manual":
        return False
    if settings.seal_workers == "process":
        if scheme == "memory":
            raise InvalidConfig("seal.workers=process needs a store other processes can open (file:// or "
                                "s3://), not memory://", key="seal.workers")
        return True
    return settings.seal_workers == "auto" and scheme == "s3" and not injected


class Store:
    """An open stream store. Thread-safe; close it (or use ``with``) to flush and release the WAL."""

    def __init__(self, url: str, objstore: ObjectStore, settings: StoreSettings, clock: Clock, ids: IdSource,
                 crash: CrashPoints, wal_root: str, *, seal_in_workers: bool = False,
                 wal_storage: WalStorageFactory | None = None) -> None:
        self._metrics = StoreMetrics()
        self._cleaner: Cleaner | None = None
        self._cleaner_lock = threading.Lock()
        self._producer_ids: ProducerIdAllocator | None = None
        self._producer_ids_lock = threading.Lock()
        self._rt = Runtime(url=url, objstore=objstore, settings=settings, clock=clock, ids=ids, crash=crash,
                           wal_root=wal_root, metrics=self._metrics, seal_in_workers=seal_in_workers,
                           wal_storage=wal_storage)
        try:
            self._rt.recover_leftovers()
        except BaseException:
            self._rt.close()
            raise

    # -- properties ------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self._rt.url

    @property
    def clock(self) -> Clock:
        return self._rt.clock

    @property
    def settings(self) -> StoreSettings:
        return self._rt.settings

    @property
    def object_store(self) -> ObjectStore:
        return self._rt.objstore

    @property
    def metrics_registry(self) -> Any:
        return self._metrics.registry

    @property
    def node_id(self) -> str | None:
        node = self._rt.existing_node()
        return None if node is None else node.node_id

    @property
    def runtime(self) -> Runtime:
        """Internals for the CLI, the cleaner and tests; not a stable API."""
        return self._rt

    # -- topics ----------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1, config: Mapping[str, object] | None = None) -> None:
        """Create a topic. Raises InvalidTopic, InvalidConfig, InvalidPartitions (a count outside [1, 100000]),
        TopicExists; InvalidArgument when ``config`` is not a mapping."""
        self._rt.catalog.create(name, partitions, _mapping("config", config, optional=True))

    def add_partitions(self, name: str, total: int) -> None:
        """Grow topic ``name`` to ``total`` partitions (Kafka's CreatePartitions); partitions are never removed.

        Existing partitions keep their data and offsets; the new ones start empty, and every process sees
        them at once (``partition(name, i)`` re-reads the topic for an index past the count it knows). Raises
        UnknownTopic; InvalidArgument when ``total`` is not an int; InvalidPartitions when it is not more than
        the topic has (Kafka's INVALID_PARTITIONS) or over the maximum (100000); Closed after ``close()``.
        """
        self._rt.check_open()
        self._rt.catalog.add_partitions(name, total)

    def delete_topic(self, name: str) -> None:
        """Delete a topic; its objects are removed by GC after ``file.delete.delay.ms``."""
        self._rt.catalog.delete(name)

    def list_topics(self, *, fresh: bool = True) -> list[str]:
        """Names of the live topics, sorted. ``fresh=False`` saves a request per topic: a topic another
        process deleted may still be listed for the catalog's refresh interval (10 s), as appends see it."""
        return self._rt.catalog.names(fresh=fresh)

    def topic_config(self, name: str) -> dict[str, str]:
        """The effective config of ``name``: every key under its Kafka name, defaults included."""
        return self._rt.catalog.effective_config(name)

    def topic_overrides(self, name: str) -> dict[str, str]:
        """Only the keys set explicitly on ``name``."""
        return dict(self._rt.catalog.get(name, refresh=True).config)

    def alter_topic_config(self, name: str, updates: Mapping[str, object | None]) -> None:
        """Set (or, with None, reset to default) config keys of a live topic; takes effect at the next pass.

        Raises UnknownTopic, InvalidConfig; InvalidArgument when ``updates`` is not a mapping.
        """
        self._rt.catalog.alter(name, _mapping("updates", updates))

    def partitions(self, name: str) -> int:
        return self._rt.catalog.get(name).partitions

    def topic_id(self, name: str) -> str:
        """The topic's id (a lower-case ULID), new each time the name is (re)created. Raises UnknownTopic."""
        return self._rt.catalog.get(name).topic_id

    def partition(self, name: str, index: int) -> PartitionLog:
        """The log of one partition. Raises UnknownTopic for a missing topic or partition."""
        return self._rt.partition(name, index)

    def describe_topic(self, name: str) -> dict[str, Any]:
        """Topic id, partitions, effective config, and per partition: offsets, segments, bytes."""
        doc = self._rt.catalog.get(name, refresh=True)
        parts = []
        for i in range(doc.partitions):
            plog = self.partition(name, i)
            segs = plog.segments()
            parts.append({
                "partition": i,
                "log_start_offset": plog.log_start_offset,
                "log_end_offset": plog.log_end_offset,
                "segments": len(segs),
                "sealed_segments": sum(1 for s in segs if s.sealed),
                "size_bytes": sum(s.size_bytes for s in segs),
            })
        return {"name": doc.name, "topic_id": doc.topic_id, "partitions": doc.partitions,
                "config": effective_topic_config(doc.config), "overrides": dict(doc.config),
                "partition_info": parts}

    def allocate_producer_id(self) -> int:
        """A producer id for an idempotent producer (Kafka's InitProducerId), unique across every process
        sharing the bucket: taken from this store's block of ids, a new block committed to the bucket once per
        1000 ids (:mod:`s3stream.manifest.producer_ids`). Thread-safe; raises Closed after ``close()``, and
        what a commit raises (CommitTimeout when the bucket does not answer)."""
        self._rt.check_open()
        with self._producer_ids_lock:
            if self._producer_ids is None:
                rt = self._rt
                owner = self.node_id or f"store-{rt.ids.ulid(rt.clock.now_ms()).lower()}"
                self._producer_ids = ProducerIdAllocator(
                    producer_id_store(rt.objstore, rt.clock, rt.ids), owner)
            allocator = self._producer_ids
        return allocator.allocate()

    # -- background work, one pass each -----------------------------------------------------------

    def flush(self) -> None:
        """Make everything appended so far durable in object storage, and seal what was rolled."""
        node = self._rt.existing_node()
        if node is not None:
            node.drainer.wait_idle()  # every queued append is in the flush pipeline
            node.uploader.flush()
            for plog in self._rt.written_logs():
                plog.flush()

    def run_retention(self) -> RetentionReport:
        """One retention pass over every partition (rules RET-1..9), using the store's clock."""
        self.flush()
        return run_retention_pass(self._rt)

    @property
    def cleaner(self) -> Cleaner:
        """This store's cleaner (its state lasts across passes; ``serve`` runs its loops)."""
        with self._cleaner_lock:
            if self._cleaner is None:
                self._cleaner = Cleaner(self._rt)
            return self._cleaner

    def run_cleaner(self) -> CleanerPassReport:
        """One cleaner pass: clean the dirtiest eligible compacted partition, then its retention (CLEAN-SEL-1)."""
        self.flush()
        return self.cleaner.run_pass()

    def collect_garbage(self, *, dry_run: bool = False) -> GarbageReport:
        """Delete objects no manifest references, after their grace periods (never earlier)."""
        return collect_garbage(self._rt, dry_run=dry_run)

    # -- lifecycle -------------------------------------------------------------------------------

    def close(self) -> None:
        """Flush, seal what was rolled, release the local WAL. Idempotent."""
        self._rt.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.url!r})"


def _mapping(what: str, value: object, *, optional: bool = False) -> Any:
    """``value`` when it is a mapping (or None, when ``optional``), else InvalidArgument."""
    if isinstance(value, Mapping) or (optional and value is None):
        return value
    raise InvalidArgument(f"{what} must be a mapping of config names to values, not {type(value).__name__}")


def _unknown(name: str) -> UnknownTopic:
    return UnknownTopic(f"unknown topic {name!r}")
