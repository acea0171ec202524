"""The local store's file writer: large files bypass the page cache, every file gets exactly its bytes."""

from __future__ import annotations

import errno
import fcntl
import os
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
    real_write = os.write
    refused = []

    def picky_write(fd: int, data: memoryview) -> int:
        if O_DIRECT and fcntl.fcntl(fd, fcntl.F_GETFL) & O_DIRECT:
            refused.append(len(data))
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_write(fd, data)

    monkeypatch.setattr(directwrite.os, "write", picky_write)
    data = data_of(3 * STAGING_BYTES + 5)
    fd = _new_file(tmp_path)
    write_file(fd, data)
    os.close(fd)
    assert (tmp_path / "f").read_bytes() == data
    assert len(refused) <= 1  # refused once at most, then buffered for the rest of the file


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
