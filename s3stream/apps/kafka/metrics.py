"""Prometheus metrics of the Kafka server, registered in the store's registry (one ``/metrics`` for both).

Names follow Kafka's ``kafka.network``/``kafka.server`` families, prefixed ``s3stream_kafka_``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["KafkaMetrics"]

_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class KafkaMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.requests = Counter("s3stream_kafka_requests", "Requests handled", ["api", "version"], registry=r)
        self.request_errors = Counter("s3stream_kafka_request_errors", "Error codes returned, per API",
                                      ["api", "error"], registry=r)
        self.latency = Histogram("s3stream_kafka_request_seconds", "Time from a request's arrival to its response",
                                 ["api"], buckets=_LATENCY_BUCKETS, registry=r)
        self.bytes_in = Counter("s3stream_kafka_bytes_in", "Request bytes received", registry=r)
        self.bytes_out = Counter("s3stream_kafka_bytes_out", "Response bytes sent", registry=r)
        self.connections = Gauge("s3stream_kafka_connections", "Open client connections", registry=r)
        self.connections_total = Counter("s3stream_kafka_connections_accepted", "Client connections accepted",
                                         registry=r)
        self.connections_rejected = Counter("s3stream_kafka_connections_rejected",
                                            "Connections refused or closed by the server", ["reason"], registry=r)
        self.groups = Gauge("s3stream_kafka_groups", "Consumer groups, by state", ["state"], registry=r)
        self.produce_records = Counter("s3stream_kafka_produced_records", "Records produced", registry=r)
        self.fetch_cache = Counter("s3stream_kafka_fetch_batches", "Batches served by fetch, by source",
                                   ["source"], registry=r)
