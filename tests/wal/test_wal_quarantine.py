"""quarantine(): the operator's step after WalCorrupt keeps every entry before the damage, moves the rest
aside without deleting a byte, and the directory opens again."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.wal.wal_testkit import payload_for
from wal import WalCorrupt, WalError, WalLocked, WalWriter, quarantine
from wal.frame import FILE_HEADER_SIZE, FRAME_HEADER_SIZE, encode_frame
from wal.quarantine import QUARANTINE_DIR

PAYLOAD = 100
FRAME = len(encode_frame(0, payload_for(0, PAYLOAD)))


def three_files(tmp_path: Path) -> list[Path]:
    with WalWriter(tmp_path, file_bytes=FILE_HEADER_SIZE + 5 * FRAME, recycle=False) as writer:
        for seq in range(13):
            writer.append(payload_for(seq, PAYLOAD))
    files = sorted(tmp_path.glob("*.log"))
    assert [int(p.stem) for p in files] == [0, 5, 10]
    return files


def flip(path: Path, offset: int) -> bytes:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x08
    path.write_bytes(bytes(data))
    return bytes(data)


def tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_quarantine_cuts_at_the_damage_and_moves_later_files_aside(tmp_path: Path) -> None:
    files = three_files(tmp_path)
    damaged_at = FILE_HEADER_SIZE + 2 * FRAME  # seq 7, in the middle file
    damaged = flip(files[1], damaged_at + FRAME_HEADER_SIZE + 9)
    last = files[2].read_bytes()
    with pytest.raises(WalCorrupt):
        WalWriter(tmp_path)
    before = tree(tmp_path)
    plan = quarantine(tmp_path, dry_run=True)
    assert tree(tmp_path) == before and not plan.done
    report = quarantine(tmp_path)
    assert report.done and report.damage is not None and "frame checksum mismatch" in report.damage
    assert (report.cut, report.cut_at, report.moved, report.kept_below_seq) == (
        files[1].name, damaged_at, (files[2].name,), 7)
    assert report == dataclasses.replace(plan, done=True)
    aside = Path(report.moved_to or "")
    assert aside.parent == tmp_path / QUARANTINE_DIR
    assert (aside / files[1].name).read_bytes() == damaged  # the damaged file whole, as it was
    assert (aside / files[2].name).read_bytes() == last
    assert files[1].stat().st_size == damaged_at and not files[2].exists()
    with WalWriter(tmp_path) as writer:
        assert [e.payload for e in writer.entries()] == [payload_for(s, PAYLOAD) for s in range(7)]
        assert writer.append(b"next") == 7
    assert quarantine(tmp_path).damage is None  # nothing more to do


def test_a_gap_or_a_bad_header_moves_whole_files(tmp_path: Path) -> None:
    files = three_files(tmp_path)
    flip(files[1], 2)  # the middle file's header
    report = quarantine(tmp_path)
    assert report.cut is None and report.moved == (files[1].name, files[2].name) and report.kept_below_seq == 5
    with WalWriter(tmp_path) as writer:
        assert [e.seq for e in writer.entries()] == list(range(5))
    assert sorted(p.name for p in Path(report.moved_to or "").iterdir()) == [files[1].name, files[2].name]


def test_quarantine_twice_at_the_same_place_keeps_both_copies(tmp_path: Path) -> None:
    files = three_files(tmp_path)
    flip(files[2], FILE_HEADER_SIZE + FRAME + 30)  # seq 11 of the last file; seq 12 follows
    first = quarantine(tmp_path)
    files[2].write_bytes(files[2].read_bytes() + encode_frame(12, b"x") + encode_frame(13, b"y"))
    flip(files[2], FILE_HEADER_SIZE + FRAME + 5)  # damaged again at the same offset, valid frames after
    second = quarantine(tmp_path)
    assert first.moved_to != second.moved_to and Path(first.moved_to or "").exists()


def test_quarantine_refuses_a_directory_in_use(tmp_path: Path) -> None:
    with WalWriter(tmp_path), pytest.raises(WalLocked):
        quarantine(tmp_path)


def test_quarantine_of_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(WalError, match="no such WAL directory"):
        quarantine(tmp_path / "nope")
    assert not (tmp_path / "nope").exists()
