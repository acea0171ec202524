"""Streamed seals: a segment larger than one upload part is read in chunks, encoded row group by row group
and uploaded part by part, on every backend; crashes and failed parts lose nothing; memory stays bounded.

The part size is the smallest valid ``segment.upload.part.bytes`` (5 MiB, S3's minimum) and the records
are incompressible, so a ~12 MiB segment takes three parts.
"""

from __future__ import annotations

import itertools
import math
import random
import tracemalloc
from pathlib import Path

import crc32c
import pyarrow as pa
import pytest

import s3stream
from s3stream import IdSource, Record
from s3stream.base.crashpoints import CrashPoints, SimulatedCrash
from s3stream.base.errors import S3StreamError
from s3stream.format.segment import writer as seg_format
from s3stream.manifest.model import SegmentRef
from s3stream.objectstore.local import LocalObjectStore
from s3stream.objectstore.protocol import ObjectStore
from s3stream.objectstore.s3 import S3ObjectStore
from s3stream.objectstore.url import open_object_store
from s3stream.testing import FaultRule, FaultyObjectStore, RecordingObjectStore

from .helpers import T0, abandon, open_mem, read_all

MiB = 1 << 20
PART = 5 * MiB
VALUE = 10_000
_BUCKETS = itertools.count()


def _values(n: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(VALUE) for _ in range(n)]


def _append(log: s3stream.PartitionLog, values: list[bytes], batch: int = 100) -> None:
    for i in range(0, len(values), batch):
        log.append([Record(b"k%d" % j, values[j], T0 + j) for j in range(i, min(i + batch, len(values)))])


def _open(url: str, tmp_path: Path, store: ObjectStore, **opts: object) -> s3stream.Store:
    return open_mem(url, tmp_path, object_store=store, segment_upload_part_bytes=PART, **opts)


def _sealed(log: s3stream.PartitionLog) -> list[SegmentRef]:
    return list(log.manifest().segments)


def _s3_url(endpoint: str) -> str:
    bucket = f"streamed-seal-{next(_BUCKETS)}"
    admin = S3ObjectStore(bucket, endpoint_url=endpoint, region="us-east-1")
    try:
        admin.ensure_bucket()
    finally:
        admin.close()
    return f"s3://{bucket}/pre?endpoint_url={endpoint}&region=us-east-1"


@pytest.fixture(params=["memory", "file", pytest.param("moto", marks=pytest.mark.s3)])
def url(request: pytest.FixtureRequest, mem_url: str, tmp_path: Path) -> str:
    if request.param == "memory":
        return mem_url
    if request.param == "file":
        return f"file://{tmp_path}/data"
    return _s3_url(request.getfixturevalue("moto_endpoint"))


def test_a_multi_part_segment_is_sealed_streamed(url: str, tmp_path: Path) -> None:
    values = _values(1200, seed=1)  # ~12 MB of incompressible records: three 5 MiB parts
    inner = open_object_store(url)
    recorder = RecordingObjectStore(inner)
    with _open(url, tmp_path, recorder) as store:
        store.create_topic("t", config={"segment.bytes": 256 * MiB})
        log = store.partition("t", 0)
        _append(log, values)
        store.flush()
        recorder.reset()
        log.roll()
        [ref] = _sealed(log)
        assert (ref.base_offset, ref.last_offset, ref.record_count) == (0, 1199, 1200)
    parts = math.ceil(ref.object_size / PART)
    assert parts == 3
    segment_puts = [size for op, key, size in recorder.log if op == "PUT" and key == ref.key]
    assert len(segment_puts) == parts + 2  # create, the parts, complete
    assert sum(segment_puts) == ref.object_size
    data = inner.get(ref.key)
    assert len(data) == ref.object_size and crc32c.crc32c(data) == ref.crc32c
    if url.startswith("s3://"):
        assert inner.head(ref.key).etag.strip('"').endswith(f"-{parts}")
    with open_mem(url, tmp_path, wal="reader") as reader:
        got = read_all(reader.partition("t", 0))
    assert [r.value for r in got] == values
    assert [r.offset for r in got] == list(range(1200))


def test_crash_after_a_streamed_segment_put_recovers(mem_url: str, tmp_path: Path) -> None:
    values = _values(1200, seed=2)
    cp = CrashPoints()
    store = _open(mem_url, tmp_path, open_object_store(mem_url), crash_points=cp)
    store.create_topic("t", config={"segment.bytes": 256 * MiB})
    log = store.partition("t", 0)
    _append(log, values)
    store.flush()
    cp.arm("seal.after_segment_put")
    with pytest.raises(SimulatedCrash):
        log.roll()
    segments = f"logs/{store.describe_topic('t')['topic_id']}/0/segments/"
    [orphan] = list(open_object_store(mem_url).list(segments))  # completed, then the process died
    assert _sealed(log) == []
    abandon(store)
    with _open(mem_url, tmp_path, open_object_store(mem_url)) as recovered:
        log = recovered.partition("t", 0)
        more = _values(10, seed=3)
        _append(log, more)
        log.roll()
        assert [r.value for r in read_all(log)] == values + more
        assert sum(s.record_count for s in _sealed(log)) == 1210
        assert orphan.key not in {s.key for s in _sealed(log)}  # an orphan for GC, never referenced
    with open_mem(mem_url, tmp_path, wal="reader") as reader:
        assert [r.value for r in read_all(reader.partition("t", 0))] == values + more


def test_a_failed_part_aborts_the_upload_and_the_seal_is_retried(mem_url: str, tmp_path: Path) -> None:
    values = _values(1200, seed=4)
    inner = open_object_store(mem_url)
    faulty = FaultyObjectStore(inner, ids=IdSource(15))  # its draws: 0.965 (the create passes), 0.012
    with _open(mem_url, tmp_path, faulty) as store:
        store.create_topic("t", config={"segment.bytes": 256 * MiB})
        segments = f"logs/{store.describe_topic('t')['topic_id']}/0/segments/"
        log = store.partition("t", 0)
        _append(log, values)
        store.flush()
        faulty.set_rules([FaultRule("put", segments, "error", rate=0.5, count=1)])  # fails part 1
        with pytest.raises(S3StreamError):
            log.roll()
        assert faulty.injected() == {"error": 1}
        assert list(inner.list(segments)) == []  # nothing half-written is visible
        faulty.set_rules([])
        log.roll()  # the pending seal again
        [ref] = _sealed(log)
        assert [e.key for e in inner.list(segments)] == [ref.key]
        assert [r.value for r in read_all(log)] == values


def test_sealing_a_large_segment_keeps_allocations_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 48 MB segment in 5 MiB parts: the seal's Python allocations (tracemalloc's exact peak) and Arrow's
    (the default pool, where the Parquet writer allocates, sampled at each of the encoder's ~600 writes to
    its sink, i.e. while its buffers are alive) stay near one part plus one row group, far below the
    segment. A seal that materializes the segment holds it twice: as one table and as one ``bytes``."""
    values = _values(4800, seed=6)
    segment_bytes = len(values) * VALUE
    samples: list[int] = []
    real_write = seg_format._Tap.write

    def sampled_write(self: seg_format._Tap, data: bytes | memoryview) -> int:
        samples.append(pa.total_allocated_bytes())
        return real_write(self, data)

    url = f"file://{tmp_path}/data"
    with _open(url, tmp_path, LocalObjectStore(tmp_path / "data")) as store:
        store.create_topic("t", config={"segment.bytes": 1 << 30})
        log = store.partition("t", 0)
        _append(log, values)
        store.flush()  # nothing left to upload: the roll below is the seal alone
        monkeypatch.setattr(seg_format._Tap, "write", sampled_write)
        arrow_before = pa.total_allocated_bytes()
        tracemalloc.start()
        try:
            log.roll()
            python_peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        arrow_peak = max(samples) - arrow_before
        [ref] = _sealed(log)
    assert ref.object_size > 9 * PART
    assert len(samples) > 100
    # measured: Python ~7 MiB (the part buffer, a row group leaving the encoder), Arrow ~4 MiB
    assert python_peak < 2 * PART, f"Python allocations peaked at {python_peak / MiB:.1f} MiB"
    assert arrow_peak < PART, f"Arrow allocations peaked at {arrow_peak / MiB:.1f} MiB"
    assert python_peak + arrow_peak < segment_bytes / 3
