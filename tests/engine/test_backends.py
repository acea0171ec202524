"""The engine against every backend: a compact append/roll/read/reopen/takeover scenario.

file:// runs always (sealing in threads and in worker processes); moto and SeaweedFS use the session
servers of tests/conftest.py (marked ``s3``) and seal in worker processes (``seal.workers=auto``).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

import s3stream
from s3stream import ManualClock, Record
from s3stream.objectstore.s3 import S3ObjectStore

from .helpers import T0, read_all

_BUCKETS = itertools.count()


def _scenario(url: str, tmp_path: Path, **opts: Any) -> None:
    opts.setdefault("probe", False)

    def open_(wal: str, **more: Any) -> s3stream.Store:
        return s3stream.open_store(url, clock=ManualClock(T0), wal_dir=str(tmp_path / wal), flush_interval_ms=50,
                                   **{**opts, **more})

    size = Record(b"k00", b"x" * 80).size_bytes
    expected: list[bytes] = []
    with open_("a") as a:
        a.create_topic("t", partitions=2, config={"segment.bytes": 4 * size})
        log = a.partition("t", 0)
        for i in range(10):
            value = b"x" * 78 + b"%02d" % i
            assert log.append([Record(b"k%02d" % i, value)]).base_offset == i
            expected.append(value)
        log.roll()
        a.partition("t", 1).append([Record(b"one", b"1")])
        assert [r.value for r in read_all(log)] == expected
        segs = log.segments()
        assert [(s.base_offset, s.last_offset) for s in segs if s.sealed] == [(0, 3), (4, 7), (8, 9)]
        log.append([Record(b"tail", b"unsealed")])
        expected.append(b"unsealed")
    with open_("a") as again:  # restart: same WAL directory
        log = again.partition("t", 0)
        assert log.log_end_offset == 11
        got = read_all(log)
        assert [r.value for r in got] == expected and [r.offset for r in got] == list(range(11))
        assert [r.offset for r in log.read(5, max_records=2)] == [5, 6]
        assert log.offset_for_timestamp(T0) == 0
    with open_("b") as b:  # another node takes over
        log = b.partition("t", 0)
        assert log.append([Record(b"b", b"from-b")]).base_offset == 11
        expected.append(b"from-b")
        assert [r.value for r in read_all(log)] == expected
        assert [r.value for r in b.partition("t", 1).read(0)] == [b"1"]
    with open_("c") as reader:
        assert [r.value for r in read_all(reader.partition("t", 0))] == expected
        assert reader.list_topics() == ["t"]


@pytest.mark.parametrize("seal_workers", ["thread", "process"])
def test_file_backend(tmp_path: Path, seal_workers: str) -> None:
    _scenario(f"file://{tmp_path}/data", tmp_path, probe=True, seal_workers=seal_workers)


def _s3_url(endpoint: str) -> str:
    bucket = f"engine-{next(_BUCKETS)}"
    admin = S3ObjectStore(bucket, endpoint_url=endpoint, region="us-east-1")
    try:
        admin.ensure_bucket()
    finally:
        admin.close()
    return f"s3://{bucket}/pre/fix?endpoint_url={endpoint}&region=us-east-1"


@pytest.mark.s3
def test_moto_backend(moto_endpoint: str, tmp_path: Path) -> None:
    _scenario(_s3_url(moto_endpoint), tmp_path)


@pytest.mark.s3
@pytest.mark.seaweedfs
def test_seaweedfs_backend(seaweedfs_endpoint: str, tmp_path: Path) -> None:
    _scenario(_s3_url(seaweedfs_endpoint), tmp_path, probe=True)
