"""The persisted trim point: a reopened writer knows which entries its caller already trimmed.

``trim`` keeps the active file, so without the record a reopen would hand every entry of it back for
replay; the record is saved unsynced on every trim and synced at close, and only ever lowers what a replay
skips when it is lost or invalid.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.wal.wal_testkit import RecordingStorage, payload_for
from wal import MemoryWalStorage, WalWriter
from wal.storage import TRIM_POINT_FILE_NAME


def test_trim_point_survives_a_reopen_and_replay_starts_there(tmp_path: Path) -> None:
    with WalWriter(tmp_path) as writer:
        for s in range(10):
            writer.append(payload_for(s))
        assert writer.trim_seq == 0
        writer.trim(6)
        writer.trim(3)  # never backwards
        assert writer.trim_seq == 7
        assert [int(p.stem) for p in tmp_path.glob("*.log")] == [0]  # the active file stays
    with WalWriter(tmp_path) as writer:
        assert (writer.trim_seq, writer.next_seq) == (7, 10)
        assert [e.seq for e in writer.entries(writer.trim_seq)] == [7, 8, 9]
        writer.trim(10**6)  # clamped to what exists
        assert writer.trim_seq == 10
    with WalWriter(tmp_path) as writer:
        assert list(writer.entries(writer.trim_seq)) == []


def test_unsynced_trim_point_may_be_lost_by_a_crash_close_syncs_it(mem: MemoryWalStorage) -> None:
    writer = WalWriter(storage=mem)
    for s in range(4):
        writer.append(payload_for(s))
    writer.trim(2)
    mem.crash(torn_tail=False)  # the record was saved unsynced: lost, so the replay starts earlier
    writer = WalWriter(storage=mem)
    assert (writer.trim_seq, writer.next_seq) == (0, 4)
    writer.trim(2)
    writer.close()
    mem.crash(torn_tail=False)
    with WalWriter(storage=mem) as writer:
        assert writer.trim_seq == 3


def test_a_trim_point_past_the_last_entry_is_lowered_before_new_entries_exist(tmp_path: Path) -> None:
    """Entries it covered were lost (written without fsync): new entries reuse their seqs and must replay."""
    with WalWriter(tmp_path, fsync=False) as writer:
        for s in range(5):
            writer.append(payload_for(s, 50))
        writer.trim(4)
    (log,) = tmp_path.glob("*.log")
    data = log.read_bytes()
    log.write_bytes(data[:len(data) - 2 * (20 + 50)])  # the last two entries never reached the disk
    with WalWriter(tmp_path) as writer:
        assert (writer.trim_seq, writer.next_seq) == (3, 3)
        writer.append(b"new-3")
        writer.append(b"new-4")
    with WalWriter(tmp_path) as writer:
        assert [e.payload for e in writer.entries(writer.trim_seq)] == [b"new-3", b"new-4"]


@pytest.mark.parametrize("garbage", [b"", b"SWTP", b"\x00" * 17, b"x" * 100])
def test_an_invalid_record_is_ignored_with_a_warning(tmp_path: Path, garbage: bytes,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    with WalWriter(tmp_path) as writer:
        writer.append(b"a")
        writer.trim(0)
    record = tmp_path / TRIM_POINT_FILE_NAME
    flipped = bytearray(record.read_bytes())
    flipped[5] ^= 1
    for data in (garbage, bytes(flipped)):
        record.write_bytes(data)
        with caplog.at_level(logging.WARNING, logger="wal.trim_point"), WalWriter(tmp_path) as writer:
            assert writer.trim_seq == 0  # everything is replayed: slower, never wrong
        assert "invalid trim point" in caplog.text
        caplog.clear()


def test_a_storage_without_trim_points_replays_everything(mem: MemoryWalStorage) -> None:
    storage = RecordingStorage(mem)  # implements WalStorage only
    with WalWriter(storage=storage) as writer:
        writer.append(b"a")
        writer.trim(0)
        assert writer.trim_seq == 1
    assert TRIM_POINT_FILE_NAME not in mem.list_files()
    with WalWriter(storage=storage) as writer:
        assert writer.trim_seq == 0


def test_a_failed_save_is_only_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with WalWriter(tmp_path) as writer:
        writer.append(b"a")
        (tmp_path / f"{TRIM_POINT_FILE_NAME}.tmp").mkdir()  # the temp file cannot be created
        with caplog.at_level(logging.WARNING, logger="wal.trim_point"):
            writer.trim(0)
        assert writer.trim_seq == 1 and "cannot save the trim point" in caplog.text
        (tmp_path / f"{TRIM_POINT_FILE_NAME}.tmp").rmdir()
    with WalWriter(tmp_path) as writer:  # close saved it
        assert writer.trim_seq == 1
