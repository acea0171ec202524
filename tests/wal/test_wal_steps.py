"""WalWriter without threads (``threads=False``): the disk's work as steps, driven from one thread.

A simulation decides when a batch is written and when it is synced; acknowledgements then come in the caller's
thread, from :meth:`WalWriter.sync_step`, and a power loss between a write and its sync loses exactly the
unsynced entries.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path

import pytest

from tests.wal.wal_testkit import RecordingStorage, payload_for
from wal import MemoryWalStorage, WalError, WalWriter


def _steps(writer: WalWriter) -> int:
    done = 0
    while writer.step():
        done += 1
    return done


def test_nothing_happens_until_stepped(mem: MemoryWalStorage) -> None:
    before = set(threading.enumerate())
    writer = WalWriter(storage=mem, threads=False)
    try:
        assert not writer.threaded
        futures = [writer.append_async(payload_for(s)) for s in range(3)]
        assert writer.next_seq == 3 and writer.durable_seq_end == 0
        assert not any(f.done() for f in futures)
        assert writer.write_step()  # one writev of all three
        assert not any(f.done() for f in futures) and writer.durable_seq_end == 0
        assert not writer.write_step()  # nothing left to write
        assert writer.sync_step()
        assert [f.result(timeout=0) for f in futures] == [0, 1, 2]
        assert writer.durable_seq_end == 3
        assert not writer.step()
        assert set(threading.enumerate()) - before == set()
    finally:
        writer.close()


def test_at_most_syncs_in_flight_batches_await_their_fsync(mem: MemoryWalStorage) -> None:
    storage = RecordingStorage(mem)
    writer = WalWriter(storage=storage, threads=False, syncs_in_flight=2)
    try:
        futures: list[Future[int]] = []
        for s in range(3):
            futures.append(writer.append_async(payload_for(s)))
            writer.write_step()
        assert storage.appends == [1, 1]  # the third waits for a free fsync slot
        assert writer.sync_step()
        assert futures[0].done() and not futures[1].done()
        assert writer.write_step()
        assert _steps(writer) == 2
        assert [f.result(timeout=0) for f in futures] == [0, 1, 2]
    finally:
        writer.close()


def test_blocking_append_and_close_step_inline(tmp_path: Path) -> None:
    writer = WalWriter(tmp_path, threads=False, file_bytes=4096)
    assert [writer.append(payload_for(s, 900)) for s in range(10)] == list(range(10))  # rolls on the way
    late = writer.append_async(b"queued at close")
    writer.close()
    assert late.result(timeout=0) == 10
    reopened = WalWriter(tmp_path, threads=False)
    try:
        assert [e.seq for e in reopened.entries()] == list(range(11))
    finally:
        reopened.close()


def test_a_crash_between_write_and_sync_loses_only_the_unsynced_entries(mem: MemoryWalStorage) -> None:
    writer = WalWriter(storage=mem, threads=False)
    first = writer.append_async(b"synced")
    _steps(writer)
    assert first.result(timeout=0) == 0
    second = writer.append_async(b"written, not synced")
    assert writer.write_step()
    mem.crash(torn_tail=False)  # a torn tail may keep the whole unsynced frame (a disk that persisted it)
    assert not second.done()
    assert _steps(writer) == 1  # the dead disk refuses the fsync: the writer fails its pending entries
    with pytest.raises(WalError):
        second.result(timeout=0)
    recovered = WalWriter(storage=mem, threads=False)
    try:
        assert [e.payload for e in recovered.entries()] == [b"synced"]
    finally:
        recovered.close()


def test_a_failed_fsync_fails_the_writer_in_the_caller(mem: MemoryWalStorage) -> None:
    storage = RecordingStorage(mem)
    writer = WalWriter(storage=storage, threads=False)
    try:
        future = writer.append_async(b"x")
        assert writer.write_step()
        storage.fail.add("fsync")
        assert writer.sync_step()
        with pytest.raises(WalError):
            future.result(timeout=0)
        with pytest.raises(WalError):
            writer.append_async(b"after")
    finally:
        storage.fail.clear()
        writer.close()


def test_an_open_makes_what_it_recovered_durable_before_writing_after_it(mem: MemoryWalStorage) -> None:
    """Found by the simulator (tests/sim, seed 83): a writer that dies with an entry written but not synced (a
    process crash: the page cache keeps it) leaves it to the next writer, whose recovery reads it back; that one
    rolled to a new file without syncing it, so a power loss then cut the first file short with the second one
    after it: damage a crash does not explain, and the open was refused."""
    first = WalWriter(storage=mem, threads=False, lock=False, file_bytes=150)
    first.append_async(payload_for(0, 150))
    assert first.write_step()  # written, never synced: the process dies here
    second = WalWriter(storage=mem, threads=False, lock=False, file_bytes=150)  # rolls: its file is full
    assert [e.seq for e in second.entries()] == [0] and len(mem.list_files()) == 2
    mem.crash(torn_tail=False)  # power loss: every unsynced byte is gone
    third = WalWriter(storage=mem, threads=False)
    try:
        assert [e.payload for e in third.entries()] == [payload_for(0, 150)]
    finally:
        third.close()
