"""Kafka's cleaner metrics (LogCleaner / LogCleanerManager gauges), plus per-round counters.

Names mirror Kafka's JMX names in Prometheus style: ``max-dirty-percent`` becomes
``s3stream_cleaner_max_dirty_percent`` and so on; KIP-354 adds the max-compaction-delay gauges.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["CleanerMetrics"]


class CleanerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.max_dirty_percent = Gauge("s3stream_cleaner_max_dirty_percent",
                                       "Highest cleanable ratio among compacted partitions (percent)", registry=r)
        self.max_clean_time_secs = Gauge("s3stream_cleaner_max_clean_time_secs", "Duration of the last round",
                                         registry=r)
        self.max_buffer_utilization_percent = Gauge("s3stream_cleaner_max_buffer_utilization_percent",
                                                    "Offset map utilization of the last round (percent)", registry=r)
        self.recopy_percent = Gauge("s3stream_cleaner_recopy_percent",
                                    "Bytes written / bytes read in the last round (percent)", registry=r)
        self.uncleanable_partitions_count = Gauge("s3stream_cleaner_uncleanable_partitions_count",
                                                  "Partitions marked uncleanable", registry=r)
        self.uncleanable_bytes = Gauge("s3stream_cleaner_uncleanable_bytes", "Bytes of uncleanable partitions",
                                       registry=r)
        self.max_compaction_delay_secs = Gauge("s3stream_cleaner_max_compaction_delay_secs",
                                               "Largest max.compaction.lag.ms overrun (KIP-354)", registry=r)
        self.logs_compacted_by_max_lag = Gauge("s3stream_cleaner_num_logs_compacted_by_max_compaction_lag",
                                               "Partitions eligible because of max.compaction.lag.ms (KIP-354)",
                                               registry=r)
        self.rounds = Counter("s3stream_cleaner_rounds", "Cleaning rounds", ["outcome"], registry=r)
        self.bytes_read = Counter("s3stream_cleaner_bytes_read", "Bytes read by the cleaner", registry=r)
        self.bytes_written = Counter("s3stream_cleaner_bytes_written", "Bytes written by the cleaner", registry=r)
        self.records_kept = Counter("s3stream_cleaner_records_kept", "Records kept by the cleaner", registry=r)
        self.records_removed = Counter("s3stream_cleaner_records_removed", "Records removed by the cleaner",
                                       registry=r)
        self.round_seconds = Histogram("s3stream_cleaner_round_seconds", "Duration of cleaning rounds", registry=r)
