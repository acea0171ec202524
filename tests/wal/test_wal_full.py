"""A full disk stops the writer with WalFull; resume() recovers in place once space returns. Other
failures (an fsync, an I/O error) stay permanent."""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.wal.wal_testkit import WAIT_S, RecordingStorage, payload_for
from wal import MemoryWalStorage, WalEntry, WalError, WalFull, WalWriter
from wal import file_storage as wal_storage


def test_no_space_at_a_write_stops_the_writer_until_resume(mem: MemoryWalStorage) -> None:
    storage = RecordingStorage(mem)
    writer = WalWriter(storage=storage)
    assert writer.append(b"acked") == 0
    storage.fail, storage.fail_errno = {"append"}, errno.ENOSPC
    future = writer.append_async(b"refused")
    with pytest.raises(WalFull, match="write failed") as caught:
        future.result(WAIT_S)
    assert isinstance(caught.value.__cause__, OSError) and caught.value.__cause__.errno == errno.ENOSPC
    with pytest.raises(WalFull, match="no space left; resume"):
        writer.append(b"refused too")
    writer.resume()  # still full: the writer takes appends, and the next write stops it again
    with pytest.raises(WalFull):
        writer.append(b"still full")
    storage.fail = set()  # space returns
    writer.resume()
    assert writer.append(b"after") == 1  # the failed appends' seqs are given again
    writer.resume()  # running: a no-op
    assert [(e.seq, e.payload) for e in writer.entries()] == [(0, b"acked"), (1, b"after")]
    writer.close()
    with WalWriter(storage=mem) as again:
        assert list(again.entries()) == [WalEntry(0, b"acked"), WalEntry(1, b"after")]


def test_no_space_for_a_new_file_is_resumable(mem: MemoryWalStorage) -> None:
    storage = RecordingStorage(mem)
    writer = WalWriter(storage=storage, file_bytes=200)
    writer.append(payload_for(0, 150))
    storage.fail, storage.fail_errno = {"create"}, errno.EDQUOT
    with pytest.raises(WalFull):
        writer.append(payload_for(1, 150))  # needs a new file
    storage.fail = set()
    writer.resume()
    assert writer.append(payload_for(1, 150)) == 1
    assert [e.seq for e in writer.entries()] == [0, 1]
    writer.close()


@pytest.mark.parametrize(("op", "code"), [("append", errno.EIO), ("fsync", errno.ENOSPC), ("fsync", errno.EIO)])
def test_other_failures_cannot_be_resumed(mem: MemoryWalStorage, op: str, code: int) -> None:
    storage = RecordingStorage(mem)
    writer = WalWriter(storage=storage)
    writer.append(b"acked")
    storage.fail, storage.fail_errno = {op}, code
    with pytest.raises(WalError) as caught:
        writer.append(b"refused")
    assert not isinstance(caught.value, WalFull)  # after a failed fsync the durable contents are unknown
    storage.fail = set()
    with pytest.raises(WalError, match="must be reopened"):
        writer.resume()
    writer.close()
    with WalWriter(storage=mem) as again:
        assert next(e.payload for e in again.entries()) == b"acked"


def test_a_write_cut_short_by_a_full_disk_is_recovered_in_place(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    full = {"on": False}
    real_pwritev = os.pwritev

    def pwritev(fd: int, buffers: Sequence[Any], offset: int) -> int:
        if full["on"]:  # a short write, then nothing: as a file system running out of blocks does
            data = b"".join(bytes(b) for b in buffers)
            os.pwrite(fd, data[: len(data) // 2 + 3], offset)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_pwritev(fd, buffers, offset)

    monkeypatch.setattr(wal_storage.os, "pwritev", pwritev)
    writer = WalWriter(tmp_path)
    for seq in range(3):
        writer.append(payload_for(seq))
    full["on"] = True
    futures = [writer.append_async(payload_for(100 + i)) for i in range(4)]
    for future in futures:
        with pytest.raises(WalFull):
            future.result(WAIT_S)
    full["on"] = False
    writer.resume()
    # whole frames of the failed write may survive (their outcome is unknown, as after a crash); no other
    kept = [e.payload for e in writer.entries()]
    assert kept[:3] == [payload_for(s) for s in range(3)]
    assert all(p == payload_for(100 + i) for i, p in enumerate(kept[3:]))
    seq = writer.append(b"after")
    assert seq == len(kept)
    writer.close()
    with WalWriter(tmp_path) as again:
        assert [e.payload for e in again.entries()] == [*kept, b"after"]


def test_resume_after_close_raises(mem: MemoryWalStorage) -> None:
    writer = WalWriter(storage=mem)
    writer.close()
    with pytest.raises(WalError, match="closed"):
        writer.resume()


def test_acknowledged_entries_survive_full_disks_and_resumes_under_concurrent_appends(
        mem: MemoryWalStorage) -> None:
    import threading

    storage = RecordingStorage(mem)
    storage.fail_errno = errno.ENOSPC
    writer = WalWriter(storage=storage, file_bytes=2000)
    acked: dict[int, bytes] = {}
    mu = threading.Lock()
    stop = threading.Event()

    def appender(tid: int) -> None:
        n = 0
        while not stop.is_set():
            payload = b"t%d-%d" % (tid, n)
            n += 1
            try:
                seq = writer.append(payload)
            except WalFull:
                continue
            with mu:
                assert seq not in acked
                acked[seq] = payload

    threads = [threading.Thread(target=appender, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for round_ in range(30):
        storage.fail = {"append"} if round_ % 2 == 0 else set()
        writer.resume()
        threading.Event().wait(0.005)
    storage.fail = set()
    writer.resume()
    stop.set()
    for t in threads:
        t.join(WAIT_S)
    writer.close()
    with WalWriter(storage=mem) as again:
        entries = {e.seq: e.payload for e in again.entries()}
    assert sorted(entries) == list(range(len(entries)))  # dense
    assert len(acked) > 0
    for seq, payload in acked.items():
        assert entries[seq] == payload  # every acknowledged entry, at the seq it was given
