"""Prometheus metrics of one store (a registry per store, so several stores can live in one process).

Names follow Kafka's where Kafka has one (``kafka.log`` / ``kafka.server`` families), prefixed
``s3stream_``; ``Store.metrics_registry`` is what ``s3stream serve`` exposes over HTTP.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from s3stream.objectstore.metered import MeteredObjectStore
from s3stream.objectstore.protocol import ObjectStore

if TYPE_CHECKING:
    from collections.abc import Callable

    from s3stream.policy.retention import RetentionPlan

__all__ = ["StoreMetrics"]

_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
_SIZE_BUCKETS = tuple(float(1 << k) for k in range(10, 31, 2))


class StoreMetrics:
    """The metric objects; components call the small methods below."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.records_in = Counter("s3stream_records_in", "Records appended", ["topic"], registry=r)
        self.bytes_in = Counter("s3stream_bytes_in", "Logical bytes appended", ["topic"], registry=r)
        self.ack_latency = Histogram("s3stream_append_ack_seconds", "Append latency until acknowledged",
                                     buckets=_LATENCY_BUCKETS, registry=r)
        self.flushes = Counter("s3stream_wal_objects", "WAL objects committed", registry=r)
        self.flush_size = Histogram("s3stream_wal_object_bytes", "Size of committed WAL objects",
                                    buckets=_SIZE_BUCKETS, registry=r)
        self.flush_partitions = Histogram("s3stream_wal_object_partitions", "Partitions per WAL object",
                                          buckets=(1, 2, 4, 8, 16, 64, 256, 1024, 4096), registry=r)
        self.segments_sealed = Counter("s3stream_segments_sealed", "Segments sealed", ["topic"], registry=r)
        self.segment_bytes = Counter("s3stream_segment_bytes_written", "Segment object bytes written", ["topic"],
                                     registry=r)
        # counted by the MeteredObjectStore the runtime wraps around its store (see meter())
        self.requests = Counter("s3stream_object_store_requests", "Object store requests (failed ones included)",
                                ["op"], registry=r)
        self.request_errors = Counter("s3stream_object_store_errors",
                                      "Failed object store requests (404s and lost conditional puts included)",
                                      ["op", "kind"], registry=r)
        self.buffered_bytes = Gauge("s3stream_buffered_bytes", "Bytes appended but not yet in a WAL object",
                                    registry=r)
        self.retention_segments = Counter("s3stream_retention_deleted_segments", "Segments deleted by retention",
                                          ["topic", "reason"], registry=r)
        self.retention_bytes = Counter("s3stream_retention_deleted_bytes", "Bytes deleted by retention",
                                       ["topic", "reason"], registry=r)
        self.retention_pass_seconds = Histogram("s3stream_retention_pass_seconds", "Duration of a retention pass",
                                                buckets=(*_LATENCY_BUCKETS, 30.0, 60.0, 300.0), registry=r)
        self.log_start_offset = Gauge("s3stream_log_start_offset", "Log start offset", ["topic", "partition"],
                                      registry=r)
        self.garbage_deleted = Counter("s3stream_gc_deleted_objects", "Objects deleted by GC", ["kind"], registry=r)

    def meter(self, objstore: ObjectStore) -> ObjectStore:
        """``objstore`` wrapped so its requests and errors count here (a store already metered is re-wrapped,
        so each request counts once, in this registry)."""
        if isinstance(objstore, MeteredObjectStore):
            objstore = objstore.inner
        return MeteredObjectStore(objstore, requests=self.requests, errors=self.request_errors)

    def watch_buffered_bytes(self, read: Callable[[], float]) -> None:
        """Read ``s3stream_buffered_bytes`` from ``read`` at each scrape."""
        self.buffered_bytes.set_function(read)

    def appended(self, topic: str, records: int, nbytes: int) -> None:
        self.records_in.labels(topic).inc(records)
        self.bytes_in.labels(topic).inc(nbytes)

    def flushed(self, nbytes: int, partitions: int) -> None:
        self.flushes.inc()
        self.flush_size.observe(nbytes)
        self.flush_partitions.observe(partitions)

    def retention_deleted(self, topic: str, plan: RetentionPlan) -> None:
        for reason, (segments, nbytes) in plan.by_reason().items():
            self.retention_segments.labels(topic, reason).inc(segments)
            self.retention_bytes.labels(topic, reason).inc(nbytes)

    def sealed(self, topic: str, nbytes: int) -> None:
        self.segments_sealed.labels(topic).inc()
        self.segment_bytes.labels(topic).inc(nbytes)
