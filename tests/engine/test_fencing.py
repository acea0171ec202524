"""Fencing and takeover between stores sharing a bucket, reader-only stores, and ack=s3 visibility."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from s3stream import Fenced, Record
from s3stream.base.crashpoints import CrashPoints, SimulatedCrash
from s3stream.base.errors import S3StreamError

from .helpers import abandon, open_mem, read_all


def _vals(prefix: str, n: int, start: int = 0) -> list[Record]:
    return [Record(b"k%d" % (i % 3), f"{prefix}{i}".encode()) for i in range(start, start + n)]


@pytest.mark.parametrize("sealed_before", [False, True])
def test_takeover_fences_the_old_writer(mem_url: str, tmp_path: Path, sealed_before: bool) -> None:
    a = open_mem(mem_url, tmp_path, wal="a", flush_interval_ms=60_000)
    b = open_mem(mem_url, tmp_path, wal="b", flush_interval_ms=60_000)
    try:
        a.create_topic("t", partitions=2, config={"segment.bytes": 400})
        la = a.partition("t", 0)
        la.append(_vals("a", 4))
        if sealed_before:
            la.roll()
        la.append(_vals("a", 8, 4))  # size-triggered rolls too
        a.partition("t", 1).append(_vals("a1-", 2))
        a.flush()
        flushed = [r.value for r in read_all(la)]
        assert len(flushed) == 12

        lb = b.partition("t", 0)
        assert lb.log_end_offset == 12  # a reader sees A's flushed records before any takeover
        res = lb.append(_vals("b", 3))
        assert (res.base_offset, res.last_offset) == (12, 14)
        got = read_all(lb)
        assert [r.offset for r in got] == list(range(15))
        assert [r.value for r in got] == [*flushed, b"b0", b"b1", b"b2"]

        with pytest.raises(Fenced):  # A learns at its next PUT ...
            la.append(_vals("zombie", 1))
            a.flush()
        for _ in range(2):  # ... and acknowledges nothing more, on any partition
            with pytest.raises(S3StreamError):
                la.append(_vals("zombie", 1))
            with pytest.raises(S3StreamError):
                a.partition("t", 1).append(_vals("zombie", 1))
        with pytest.raises(Fenced):
            a.flush()

        lb.append(_vals("b", 2, 3))
        b.flush()
        with open_mem(mem_url, tmp_path, wal="c") as c:  # a reader-only store (walscan path)
            lc = c.partition("t", 0)
            assert [r.value for r in read_all(lc)] == [*flushed, b"b0", b"b1", b"b2", b"b3", b"b4"]
            assert lc.log_end_offset == 17
            assert [r.value for r in read_all(c.partition("t", 1))] == [b"a1-0", b"a1-1"]
            assert c.node_id is None
    finally:
        a.close()
        b.close()
    with open_mem(mem_url, tmp_path, wal="b") as b2:
        assert b2.partition("t", 0).log_end_offset == 17
        assert [r.value for r in read_all(b2.partition("t", 0))][12:] == [b"b0", b"b1", b"b2", b"b3", b"b4"]


def test_fenced_in_ack_s3_mode_raises_on_append(mem_url: str, tmp_path: Path) -> None:
    a = open_mem(mem_url, tmp_path, wal="a", ack="s3")
    b = open_mem(mem_url, tmp_path, wal="b", ack="s3")
    try:
        a.create_topic("t")
        la = a.partition("t", 0)
        la.append(_vals("a", 3))
        b.partition("t", 0).append(_vals("b", 1))
        with pytest.raises(Fenced):
            la.append(_vals("zombie", 1))
        with pytest.raises(Fenced):
            la.append(_vals("zombie", 1))
        assert [r.value for r in read_all(b.partition("t", 0))] == [b"a0", b"a1", b"a2", b"b0"]
    finally:
        a.close()
        b.close()


def test_ack_s3_is_visible_to_other_stores_at_once(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path, wal="w", ack="s3", flush_interval_ms=20) as writer, \
            open_mem(mem_url, tmp_path, wal="r") as reader:
        writer.create_topic("t", partitions=3)
        for i in range(5):
            p = i % 3
            res = writer.partition("t", p).append(_vals(f"p{p}-", 2, 2 * i))
            rlog = reader.partition("t", p)
            assert rlog.log_end_offset == res.last_offset + 1
            assert [r.value for r in rlog.read(res.base_offset)] == [f"p{p}-{2 * i}".encode(),
                                                                     f"p{p}-{2 * i + 1}".encode()]


def test_restarted_zombie_does_not_steal_back(mem_url: str, tmp_path: Path) -> None:
    """A fenced node restarting with its leftover WAL must not reorder or duplicate the new writer's data."""
    a = open_mem(mem_url, tmp_path, wal="a", flush_interval_ms=60_000)
    a.create_topic("t")
    la = a.partition("t", 0)
    la.append(_vals("a", 3))
    a.flush()
    la.append(_vals("lost", 2))  # acknowledged in A's local WAL only
    b = open_mem(mem_url, tmp_path, wal="b")
    b.partition("t", 0).append(_vals("b", 1))
    b.flush()
    abandon(a)
    with open_mem(mem_url, tmp_path, wal="a") as a2:  # A's process restarts and replays its WAL
        got = [r.value for r in read_all(a2.partition("t", 0))]
        assert got[:4] == [b"a0", b"a1", b"a2", b"b0"]
        assert len(got) == len(set(got))
    b.close()


@pytest.mark.parametrize("segment_bytes", [300, 1 << 20])
def test_takeover_races_a_live_writer(mem_url: str, tmp_path: Path, segment_bytes: int) -> None:
    """B takes over while A keeps appending (ack=s3): every append A acknowledged survives at its offset."""
    a = open_mem(mem_url, tmp_path, wal="a", ack="s3", flush_interval_ms=2, wal_fsync=False)
    b = open_mem(mem_url, tmp_path, wal="b", ack="s3", flush_interval_ms=2, wal_fsync=False)
    try:
        a.create_topic("t", config={"segment.bytes": segment_bytes})
        la = a.partition("t", 0)
        acked: list[tuple[int, bytes]] = []
        failures: list[BaseException] = []

        def zombie() -> None:
            i = 0
            try:
                while True:
                    value = b"a%d" % i
                    acked.append((la.append([Record(b"k", value)]).base_offset, value))
                    i += 1
            except S3StreamError as exc:
                failures.append(exc)

        t = threading.Thread(target=zombie, daemon=True)
        t.start()
        deadline = time.monotonic() + 5
        while len(acked) < 20 and time.monotonic() < deadline:
            time.sleep(0.005)
        res = b.partition("t", 0).append([Record(b"k", b"b0")])
        t.join(10)
        assert not t.is_alive() and failures and isinstance(failures[0], Fenced)
        got = read_all(b.partition("t", 0))
        by_offset = {r.offset: r.value for r in got}
        assert [r.offset for r in got] == list(range(len(got)))
        for offset, value in acked:
            assert by_offset[offset] == value
        assert res.base_offset == len(got) - 1 and by_offset[res.base_offset] == b"b0"
        assert res.base_offset >= len(acked)
        assert len(set(by_offset.values())) == len(got)
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("point", ["seal.after_segment_put", "manifest.before_put", "manifest.after_put"])
@pytest.mark.parametrize("restart", ["same-node", "third-node"])
def test_crash_during_takeover(mem_url: str, tmp_path: Path, point: str, restart: str) -> None:
    with open_mem(mem_url, tmp_path, wal="a", flush_interval_ms=60_000) as a:
        a.create_topic("t", config={"segment.bytes": 300})
        la = a.partition("t", 0)
        for i in range(6):
            la.append(_vals("a", 2, 2 * i))
        a.flush()
        flushed = [r.value for r in read_all(la)]
    cp = CrashPoints()
    b = open_mem(mem_url, tmp_path, wal="b", crash_points=cp)
    cp.arm(point)
    with pytest.raises(SimulatedCrash):
        b.partition("t", 0).append(_vals("b", 1))
    abandon(b)
    with open_mem(mem_url, tmp_path, wal="b" if restart == "same-node" else "c") as c:
        lc = c.partition("t", 0)
        assert [r.value for r in read_all(lc)] == flushed
        assert lc.append(_vals("c", 1)).base_offset == len(flushed)
        assert [r.value for r in read_all(lc)] == [*flushed, b"c0"]
    with open_mem(mem_url, tmp_path, wal="reader") as reader:
        assert [r.value for r in read_all(reader.partition("t", 0))] == [*flushed, b"c0"]
