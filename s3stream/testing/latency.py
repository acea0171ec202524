"""A latency-modelling ObjectStore wrapper: replays realistic S3 request latency on the injected clock.

Model (per request): ``delay = first_byte + size / bandwidth``. The first-byte latency of each
operation kind is a **lognormal** distribution fixed by its median (p50) and 99th percentile (p99);
transfer time uses a per-connection bandwidth for GET and PUT (bytes read or written). The wrapper
sleeps *before* delegating a write (the object becomes visible when the PUT "returns", never earlier
than a real client could observe it) and *after* a read. LIST pays one first-byte latency per page
of 1000 keys (S3's page size). A streamed upload larger than one part pays one PUT per request it stands
for (create, each part with its transfer, complete); a smaller one is one PUT.

Everything is seeded: samples come from the injected :class:`IdSource`, sleeps go through the injected
:class:`Clock`, so a benchmark or simulation with a fixed seed is reproducible. ``time_scale`` shrinks
every delay (e.g. 0.01 in tests) while keeping the shape of the distribution.

Sources of the numbers in :data:`LATENCY_PROFILES` (as of 2024-2025), and what is our assumption:

* S3 Standard, first-byte latency: AWS, *Best Practices Design Patterns: Optimizing Amazon S3
  Performance*, "Timeouts and Retries for Latency-Sensitive Applications"
  (https://docs.aws.amazon.com/whitepapers/latest/s3-optimizing-performance-best-practices/timeouts-and-retries-for-latency-sensitive-applications.html):
  for requests under 512 KB "median latencies are often in the tens of milliseconds", with retries
  advised after 2 s; and the S3 User Guide, *Performance design patterns*
  (https://docs.aws.amazon.com/AmazonS3/latest/userguide/optimizing-performance-design-patterns.html):
  consistent small-object and first-byte latencies of roughly 100-200 ms for latency-sensitive
  applications, which we take as the p99. The PUT medians above the GET ones are our assumption (a write
  is acknowledged only once stored redundantly).
* S3 Standard, bandwidth: the S3 User Guide, *Performance guidelines*, "Scale storage connections
  horizontally" (https://docs.aws.amazon.com/AmazonS3/latest/userguide/optimizing-performance-guidelines.html):
  one connection per 85-90 MB/s of desired throughput, hence 90 MB/s per GET connection. 60 MB/s per PUT
  connection is our assumption (uploads also carry signing and checksums), not an AWS figure.
* S3 Express One Zone: the S3 User Guide, *S3 Express One Zone*
  (https://docs.aws.amazon.com/AmazonS3/latest/userguide/s3-express-one-zone.html): "consistent
  single-digit millisecond" request latency, up to 10x faster than S3 Standard; the 100 MB/s per
  connection is our assumption.
* LAN (a MinIO or SeaweedFS server on the same 10 GbE network): our assumption, not a published
  figure: ~1 ms round trips (network plus the server's request handling) and bandwidth below 10 GbE's
  line rate of 1250 MB/s, bounded by the server's disks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from statistics import NormalDist
from typing import TypeVar

from s3stream.base.clock import Clock, SystemClock
from s3stream.base.errors import InvalidRequest, ObjectNotFound
from s3stream.base.ids import IdSource
from s3stream.objectstore.protocol import DEFAULT_PART_BYTES, Body, ByteRange, ListEntry, ObjectMeta, ObjectStore
from s3stream.objectstore.upload import ForwardedUpload

__all__ = ["LATENCY_PROFILES", "LatencyDist", "LatencyObjectStore", "LatencyProfile"]

T = TypeVar("T")

_Z99 = NormalDist().inv_cdf(0.99)  # 2.326: p99 of a standard normal
_STD_NORMAL = NormalDist()
_LIST_PAGE = 1000
_MB = 1_000_000


@dataclass(frozen=True, slots=True)
class LatencyDist:
    """A lognormal first-byte latency given by its median and 99th percentile, in milliseconds."""

    p50_ms: float
    p99_ms: float

    def __post_init__(self) -> None:
        if not 0 < self.p50_ms <= self.p99_ms:
            raise ValueError(f"LatencyDist needs 0 < p50 <= p99, got {self}")

    def quantile_ms(self, q: float) -> float:
        """The latency at quantile ``q`` in (0, 1)."""
        sigma = math.log(self.p99_ms / self.p50_ms) / _Z99
        return self.p50_ms * math.exp(sigma * _STD_NORMAL.inv_cdf(q))

    def sample_ms(self, ids: IdSource) -> float:
        """One sample, drawn by inverting the CDF at a seeded uniform (clamped away from 0 and 1)."""
        return self.quantile_ms(min(max(ids.random(), 1e-9), 1 - 1e-9))


@dataclass(frozen=True, slots=True)
class LatencyProfile:
    """Per-operation first-byte latency plus per-connection transfer bandwidth."""

    name: str
    get: LatencyDist
    put: LatencyDist
    head: LatencyDist
    list: LatencyDist
    delete: LatencyDist
    get_mb_per_s: float
    put_mb_per_s: float

    def delay_s(self, op: str, nbytes: int, ids: IdSource) -> float:
        """Seconds one ``op`` request moving ``nbytes`` takes (first byte plus transfer)."""
        dist: LatencyDist = getattr(self, op)
        transfer_s = 0.0
        if op == "get":
            transfer_s = nbytes / (self.get_mb_per_s * _MB)
        elif op == "put":
            transfer_s = nbytes / (self.put_mb_per_s * _MB)
        return dist.sample_ms(ids) / 1000.0 + transfer_s


LATENCY_PROFILES: dict[str, LatencyProfile] = {
    # S3 Standard: first byte p50 20-30 ms, PUT p99 ~200 ms, tails 100-200 ms (AWS performance
    # guidelines); ~90 MB/s GET and ~60 MB/s PUT per connection.
    "s3-standard": LatencyProfile(
        "s3-standard",
        get=LatencyDist(25, 150), put=LatencyDist(45, 200), head=LatencyDist(20, 100),
        list=LatencyDist(40, 200), delete=LatencyDist(25, 120),
        get_mb_per_s=90, put_mb_per_s=60),
    # S3 Express One Zone: single-digit ms (AWS product page: "up to 10x faster than Standard").
    "s3-express": LatencyProfile(
        "s3-express",
        get=LatencyDist(4, 10), put=LatencyDist(6, 15), head=LatencyDist(3, 8),
        list=LatencyDist(6, 20), delete=LatencyDist(4, 10),
        get_mb_per_s=100, put_mb_per_s=100),
    # A MinIO/SeaweedFS server on the local network: ~1 ms round trips.
    "lan": LatencyProfile(
        "lan",
        get=LatencyDist(1, 5), put=LatencyDist(1.5, 8), head=LatencyDist(0.8, 4),
        list=LatencyDist(2, 10), delete=LatencyDist(1, 5),
        get_mb_per_s=1000, put_mb_per_s=500),
}


class LatencyObjectStore:
    """Delegates to ``inner`` after (writes: before) sleeping a seeded, profile-shaped delay."""

    def __init__(self, inner: ObjectStore, profile: LatencyProfile | str, *, clock: Clock | None = None,
                 ids: IdSource | None = None, time_scale: float = 1.0) -> None:
        if isinstance(profile, str):
            if profile not in LATENCY_PROFILES:
                known = sorted(LATENCY_PROFILES)
                raise InvalidRequest(f"unknown latency profile {profile!r}; known: {known}")
            profile = LATENCY_PROFILES[profile]
        if time_scale < 0:
            raise InvalidRequest("time_scale must be >= 0")
        self._inner = inner
        self._profile = profile
        self._clock = clock or SystemClock()
        self._ids = ids or IdSource(0)
        self._scale = time_scale

    @property
    def profile(self) -> LatencyProfile:
        """The latency profile in use."""
        return self._profile

    @property
    def url(self) -> str:
        return self._inner.url

    def _pause(self, op: str, nbytes: int = 0) -> None:
        self._clock.sleep(self._profile.delay_s(op, nbytes, self._ids) * self._scale)

    def put(self, key: str, data: bytes | bytearray | memoryview, *, if_none_match: bool = False,
            if_match: str | None = None) -> ObjectMeta:
        self._pause("put", memoryview(data).nbytes)
        return self._inner.put(key, data, if_none_match=if_none_match, if_match=if_match)

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        return self._paced_get(lambda: self._inner.get(key, byte_range))

    def get_view(self, key: str, byte_range: ByteRange | None = None) -> memoryview:
        return self._paced_get(lambda: self._inner.get_view(key, byte_range))

    def _paced_get(self, get: Callable[[], Body]) -> Body:
        try:
            data = get()
        except ObjectNotFound:
            self._pause("get")  # a 404 costs a round trip too (manifest probes end with one)
            raise
        self._pause("get", len(data))
        return data

    def head(self, key: str) -> ObjectMeta:
        try:
            meta = self._inner.head(key)
        finally:
            self._pause("head")
        return meta

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ListEntry]:
        return self._paced_list(self._inner.list(prefix, start_after=start_after))

    def _paced_list(self, entries: Iterator[ListEntry]) -> Iterator[ListEntry]:
        self._pause("list")
        for index, entry in enumerate(entries):
            if index and index % _LIST_PAGE == 0:
                self._pause("list")  # the next page is one more request
            yield entry

    def delete(self, key: str) -> None:
        self._pause("delete")
        self._inner.delete(key)

    def open_upload(self, key: str, *, part_bytes: int = DEFAULT_PART_BYTES) -> ForwardedUpload:
        return ForwardedUpload(key, part_bytes, put=lambda data: self.put(key, data),
                               inner=self._inner.open_upload(key, part_bytes=part_bytes), request=self._upload_request)

    def _upload_request(self, key: str, kind: str, nbytes: int, fn: Callable[[], T]) -> T:
        """Each request of a multipart upload pays a PUT's first byte plus its transfer, before it is sent."""
        if kind == "abort":
            self._pause("delete")
        else:
            if kind == "complete":
                self._pause("put", nbytes)  # the last part
            self._pause("put", nbytes if kind == "part" else 0)
        return fn()

    def close(self) -> None:
        self._inner.close()
