"""Recycled WAL files: a trimmed file's space is reused for the next one, behind end marks, and recovery
never takes its older bytes for entries."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest

from tests.wal.wal_testkit import payload_for
from wal import WalCorrupt, WalWriter, encode_frame
from wal.file_storage import SPARE_FILE_NAME, FileWalStorage
from wal.frame import FILE_HEADER_SIZE, encode_file_header
from wal.storage import END_MARK_BYTES

FILE_BYTES = 4096
PAYLOAD = 180
FRAME = len(encode_frame(0, payload_for(0, PAYLOAD)))  # 200 bytes: 20 frames fill a file


def log_files(path: Path) -> list[Path]:
    return sorted(path.glob("*.log"))


def fill(writer: WalWriter, seqs: range) -> None:
    for s in seqs:
        assert writer.append(payload_for(s, PAYLOAD)) == s


def recycled_log(tmp_path: Path, total: int) -> None:
    """A WAL whose files after the first few reuse trimmed ones: ``total`` entries, all kept but the first."""
    with WalWriter(tmp_path, file_bytes=FILE_BYTES) as writer:
        fill(writer, range(25))  # two files
        writer.trim(19)  # the first file (seqs 0..19) is retired: it becomes the spare
        assert (tmp_path / SPARE_FILE_NAME).exists()
        fill(writer, range(25, total))


def test_a_trimmed_file_is_reused_in_place_with_an_end_mark_after_the_new_data(tmp_path: Path) -> None:
    with WalWriter(tmp_path, file_bytes=FILE_BYTES) as writer:
        fill(writer, range(25))
        first = log_files(tmp_path)[0]
        inode = first.stat().st_ino
        writer.trim(19)
        assert not first.exists() and (tmp_path / SPARE_FILE_NAME).stat().st_ino == inode
        fill(writer, range(25, 43))  # the second file fills up: the third is the spare, reused
        third = log_files(tmp_path)[-1]
        assert third.stat().st_ino == inode and not (tmp_path / SPARE_FILE_NAME).exists()
        data = third.read_bytes()
        used = FILE_HEADER_SIZE + FRAME * (43 - int(third.stem))
        assert data[:FILE_HEADER_SIZE] == encode_file_header(int(third.stem))
        assert data[used:used + END_MARK_BYTES] == bytes(END_MARK_BYTES)
        assert any(data[used + END_MARK_BYTES:])  # the older life's bytes are still there behind the mark
        assert len(data) > used  # written in place: the file did not grow
        assert [e.seq for e in writer.entries()] == list(range(20, 43))
        assert writer.size_bytes == sum(p.stat().st_size for p in log_files(tmp_path)[:-1]) + used


def test_recovery_stops_at_end_marks_and_keeps_every_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    recycled_log(tmp_path, 90)  # several files reused, each with older bytes after its end mark
    files = log_files(tmp_path)
    with caplog.at_level(logging.WARNING, logger="wal"), WalWriter(tmp_path, file_bytes=FILE_BYTES) as writer:
        assert [e.payload for e in writer.entries()] == [payload_for(s, PAYLOAD) for s in range(20, 90)]
        assert log_files(tmp_path) == files
        fill(writer, range(90, 95))  # appends go where the entries end, not after the older bytes
    assert not caplog.records
    with WalWriter(tmp_path, file_bytes=FILE_BYTES) as writer:
        assert [e.seq for e in writer.entries()] == list(range(20, 95))


def test_a_lost_frame_before_an_end_mark_in_a_complete_file_is_corruption(tmp_path: Path) -> None:
    recycled_log(tmp_path, 90)
    first, second = log_files(tmp_path)[:2]
    data = bytearray(first.read_bytes())
    last_frame = FILE_HEADER_SIZE + FRAME * (int(second.stem) - int(first.stem) - 1)
    data[last_frame:last_frame + END_MARK_BYTES] = bytes(END_MARK_BYTES)  # looks like an end mark now
    first.write_bytes(bytes(data))
    with pytest.raises(WalCorrupt, match="previous file ends at"):
        WalWriter(tmp_path, file_bytes=FILE_BYTES)


def test_a_torn_write_into_a_reused_file_is_cut_and_older_frames_are_never_entries(tmp_path: Path) -> None:
    recycled_log(tmp_path, 50)
    active = log_files(tmp_path)[-1]
    data = bytearray(active.read_bytes())
    torn_at = FILE_HEADER_SIZE + FRAME * (50 - int(active.stem) - 1)
    data[torn_at + 100:torn_at + FRAME + END_MARK_BYTES] = b"\x01" * (FRAME - 100 + END_MARK_BYTES)
    active.write_bytes(bytes(data))  # the last frame half written, its end mark lost: older bytes follow
    with WalWriter(tmp_path, file_bytes=FILE_BYTES) as writer:
        assert [e.seq for e in writer.entries()] == list(range(20, 49))
        assert active.stat().st_size == torn_at
        assert writer.append(b"next") == 49
    with WalWriter(tmp_path, file_bytes=FILE_BYTES) as writer:
        assert [e.seq for e in writer.entries(48)] == [48, 49]


def test_without_recycle_trimmed_files_are_deleted(tmp_path: Path) -> None:
    with WalWriter(tmp_path, file_bytes=FILE_BYTES, recycle=False) as writer:
        fill(writer, range(25))
        writer.trim(19)
        assert not (tmp_path / SPARE_FILE_NAME).exists()
        fill(writer, range(25, 45))
        assert all(p.stat().st_size <= FILE_BYTES for p in log_files(tmp_path))


def test_one_spare_at_most_and_a_stale_one_is_replaced(tmp_path: Path) -> None:
    (tmp_path / SPARE_FILE_NAME).write_bytes(b"\x07" * 64)  # left by an earlier process: never reused as is
    storage = FileWalStorage(tmp_path, recycle=True)
    for name in ("a", "b"):
        storage.create(name, b"header-" + name.encode())
        storage.append(name, [b"x" * 100])
    storage.retire("a")  # replaces the stale spare
    storage.retire("b")  # a spare is already kept: deleted
    assert sorted(p.name for p in tmp_path.iterdir()) == [SPARE_FILE_NAME]
    assert (tmp_path / SPARE_FILE_NAME).read_bytes() == b"header-a" + b"x" * 100
    storage.create("c", b"HEAD")
    storage.append("c", [b"abc"])
    assert storage.read("c") == b"HEADabc" + bytes(END_MARK_BYTES) + (b"header-a" + b"x" * 100)[27:]
    with pytest.raises(FileExistsError):
        storage.create("c", b"again")
    storage.close()


def test_a_file_retired_while_a_roll_takes_the_spare_waits_for_it(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    storage = FileWalStorage(tmp_path, recycle=True)
    for name in ("a", "b"):
        storage.create(name, b"header-" + name.encode())
        storage.append(name, [name.encode() * 100])
    storage.retire("a")  # the spare
    real_link = os.link
    retiring: list[threading.Thread] = []

    def link_during_a_trim(src: str, dst: str) -> None:
        # a trim retires "b" while the roll is between writing its header and linking the spare
        retiring.append(threading.Thread(target=storage.retire, args=("b",)))
        retiring[0].start()
        retiring[0].join(0.2)  # it must wait for the roll, not replace the spare under it
        real_link(src, dst)

    monkeypatch.setattr(os, "link", link_during_a_trim)
    storage.create("c", b"header-c")
    monkeypatch.setattr(os, "link", real_link)
    retiring[0].join(10)
    storage.append("c", [b"new"])
    assert storage.read("c").startswith(b"header-cnew" + bytes(END_MARK_BYTES))
    assert (tmp_path / SPARE_FILE_NAME).read_bytes() == b"header-b" + b"b" * 100  # retired after the roll
    storage.close()
