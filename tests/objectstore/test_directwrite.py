"""The local store's file writer: large files bypass the page cache, every file gets exactly its bytes."""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import time
from pathlib import Path

import pytest

from s3stream.objectstore import directwrite
from s3stream.objectstore.directwrite import ALIGN, STAGING_BYTES, FileWriter, write_file
from s3stream.objectstore.local import LocalObjectStore

O_DIRECT = getattr(os, "O_DIRECT", 0)


def data_of(n: int) -> bytes:
    return bytes((i * 7 + i // 251) & 0xFF for i in range(n))


def _new_file(tmp_path: Path, name: str = "f") -> int:
    return os.open(tmp_path / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)


@pytest.mark.parametrize("size", [0, 1, ALIGN - 1, ALIGN, STAGING_BYTES - 1, STAGING_BYTES, STAGING_BYTES + 1,
                                  3 * STAGING_BYTES + ALIGN + 7])
def test_write_file_writes_exactly_the_bytes(tmp_path: Path, size: int) -> None:
    data = data_of(size)
    fd = _new_file(tmp_path)
    try:
        write_file(fd, data)
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == data


def test_pieces_of_any_size_make_the_same_file(tmp_path: Path) -> None:
    data = data_of(2 * STAGING_BYTES + 12_345)
    fd = _new_file(tmp_path)
    writer = FileWriter(fd)
    at = 0
    for step in [1, ALIGN + 3, STAGING_BYTES - 17, 5, STAGING_BYTES + 99]:
        writer.write(data[at:at + step])
        at += step
    writer.write(data[at:])
    writer.close()
    os.close(fd)
    assert (tmp_path / "f").read_bytes() == data


@pytest.mark.skipif(not O_DIRECT, reason="no O_DIRECT on this platform")
def test_a_full_staging_buffer_goes_out_directly_and_a_small_file_never_does(tmp_path: Path) -> None:
    big = _new_file(tmp_path, "big")
    writer = FileWriter(big)
    writer.write(data_of(STAGING_BYTES + 10))
    direct = bool(fcntl.fcntl(big, fcntl.F_GETFL) & O_DIRECT)
    if not direct:
        pytest.skip("this file system refuses O_DIRECT (the writer fell back to buffered writes)")
    assert writer.direct
    writer._wait()  # the full buffer was written behind the caller
    assert os.fstat(big).st_size == STAGING_BYTES  # the full buffer is on disk, 10 bytes staged
    writer.close()
    assert not fcntl.fcntl(big, fcntl.F_GETFL) & O_DIRECT  # the unaligned tail went through the cache
    os.close(big)
    assert (tmp_path / "big").read_bytes() == data_of(STAGING_BYTES + 10)

    small = _new_file(tmp_path, "small")
    writer = FileWriter(small)
    writer.write(data_of(STAGING_BYTES - 1))
    writer.close()
    assert not fcntl.fcntl(small, fcntl.F_GETFL) & O_DIRECT
    os.close(small)


def test_a_refused_direct_write_falls_back_to_the_page_cache(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    real_pwrite = os.pwrite
    refused = []

    def picky_pwrite(fd: int, data: memoryview, offset: int) -> int:
        if O_DIRECT and fcntl.fcntl(fd, fcntl.F_GETFL) & O_DIRECT:
            refused.append(len(data))
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(directwrite.os, "pwrite", picky_pwrite)
    data = data_of(3 * STAGING_BYTES + 5)
    fd = _new_file(tmp_path)
    write_file(fd, data)
    os.close(fd)
    assert (tmp_path / "f").read_bytes() == data
    assert len(refused) == (1 if O_DIRECT else 0)  # refused once, then buffered for the rest of the file


def test_full_buffers_are_written_behind_the_caller_one_at_a_time(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The caller stages the next buffer while the last one is written; a third waits for the first."""
    real_pwrite = os.pwrite
    release = threading.Event()
    writes: list[tuple[int, str]] = []

    def slow_pwrite(fd: int, data: memoryview, offset: int) -> int:
        writes.append((offset, threading.current_thread().name))
        if len(data) == STAGING_BYTES:
            assert release.wait(10)
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(directwrite.os, "pwrite", slow_pwrite)
    fd = _new_file(tmp_path)
    writer = FileWriter(fd)
    data = data_of(3 * STAGING_BYTES + 9)
    writer.write(data[:2 * STAGING_BYTES - 1])  # the first buffer is out, held by the device
    deadline = time.monotonic() + 10
    while not writes and time.monotonic() < deadline:
        time.sleep(0.001)
    assert [o for o, _ in writes] == [0]
    assert writes[0][1].startswith("s3stream-direct-write")
    done = threading.Event()
    rest = threading.Thread(target=lambda: (writer.write(data[2 * STAGING_BYTES - 1:]), done.set()))
    rest.start()  # fills the second buffer: must wait for the first write before handing it over
    assert not done.wait(0.2)
    release.set()
    rest.join(10)
    writer.close()
    os.close(fd)
    assert (tmp_path / "f").read_bytes() == data
    assert [o for o, _ in writes][:3] == [0, STAGING_BYTES, 2 * STAGING_BYTES]


def test_an_error_of_a_write_behind_surfaces_at_close(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full_disk(fd: int, data: memoryview, offset: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    fd = _new_file(tmp_path)
    writer = FileWriter(fd)
    monkeypatch.setattr(directwrite.os, "pwrite", full_disk)
    writer.write(data_of(STAGING_BYTES + 1))  # handed to the I/O thread: no error yet
    with pytest.raises(OSError, match="No space"):
        writer.close()
    os.close(fd)
    assert writer._staging is None and writer._inflight is None  # both buffers went back to the pool


def test_without_o_direct_writes_are_buffered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(directwrite, "_O_DIRECT", 0)
    data = data_of(2 * STAGING_BYTES + 3)
    fd = _new_file(tmp_path)
    write_file(fd, data)
    os.close(fd)
    assert (tmp_path / "f").read_bytes() == data


def test_staging_buffers_are_reused_and_bounded(tmp_path: Path) -> None:
    writers = [FileWriter(_new_file(tmp_path, f"f{i}")) for i in range(8)]
    for w in writers:
        w.write(b"x")
    for w in writers:
        w.abandon()
    assert len(directwrite._pool) == directwrite._POOL_MAX
    pooled = set(map(id, directwrite._pool))
    w = FileWriter(_new_file(tmp_path, "again"))
    w.write(b"y")
    assert id(w._staging) in pooled
    w.abandon()


def test_local_store_objects_round_trip_at_every_size(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "root")
    for size in (0, 10, STAGING_BYTES, 2 * STAGING_BYTES + 1):
        store.put(f"put/{size}", data_of(size))
        with store.open_upload(f"up/{size}", part_bytes=5 << 20) as up:
            for at in range(0, size, 300_000):
                up.write(data_of(size)[at:at + 300_000])
            meta = up.complete()
        assert store.get(f"put/{size}") == data_of(size) == store.get(f"up/{size}")
        assert meta.etag == store.head(f"put/{size}").etag


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_writes_with_threads_of_its_own(tmp_path: Path) -> None:
    """The parent's I/O threads do not exist in a forked child: its writes must not wait for them."""
    fd = _new_file(tmp_path, "parent")
    write_file(fd, data_of(2 * STAGING_BYTES))  # the parent's pool exists now
    os.close(fd)
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if a large file is written in time
        code = 1
        try:
            child = _new_file(tmp_path, "child")
            done = threading.Event()
            threading.Thread(target=lambda: (write_file(child, b"c" * (3 * STAGING_BYTES)), done.set()),
                             daemon=True).start()
            code = 0 if done.wait(20) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert (tmp_path / "child").read_bytes() == b"c" * (3 * STAGING_BYTES)
