"""WalWriter: seqs, group commit, rolling, trim, entries, close and failure semantics."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

import wal.writer
from tests.wal.wal_testkit import WAIT_S, RecordingStorage, payload_for
from wal import FileWalStorage, MemoryWalStorage, WalClosed, WalEntry, WalError, WalWriter, decode_frames
from wal.frame import FILE_HEADER_SIZE, FRAME_HEADER_SIZE, decode_file_header

MakeWriter = Callable[..., WalWriter]


def log_files(path: Path) -> list[Path]:
    return sorted(path.glob("*.log"))


def start_gated(storage: RecordingStorage, writer: WalWriter) -> threading.Event:
    """Block the syncer inside the fsync of one in-flight entry; returns the gate to open."""
    gate = threading.Event()
    storage.gate = gate
    storage.in_fsync.clear()
    writer.append_async(b"in flight")
    assert storage.in_fsync.wait(WAIT_S)
    return gate


# -- seqs and durability ---------------------------------------------------------------------------


def test_seqs_are_consecutive_from_zero_and_entries_are_on_disk(tmp_path: Path, make_writer: MakeWriter) -> None:
    writer = make_writer(tmp_path)
    assert [writer.append(payload_for(s)) for s in range(5)] == [0, 1, 2, 3, 4]
    assert writer.next_seq == 5 and writer.durable_seq_end == 5
    (log,) = log_files(tmp_path)
    data = log.read_bytes()  # read behind the writer's back: the bytes are in the file
    assert decode_file_header(data, str(log)) == 0
    entries, _ = decode_frames(data[FILE_HEADER_SIZE:], str(log), first_seq=0, strict=True)
    assert entries == [WalEntry(s, payload_for(s)) for s in range(5)]
    assert writer.size_bytes == len(data)


def test_bytes_like_payloads_are_copied_at_append(mem: MemoryWalStorage, make_writer: MakeWriter) -> None:
    writer = make_writer(storage=mem)
    buf = bytearray(b"original")
    future = writer.append_async(buf)
    buf[:] = b"mutated!"
    assert future.result(WAIT_S) == 0
    writer.append(memoryview(b"view"))
    assert [e.payload for e in writer.entries()] == [b"original", b"view"]


def test_payload_size_guard(mem: MemoryWalStorage, make_writer: MakeWriter, monkeypatch: pytest.MonkeyPatch) -> None:
    writer = make_writer(storage=mem)
    monkeypatch.setattr(wal.writer, "MAX_PAYLOAD_BYTES", 10)
    with pytest.raises(WalError, match="exceeds the 10-byte limit"):
        writer.append(b"x" * 11)
    assert writer.append(b"x" * 10) == 0  # the writer is still usable and no seq was consumed


# -- group commit ----------------------------------------------------------------------------------


def test_many_threads_get_unique_consecutive_seqs_with_one_fsync_per_batch(
    tmp_path: Path, make_writer: MakeWriter
) -> None:
    storage = RecordingStorage(FileWalStorage(tmp_path))
    writer = make_writer(storage=storage)
    threads, per_thread = 16, 40
    results: dict[int, list[int]] = {}

    def work(tid: int) -> None:
        results[tid] = [writer.append(f"t{tid}-{i}".encode()) for i in range(per_thread)]

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(WAIT_S)
    seqs = sorted(s for r in results.values() for s in r)
    assert seqs == list(range(threads * per_thread))
    assert all(r == sorted(r) for r in results.values())  # each thread's appends keep their order
    by_seq = {e.seq: e.payload for e in writer.entries()}
    assert all(by_seq[s] == f"t{t}-{i}".encode() for t, r in results.items() for i, s in enumerate(r))
    assert storage.fsyncs == len(storage.appends) + 1  # exactly one fsync per written batch (+1: the open's)
    assert sum(storage.appends) == threads * per_thread


@pytest.mark.parametrize("in_flight", [1, 2])
def test_appends_queued_behind_the_fsyncs_in_flight_share_the_next_one(
    mem: MemoryWalStorage, make_writer: MakeWriter, in_flight: int
) -> None:
    storage = RecordingStorage(mem)
    writer = make_writer(storage=storage, syncs_in_flight=in_flight)
    gate = start_gated(storage, writer)
    if in_flight == 2:  # a second append is written and fsynced at once, beside the gated one
        second = writer.append_async(b"second")
        while storage.fsyncs_started < 3:  # (the first: the open's)
            threading.Event().wait(0.001)
        assert not second.done()
    blocked = 12
    workers = [threading.Thread(target=writer.append, args=(payload_for(i),)) for i in range(blocked)]
    for t in workers:
        t.start()
    futures = [writer.append_async(b"async") for _ in range(5)]
    first = in_flight + blocked
    while writer.next_seq < first + 5:  # every appender has queued its entry
        threading.Event().wait(0.001)
    gate.set()
    for t in workers:
        t.join(WAIT_S)
    assert [f.result(WAIT_S) for f in futures] == list(range(first, first + 5))
    assert storage.appends == [1] * in_flight + [blocked + 5]
    assert storage.fsyncs == in_flight + 2  # (+1: the open's)


@pytest.mark.parametrize("in_flight", [1, 2])
def test_max_batch_bytes_caps_a_batch(mem: MemoryWalStorage, make_writer: MakeWriter, in_flight: int) -> None:
    storage = RecordingStorage(mem)
    frame = FRAME_HEADER_SIZE + 30
    writer = make_writer(storage=storage, max_batch_bytes=3 * frame, syncs_in_flight=in_flight)
    gate = start_gated(storage, writer)
    futures = [writer.append_async(b"p" * 30) for _ in range(7)]
    big = writer.append_async(b"B" * (5 * frame))  # larger than a batch: goes alone
    gate.set()
    assert [f.result(WAIT_S) for f in futures] == list(range(1, 8))
    assert big.result(WAIT_S) == 8
    assert storage.appends[0] == 1 and sum(storage.appends) == 9
    assert max(storage.appends[1:-1]) <= 3 and storage.appends[-1] == 1
    if in_flight == 1:  # everything queued behind the one fsync, cut by the limit
        assert storage.appends == [1, 3, 3, 1, 1]


def test_a_later_fsync_publishes_every_batch_written_before_it(mem: MemoryWalStorage) -> None:
    """Two fsyncs in flight: the second returning first makes the first batch durable too (it covers
    every byte written before it started), and nothing is published before its bytes are synced."""
    storage = RecordingStorage(mem)
    order: list[str] = []
    first_gate, second_gate = threading.Event(), threading.Event()
    calls = 0
    inner_fsync = storage.fsync

    def fsync(name: str) -> None:
        nonlocal calls
        calls += 1
        mine = calls
        (first_gate if mine == 1 else second_gate).wait(WAIT_S)
        inner_fsync(name)
        order.append(f"fsync{mine}")

    with WalWriter(storage=storage, syncs_in_flight=2) as writer:
        storage.fsync = fsync  # type: ignore[method-assign]  # (after the open's own fsync)
        a = writer.append_async(b"a")
        while calls < 1:
            threading.Event().wait(0.001)
        b = writer.append_async(b"b")
        while calls < 2:
            threading.Event().wait(0.001)
        assert writer.durable_seq_end == 0 and not a.done() and not b.done()
        second_gate.set()  # the later fsync returns first: both batches are durable now
        assert b.result(WAIT_S) == 1 and a.result(WAIT_S) == 0
        assert writer.durable_seq_end == 2 and order == ["fsync2"]
        assert [e.payload for e in writer.entries()] == [b"a", b"b"]
        first_gate.set()
    assert order == ["fsync2", "fsync1"]


def test_append_async_resolves_in_seq_order(mem: MemoryWalStorage, make_writer: MakeWriter) -> None:
    writer = make_writer(storage=mem)
    order: list[int] = []
    futures = [writer.append_async(payload_for(i)) for i in range(50)]
    for f in futures:
        f.add_done_callback(lambda f: order.append(f.result()))
    assert [f.result(WAIT_S) for f in futures] == list(range(50))
    assert sorted(order) == list(range(50))
    assert not futures[0].cancel()  # a queued write cannot be taken back


def test_blocking_calls_from_a_syncer_callback_are_refused(mem: MemoryWalStorage, make_writer: MakeWriter) -> None:
    storage = RecordingStorage(mem)
    writer = make_writer(storage=storage)
    storage.gate = threading.Event()
    errors: list[BaseException] = []
    done = threading.Event()

    def callback(_: object) -> None:
        for call in (lambda: writer.append(b"nested"), writer.close):
            try:
                call()
            except WalError as exc:
                errors.append(exc)
        done.set()

    future = writer.append_async(b"first")
    future.add_done_callback(callback)  # not done yet (the fsync is gated): runs on the syncer
    storage.gate.set()
    assert done.wait(WAIT_S)
    assert len(errors) == 2 and all("deadlock" in str(e) for e in errors)
    assert writer.append_async(b"second").result(WAIT_S) == 1  # the syncer survived


# -- rolling ---------------------------------------------------------------------------------------


def test_files_roll_at_file_bytes_and_are_named_by_first_seq(tmp_path: Path, make_writer: MakeWriter) -> None:
    writer = make_writer(tmp_path, file_bytes=250)
    for s in range(20):
        writer.append(payload_for(s, 50))  # 70-byte frames: 3 per file
    files = log_files(tmp_path)
    assert [int(p.stem) for p in files] == [0, 3, 6, 9, 12, 15, 18]
    assert all(p.stat().st_size <= 250 for p in files)
    assert writer.size_bytes == sum(p.stat().st_size for p in files)
    assert [e.seq for e in writer.entries()] == list(range(20))
    writer.close()
    with WalWriter(tmp_path, file_bytes=250) as reopened:
        assert reopened.next_seq == 20
        assert reopened.append(b"more") == 20
        assert [int(p.stem) for p in log_files(tmp_path)][-1] == 18


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_rolling_keeps_one_open_descriptor(tmp_path: Path, make_writer: MakeWriter) -> None:
    writer = make_writer(tmp_path, file_bytes=250)
    for s in range(20):
        writer.append(payload_for(s, 50))
    open_logs = [p for p in Path("/proc/self/fd").iterdir()
                 if str(p.resolve(strict=False)).startswith(str(tmp_path)) and p.resolve().suffix == ".log"]
    assert len(log_files(tmp_path)) == 7 and len(open_logs) == 1


def test_an_entry_larger_than_a_file_gets_a_file_of_its_own(tmp_path: Path, make_writer: MakeWriter) -> None:
    writer = make_writer(tmp_path, file_bytes=100)
    writer.append(b"s")
    writer.append(b"L" * 500)
    writer.append(b"t")
    assert [e.payload for e in writer.entries()] == [b"s", b"L" * 500, b"t"]
    sizes = {int(p.stem): p.stat().st_size for p in log_files(tmp_path)}
    assert sizes[1] == FILE_HEADER_SIZE + FRAME_HEADER_SIZE + 500


def test_reopening_a_full_file_rolls_before_writing(tmp_path: Path) -> None:
    with WalWriter(tmp_path, file_bytes=10_000) as writer:
        for s in range(4):
            writer.append(payload_for(s, 80))
    with WalWriter(tmp_path, file_bytes=150) as writer:
        assert [int(p.stem) for p in log_files(tmp_path)] == [0, 4]
        writer.append(b"x")
        assert [e.seq for e in writer.entries(3)] == [3, 4]


# -- trim ------------------------------------------------------------------------------------------


def test_trim_deletes_only_whole_files_at_or_below_the_seq(tmp_path: Path, make_writer: MakeWriter) -> None:
    writer = make_writer(tmp_path, file_bytes=250)
    for s in range(20):
        writer.append(payload_for(s, 50))  # files start at 0, 3, 6, 9, 12, 15, 18
    writer.trim(4)  # file 0 holds 0..2: gone; file 3 holds 3..5: 5 > 4, kept
    assert [int(p.stem) for p in log_files(tmp_path)] == [3, 6, 9, 12, 15, 18]
    assert writer.first_seq == 3
    writer.trim(4)  # idempotent
    writer.trim(8)
    assert writer.first_seq == 9
    assert [e.seq for e in writer.entries()] == list(range(9, 20))
    assert [e.seq for e in writer.entries(2)] == list(range(9, 20))  # below first_seq: from first_seq
    assert writer.size_bytes == sum(p.stat().st_size for p in log_files(tmp_path))
    writer.trim(10**6)  # never the active file
    assert [int(p.stem) for p in log_files(tmp_path)] == [18]
    assert [e.seq for e in writer.entries()] == [18, 19]


def test_trim_of_everything_never_lets_a_seq_be_reused(tmp_path: Path) -> None:
    with WalWriter(tmp_path, file_bytes=100) as writer:
        for s in range(3):
            writer.append(payload_for(s, 80))  # each entry fills a file: the active one is empty
        writer.trim(writer.next_seq - 1)
        assert [int(p.stem) for p in log_files(tmp_path)] == [3]
        assert writer.first_seq == writer.next_seq == 3
        assert list(writer.entries()) == []
    with WalWriter(tmp_path, file_bytes=100) as writer:
        assert (writer.first_seq, writer.next_seq) == (3, 3)
        assert writer.append(b"next") == 3


def test_trim_failure_is_a_wal_error(mem: MemoryWalStorage, make_writer: MakeWriter) -> None:
    storage = RecordingStorage(mem)
    writer = make_writer(storage=storage, file_bytes=100)
    for s in range(3):
        writer.append(payload_for(s, 80))
    storage.fail.add("delete")
    with pytest.raises(WalError, match=r"cannot delete 00000000000000000000\.log"):
        writer.trim(1)
    storage.fail.clear()
    writer.trim(1)
    assert writer.first_seq == 2


# -- entries ---------------------------------------------------------------------------------------


def test_entries_from_seq(mem: MemoryWalStorage, make_writer: MakeWriter) -> None:
    writer = make_writer(storage=mem, file_bytes=250)
    for s in range(10):
        writer.append(payload_for(s, 50))
    assert [e.seq for e in writer.entries(4)] == list(range(4, 10))
    assert [e.seq for e in writer.entries(3)] == list(range(3, 10))  # a file boundary
    assert list(writer.entries(10)) == []
    assert list(writer.entries(99)) == []
    assert all(e.payload == payload_for(e.seq, 50) for e in writer.entries())


def test_entries_is_a_snapshot_of_what_was_durable(mem: MemoryWalStorage, make_writer: MakeWriter) -> None:
    writer = make_writer(storage=mem)
    writer.append(b"a")
    it = writer.entries()
    writer.append(b"b")
    assert [e.payload for e in it] == [b"a"]
    assert [e.payload for e in writer.entries()] == [b"a", b"b"]


# -- close -----------------------------------------------------------------------------------------


def test_close_flushes_queued_appends_and_releases_the_lock(mem: MemoryWalStorage) -> None:
    storage = RecordingStorage(mem)
    writer = WalWriter(storage=storage)
    gate = start_gated(storage, writer)
    futures = [writer.append_async(payload_for(i)) for i in range(10)]
    closer = threading.Thread(target=writer.close)
    closer.start()
    gate.set()
    closer.join(WAIT_S)
    assert [f.result(0) for f in futures] == list(range(1, 11))
    with WalWriter(storage=mem) as reopened:  # the lock was released
        assert reopened.next_seq == 11


def test_calls_after_close(mem: MemoryWalStorage) -> None:
    with WalWriter(storage=mem) as writer:
        writer.append(b"x")
    writer.close()  # idempotent
    for call in (lambda: writer.append(b"y"), lambda: writer.append_async(b"y"),
                 lambda: writer.entries(), lambda: writer.trim(0)):
        with pytest.raises(WalClosed, match="memory:test is closed"):
            call()
    assert (writer.next_seq, writer.first_seq) == (1, 0)  # the last values stay readable


def test_close_syncs_when_fsync_is_off(mem: MemoryWalStorage) -> None:
    writer = WalWriter(storage=mem, fsync=False)
    writer.append(b"lazy")
    assert mem.unsynced_bytes() > 0
    writer.close()
    assert mem.unsynced_bytes() == 0


# -- failures --------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["append", "fsync"])
def test_a_write_failure_fails_the_writer(op: str, mem: MemoryWalStorage) -> None:
    storage = RecordingStorage(mem)
    writer = WalWriter(storage=storage)
    writer.append(b"ok")
    storage.fail.add(op)
    with pytest.raises(WalError, match="append of seq 1 failed"):
        writer.append(b"lost")
    with pytest.raises(WalError, match="failed earlier and must be reopened"):
        writer.append_async(b"refused")
    writer.close()  # quiet: the failure was reported to the appenders
    with WalWriter(storage=mem) as reopened:
        assert next(reopened.entries()).payload == b"ok"


def test_a_roll_failure_fails_pending_futures(mem: MemoryWalStorage) -> None:
    storage = RecordingStorage(mem)
    writer = WalWriter(storage=storage, file_bytes=100)
    storage.fail.add("create")
    gate = start_gated(storage, writer)
    queued = writer.append_async(b"q" * 60)  # does not fit the active file: a roll comes first
    gate.set()
    with pytest.raises(WalError, match=r"write failed: .*injected create failure"):
        queued.result(WAIT_S)
    writer.close()


def test_an_unexpected_storage_bug_fails_appenders_instead_of_hanging(mem: MemoryWalStorage) -> None:
    class Buggy(RecordingStorage):
        def append(self, name: str, chunks: Sequence[bytes]) -> None:
            raise RuntimeError("bug")

    writer = WalWriter(storage=Buggy(mem))
    with pytest.raises(WalError):
        writer.append(b"x")
    writer.close()


def test_constructor_arguments_are_checked(tmp_path: Path, mem: MemoryWalStorage) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        WalWriter()
    with pytest.raises(ValueError, match="exactly one"):
        WalWriter(tmp_path, storage=mem)
    with pytest.raises(ValueError, match="file_bytes"):
        WalWriter(storage=mem, file_bytes=FILE_HEADER_SIZE)
    with pytest.raises(ValueError, match="max_batch_bytes"):
        WalWriter(storage=mem, max_batch_bytes=0)
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(WalError, match="cannot open the WAL directory"):
        WalWriter(tmp_path / "file" / "wal")
