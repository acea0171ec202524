"""Test and benchmark kit shipped with the package (like ``zarr.testing``).

* :mod:`~s3stream.testing.latency`: :class:`LatencyObjectStore` replays S3 latency distributions;
* :mod:`~s3stream.testing.faults`: :class:`FaultyObjectStore` injects seeded S3 failures;
* :mod:`~s3stream.objectstore.recording`: :class:`RecordingObjectStore` counts requests and bytes;
* :mod:`~s3stream.testing.contract`: ``ObjectStoreContract``, the suite every backend passes
  (imports pytest, so it is not re-exported here);
* :mod:`~s3stream.apps.servers`: local moto and SeaweedFS servers for tests (not re-exported:
  it imports moto lazily and starts processes).

The wrappers implement the :class:`~s3stream.objectstore.protocol.ObjectStore` protocol and delegate,
so they stack: ``RecordingObjectStore(FaultyObjectStore(LatencyObjectStore(store, "s3-standard")))``.
"""

from s3stream.objectstore.recording import RecordingObjectStore
from s3stream.testing.faults import FaultKind, FaultRule, FaultyObjectStore
from s3stream.testing.latency import LATENCY_PROFILES, LatencyDist, LatencyObjectStore, LatencyProfile

__all__ = [
    "LATENCY_PROFILES",
    "FaultKind",
    "FaultRule",
    "FaultyObjectStore",
    "LatencyDist",
    "LatencyObjectStore",
    "LatencyProfile",
    "RecordingObjectStore",
]
