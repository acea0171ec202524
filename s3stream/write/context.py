"""What the layers below the engine need of an open store, as a narrow protocol instead of the runtime.

The engine's ``Runtime`` provides it; sealing, the flush pipeline, the node and the partitions take it, so
none of them imports the engine (which imports them).
"""

from __future__ import annotations

import threading
from concurrent.futures import Executor
from typing import Protocol

from s3stream.manifest.catalog import TopicCatalog
from s3stream.read.tiers import ChunkCache, SegmentReaderCache
from s3stream.read.walscan import WalIndexCache
from s3stream.write.metrics import StoreMetrics
from s3stream.write.seal import SealContext
from s3stream.write.sealworker import SealWorkers

__all__ = ["StoreContext"]


class StoreContext(SealContext, Protocol):
    """An open store's shared parts: besides what a seal needs (object store, settings, injected time and
    ids, crash points), its metrics and caches."""

    @property
    def metrics(self) -> StoreMetrics: ...
    @property
    def catalog(self) -> TopicCatalog: ...
    @property
    def segments(self) -> SegmentReaderCache: ...
    @property
    def chunks(self) -> ChunkCache: ...
    @property
    def walindex(self) -> WalIndexCache: ...
    @property
    def manifest_probes(self) -> Executor: ...
    @property
    def seal_slot(self) -> threading.BoundedSemaphore: ...
    @property
    def seal_workers(self) -> SealWorkers | None: ...
