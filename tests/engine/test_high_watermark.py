"""PartitionLog.high_watermark: the end of what a crash of the process cannot lose, and its watchers."""

from __future__ import annotations

import threading
from pathlib import Path

import s3stream
from s3stream import Record


def test_high_watermark_follows_fsync_and_wakes_watchers(tmp_path: Path) -> None:
    with s3stream.open_store(f"file://{tmp_path / 's'}", wal_dir=str(tmp_path / "wal")) as store:
        store.create_topic("t")
        plog = store.partition("t", 0)
        assert plog.high_watermark == 0
        woke = threading.Event()
        stop = plog.watch(woke.set)
        result = plog.append([Record(b"k", b"v")] * 3, ack="wal")
        assert plog.high_watermark == result.last_offset + 1 == plog.log_end_offset
        assert woke.wait(5)
        stop()
        woke.clear()
        plog.append([Record(b"k", b"v")], ack="wal")
        assert not woke.wait(0.2)  # stopped watching
        assert plog.high_watermark == 4


def test_high_watermark_after_reopen_is_the_log_end(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 's'}"
    with s3stream.open_store(url, wal_dir=str(tmp_path / "wal")) as store:
        store.create_topic("t")
        store.partition("t", 0).append([Record(None, b"v")] * 5)
    with s3stream.open_store(url, wal_dir=str(tmp_path / "wal")) as store:
        plog = store.partition("t", 0)
        assert plog.high_watermark == plog.log_end_offset == 5
