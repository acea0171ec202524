"""Reference lines: what published systems claim, and what our own design implies, for the same figures.

Published numbers come from their own documentation, with the setting they were measured in; they are
context, not targets: they were taken on AWS S3 with Kafka clients, while a run of this suite may be on
a local directory or a latency model. Model lines follow from the run's parameters and its raw limits
(an ``ack=wal`` append cannot beat one fsync; an ``ack=s3`` append that waits for a time-triggered flush
waits up to ``flush.interval.ms`` and then one PUT).

Sources (read 2026-11-22):

* WarpStream, "Low Latency Clusters":
  https://docs.warpstream.com/warpstream/configuration/low-latency-clusters ; a table of achievable
  produce and end-to-end latencies per setup; the default setup (25 ms client linger, 250 ms Agent batch
  timeout, S3 Standard, Fundamentals cluster tier) gives produce p50 250 ms / p99 500 ms and
  end-to-end p50 500 ms / p99 900 ms; 10 ms linger, 50 ms batch timeout and S3 Express give produce
  p99 < 150 ms.
* WarpStream blog, "The Art of Being Lazy(log)" (2025-02-04):
  https://www.warpstream.com/blog/the-art-of-being-lazy-log-lower-latency-and-higher-availability-with-delayed-sequencing
  ; "typically achieves a p99 produce latency of 400ms in its default configuration".
* AutoMQ, "Object Storage Configuration":
  https://www.automq.com/docs/automq/configuration/object-storage-configuration ; the S3 WAL commits a
  batch every ``batchInterval`` = 250 ms or ``maxBytesInBatch`` = 8388608 bytes (8 MiB) by default (the
  same defaults as s3stream's ``flush.interval.ms`` and ``flush.bytes``).
* AutoMQ, "Performance Tuning for Client":
  https://docs.automq.com/automq/configuration/performance-tuning-for-client ; "when writing a 4MiB file
  to S3, the P99 latency is approximately 400 milliseconds".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.suite.context import MiB, SuiteParams

__all__ = ["PUBLISHED", "Reference", "model_references", "references"]

_WARPSTREAM_LATENCY = "https://docs.warpstream.com/warpstream/configuration/low-latency-clusters"
_WARPSTREAM_DEFAULT = "25 ms client linger, 250 ms Agent batch timeout (default), S3 Standard, Fundamentals tier"


@dataclass(frozen=True, slots=True)
class Reference:
    """One reference line.

    ``compare``: ``(workload, figure)`` pairs this value is a reference for (a ratio is computed for
    each present figure); ``plot``: ``(workload, latency series)`` CDFs it is drawn on (dashed).
    """

    key: str
    system: str
    claim: str
    value: float
    unit: str
    setting: str
    source: str
    compare: tuple[tuple[str, str], ...] = ()
    plot: tuple[tuple[str, str], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["compare"] = [list(c) for c in self.compare]
        out["plot"] = [list(p) for p in self.plot]
        return out


PUBLISHED: tuple[Reference, ...] = (
    Reference("warpstream_produce_p99", "WarpStream", "produce latency p99 500 ms", 500.0, "ms",
              _WARPSTREAM_DEFAULT, _WARPSTREAM_LATENCY,
              compare=(("ingest", "ack_s3_p99_ms"), ("e2e", "produce_p99_ms"), ("mixed", "produce_p99_ms")),
              plot=(("ingest", "ack=s3"), ("e2e", "produce"), ("mixed", "produce"))),
    Reference("warpstream_produce_p50", "WarpStream", "produce latency p50 250 ms", 250.0, "ms",
              _WARPSTREAM_DEFAULT, _WARPSTREAM_LATENCY,
              compare=(("ingest", "ack_s3_p50_ms"), ("e2e", "produce_p50_ms"), ("mixed", "produce_p50_ms"))),
    Reference("warpstream_e2e_p99", "WarpStream", "end-to-end latency p99 900 ms", 900.0, "ms",
              _WARPSTREAM_DEFAULT, _WARPSTREAM_LATENCY,
              compare=(("e2e", "e2e_p99_ms"),), plot=(("e2e", "e2e"),)),
    Reference("warpstream_e2e_p50", "WarpStream", "end-to-end latency p50 500 ms", 500.0, "ms",
              _WARPSTREAM_DEFAULT, _WARPSTREAM_LATENCY, compare=(("e2e", "e2e_p50_ms"),)),
    Reference("warpstream_produce_p99_blog", "WarpStream", "\"typically\" produce latency p99 400 ms", 400.0, "ms",
              "default configuration, S3 Standard",
              "https://www.warpstream.com/blog/the-art-of-being-lazy-log-lower-latency-and-higher-availability"
              "-with-delayed-sequencing"),
    Reference("warpstream_s3express_produce_p99", "WarpStream", "produce latency p99 < 150 ms", 150.0, "ms",
              "10 ms client linger, 50 ms Agent batch timeout, S3 Express One Zone", _WARPSTREAM_LATENCY),
    Reference("automq_s3wal_batch_interval", "AutoMQ", "S3 WAL commits a batch every 250 ms (or 8 MiB)", 250.0,
              "ms", "S3 WAL defaults: batchInterval=250 ms, maxBytesInBatch=8388608 bytes",
              "https://www.automq.com/docs/automq/configuration/object-storage-configuration",
              compare=(("ingest", "ack_s3_p50_ms"),), plot=(("ingest", "ack=s3"),)),
    Reference("automq_s3_put_4mib_p99", "AutoMQ", "PUT of a 4 MiB object to S3: p99 about 400 ms", 400.0, "ms",
              "their empirical data, AWS S3", "https://docs.automq.com/automq/configuration/performance-tuning-for-client",
              plot=(("ingest", "ack=s3"),)),
)


def model_references(params: SuiteParams, raw: Mapping[str, Any]) -> list[Reference]:
    """What the design implies for this run's parameters and raw limits (lines absent without the limits)."""
    out: list[Reference] = []
    setting = f"flush.interval.ms={params.flush_interval_ms}, flush.bytes={params.flush_bytes}, this run's raw limits"
    fsync_p50 = raw.get("fsync_p50_ms")
    if isinstance(fsync_p50, int | float) and fsync_p50 > 0:
        out.append(Reference("model_ack_wal_floor", "s3stream model", "ack=wal floor: one fsync (raw fsync p50)",
                             float(fsync_p50), "ms", setting, "benchmarks/suite/references.py",
                             compare=(("ingest", "ack_wal_p50_ms"),), plot=(("ingest", "ack=wal"),)))
    put_p50 = raw.get("put_p50_ms")
    if isinstance(put_p50, int | float) and put_p50 > 0:
        bound = params.flush_interval_ms + float(put_p50)
        out.append(Reference("model_ack_s3_bound", "s3stream model",
                             "ack=s3 bound when flushing by time: flush.interval.ms + raw PUT p50", bound, "ms",
                             setting, "benchmarks/suite/references.py",
                             compare=(("ingest", "ack_s3_p99_ms"),), plot=(("ingest", "ack=s3"),)))
    rate = params.flush_bytes / (params.flush_interval_ms / 1000.0) / 1e6 if params.flush_interval_ms > 0 else 0.0
    if rate > 0:
        out.append(Reference("model_flush_by_size_rate", "s3stream model",
                             f"above this ingest rate WAL objects are cut by size ({params.flush_bytes / MiB:g} MiB), "
                             "below it by time", rate, "MB/s", setting, "benchmarks/suite/references.py"))
    return out


def references(params: SuiteParams, raw: Mapping[str, Any]) -> list[Reference]:
    """Every reference line of a run: the published ones, then the model's."""
    return [*PUBLISHED, *model_references(params, raw)]
