"""Recovery: torn tails, crashes of the simulated disk, and damage a crash cannot explain."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from tests.wal.wal_testkit import WAIT_S, RecordingStorage, payload_for
from wal import MemoryWalStorage, WalCorrupt, WalEntry, WalError, WalWriter, encode_frame
from wal.frame import FILE_HEADER_SIZE, encode_file_header


def file_bytes(first_seq: int, payloads: list[bytes]) -> bytes:
    return encode_file_header(first_seq) + b"".join(
        encode_frame(first_seq + i, p) for i, p in enumerate(payloads)
    )


def seed_file(storage: MemoryWalStorage, first_seq: int, data: bytes) -> str:
    name = f"{first_seq:020d}.log"
    storage.create(name, data)
    return name


def read_all(writer: WalWriter) -> list[WalEntry]:
    return list(writer.entries())


# -- torn tails ------------------------------------------------------------------------------------


def test_torn_tail_is_truncated_at_every_cut_point_of_the_last_frame(caplog: pytest.LogCaptureFixture) -> None:
    payloads = [payload_for(s, 50) for s in range(3)]
    full = file_bytes(100, payloads)
    last_start = len(file_bytes(100, payloads[:2]))
    for cut in range(last_start, len(full)):
        storage = MemoryWalStorage(f"cut{cut}")
        name = seed_file(storage, 100, full[:cut])
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="wal"), WalWriter(storage=storage) as writer:
            assert read_all(writer) == [WalEntry(100, payloads[0]), WalEntry(101, payloads[1])]
            assert writer.next_seq == 102 and writer.first_seq == 100
            assert storage.read(name) == full[:last_start]
            assert writer.append(b"after") == 102
            assert [e.seq for e in read_all(writer)] == [100, 101, 102]
        torn = cut > last_start
        assert any("torn tail" in r.message for r in caplog.records) == torn, cut


def test_torn_tail_on_real_files(tmp_path: Path) -> None:
    with WalWriter(tmp_path) as writer:
        for seq in range(5):
            writer.append(payload_for(seq))
    (log,) = sorted(tmp_path.glob("*.log"))
    data = log.read_bytes()
    log.write_bytes(data[:-7])  # cut inside the last frame
    with WalWriter(tmp_path) as writer:
        assert [e.payload for e in read_all(writer)] == [payload_for(s) for s in range(4)]
        assert writer.next_seq == 4
        assert writer.size_bytes == log.stat().st_size == len(data) - len(encode_frame(4, payload_for(4)))


def test_zero_filled_tail_is_where_the_file_ends(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with WalWriter(tmp_path) as writer:
        writer.append(b"one")
    (log,) = tmp_path.glob("*.log")
    size = log.stat().st_size
    with log.open("ab") as f:
        # a crash after the file grew but before its data reached the disk: zeros where an append went, as
        # an end mark would be; nothing acknowledged is there, and nothing is reported
        f.write(bytes(4096))
    with caplog.at_level(logging.WARNING, logger="wal"), WalWriter(tmp_path) as writer:
        assert read_all(writer) == [WalEntry(0, b"one")]
        assert log.stat().st_size == size  # cut: the next append goes where the data ends
        writer.append(b"two")
    assert not caplog.records
    with WalWriter(tmp_path) as writer:
        assert read_all(writer) == [WalEntry(0, b"one"), WalEntry(1, b"two")]


# -- crashes of the simulated disk -----------------------------------------------------------------


def crash_once(seed: int, torn_tail: bool) -> tuple[int, int, list[WalEntry]]:
    """N synced entries, then M written-but-unsynced ones, crash; returns (N, M, recovered)."""
    storage = MemoryWalStorage(f"crash{seed}")
    synced = 3 + seed % 5
    unsynced = 1 + seed % 7
    with WalWriter(storage=storage) as writer:
        for seq in range(synced):
            writer.append(payload_for(seq, 10 + seq))
    lazy = WalWriter(storage=storage, fsync=False)  # writes reach "the page cache" only
    for seq in range(synced, synced + unsynced):
        lazy.append(payload_for(seq, 10 + seq))
    assert storage.unsynced_bytes() > 0
    storage.crash(torn_tail=torn_tail, rng_seed=seed)
    with pytest.raises(WalError):
        lazy.close()  # its final fsync hits the crashed disk; the lock is released regardless
    with WalWriter(storage=storage) as recovered:
        entries = read_all(recovered)
        assert recovered.next_seq == len(entries)
    return synced, unsynced, entries


@pytest.mark.parametrize("seed", range(40))
def test_crash_recovers_the_synced_entries_and_a_prefix_of_the_unsynced_ones(seed: int) -> None:
    synced, unsynced, entries = crash_once(seed, torn_tail=True)
    assert synced <= len(entries) <= synced + unsynced
    assert entries == [WalEntry(s, payload_for(s, 10 + s)) for s in range(len(entries))]


def test_crash_without_torn_tail_recovers_exactly_the_synced_entries() -> None:
    for seed in range(10):
        synced, _, entries = crash_once(seed, torn_tail=False)
        assert len(entries) == synced


def test_crash_outcomes_cover_none_some_and_all_of_the_unsynced_entries() -> None:
    kept = set()
    for seed in range(200):
        synced, unsynced, entries = crash_once(seed, torn_tail=True)
        extra = len(entries) - synced
        kept.add("none" if extra == 0 else "all" if extra == unsynced else "some")
    assert kept == {"none", "some", "all"}


def test_crash_during_an_fsync_fails_the_waiting_appenders(mem: MemoryWalStorage) -> None:
    recording = RecordingStorage(mem)
    writer = WalWriter(storage=recording)
    writer.append(b"durable")
    recording.gate = threading.Event()
    recording.in_fsync.clear()
    future = writer.append_async(b"in flight")
    assert recording.in_fsync.wait(WAIT_S)
    mem.crash(torn_tail=False)
    recording.gate.set()  # the fsync now reaches a crashed disk
    with pytest.raises(WalError, match="write failed"):
        future.result(WAIT_S)
    with pytest.raises(WalError, match="failed earlier"):
        writer.append(b"refused")
    writer.close()  # a failed writer still closes quietly
    with WalWriter(storage=mem) as recovered:
        assert read_all(recovered) == [WalEntry(0, b"durable")]


def test_rolls_with_fsync_off_never_leave_a_gap_after_a_crash() -> None:
    for seed in range(20):
        storage = MemoryWalStorage(f"roll{seed}")
        lazy = WalWriter(storage=storage, fsync=False, file_bytes=300)
        for seq in range(30):
            lazy.append(payload_for(seq, 40))
        assert len(storage.list_files()) > 3
        storage.crash(torn_tail=True, rng_seed=seed)
        with pytest.raises(WalError):
            lazy.close()
        with WalWriter(storage=storage, file_bytes=300) as recovered:
            entries = read_all(recovered)
            assert entries == [WalEntry(s, payload_for(s, 40)) for s in range(len(entries))]
            assert len(entries) >= 30 - 300 // 60  # only the last file's unsynced tail can go


# -- damage a crash does not explain ----------------------------------------------------------------


def files_of(storage: MemoryWalStorage) -> dict[str, bytes]:
    return {name: storage.read(name) for name in storage.list_files()}


def rewrite(storage: MemoryWalStorage, name: str, data: bytes) -> None:
    storage.delete(name)
    storage.create(name, data)


def test_corruption_in_an_earlier_file_is_refused_and_nothing_is_dropped(
    mem: MemoryWalStorage, caplog: pytest.LogCaptureFixture
) -> None:
    seed_file(mem, 0, file_bytes(0, [b"a0", b"a1", b"a2"]))
    seed_file(mem, 3, file_bytes(3, [b"b3", b"b4"]))
    seed_file(mem, 5, file_bytes(5, [b"c5"]))
    data = bytearray(mem.read("00000000000000000000.log"))
    frame1 = FILE_HEADER_SIZE + len(encode_frame(0, b"a0"))
    data[frame1 + 21] ^= 0x40  # payload of seq 1
    rewrite(mem, "00000000000000000000.log", bytes(data))
    before = files_of(mem)
    with pytest.raises(WalCorrupt, match=rf"00000000000000000000\.log: frame checksum mismatch at byte {frame1}, "
                                         r"in a complete file") as caught:
        WalWriter(storage=mem)
    assert caught.value.source == "memory:test/00000000000000000000.log" and caught.value.offset == frame1
    assert files_of(mem) == before  # no later file dropped, nothing truncated
    mem.lock().release()  # the failed open released the lock


def flipped(entries: int, at: int, *, byte: int = 25) -> tuple[bytes, int]:
    """A one-file log of ``entries`` frames with one byte of frame ``at`` flipped, and that frame's offset."""
    payloads = [payload_for(s, 40) for s in range(entries)]
    data = bytearray(file_bytes(0, payloads))
    offset = len(file_bytes(0, payloads[:at]))
    data[offset + byte] ^= 0x01
    return bytes(data), offset


@pytest.mark.parametrize("byte", [0, 3, 6, 10, 17, 25, 59])  # magic, flags, length, seq, crc, payload
def test_a_damaged_frame_followed_by_valid_ones_is_refused_wherever_the_byte_is(
    mem: MemoryWalStorage, byte: int
) -> None:
    data, offset = flipped(10, 4, byte=byte)
    seed_file(mem, 0, data)
    with pytest.raises(WalCorrupt, match=rf"at byte {offset}, and a valid frame \(seq 5\) follows") as caught:
        WalWriter(storage=mem)
    assert caught.value.offset == offset
    assert "entries from seq 4 on may have been acknowledged" in str(caught.value)
    assert files_of(mem) == {"00000000000000000000.log": data}


def test_a_zeroed_frame_followed_by_valid_ones_is_not_an_end_mark(mem: MemoryWalStorage) -> None:
    payloads = [payload_for(s, 40) for s in range(6)]
    data = bytearray(file_bytes(0, payloads))
    offset = len(file_bytes(0, payloads[:2]))
    data[offset:offset + 60] = bytes(60)  # a lost block in the middle: zeros, as an end mark would be
    seed_file(mem, 0, bytes(data))
    with pytest.raises(WalCorrupt, match=r"valid frame \(seq 3\) follows"):
        WalWriter(storage=mem)


def test_damage_in_the_last_frame_is_a_torn_tail(mem: MemoryWalStorage, caplog: pytest.LogCaptureFixture) -> None:
    data, offset = flipped(5, 4)  # nothing valid follows: a crash explains it (the last write, never acked)
    seed_file(mem, 0, data)
    with caplog.at_level(logging.WARNING, logger="wal"), WalWriter(storage=mem) as writer:
        assert [e.seq for e in read_all(writer)] == [0, 1, 2, 3]
    assert mem.read("00000000000000000000.log") == data[:offset]
    assert [r.levelno for r in caplog.records] == [logging.WARNING] and "torn tail" in caplog.records[0].message


def test_frames_of_an_older_life_after_a_torn_frame_do_not_count(mem: MemoryWalStorage) -> None:
    # a reused file: the older bytes are valid frames, but of seqs below the file's first seq
    live = [payload_for(s, 40) for s in range(100, 103)]
    old = b"".join(encode_frame(s, payload_for(s, 40)) for s in range(10, 20))
    head = file_bytes(100, live)
    torn = head[:-7] + b"\x01" * 7  # the last live frame torn
    seed_file(mem, 100, torn + old)
    with WalWriter(storage=mem) as writer:
        assert [e.seq for e in read_all(writer)] == [100, 101]


def test_a_frame_with_a_later_seq_at_the_damage_is_damage(mem: MemoryWalStorage) -> None:
    payloads = [payload_for(s, 40) for s in range(4)]
    # seq 2 missing: frame 3 sits where 2 was due, valid and live
    data = file_bytes(0, payloads[:2]) + encode_frame(3, payloads[3])
    seed_file(mem, 0, data)
    with pytest.raises(WalCorrupt, match=r"frame seq 3 where 2 was expected"):
        WalWriter(storage=mem)


def test_bad_header_of_a_non_last_file_is_corrupt(mem: MemoryWalStorage) -> None:
    bad = bytearray(file_bytes(0, [b"x"]))
    bad[9] ^= 1
    seed_file(mem, 0, bytes(bad))
    seed_file(mem, 1, file_bytes(1, [b"y"]))
    with pytest.raises(WalCorrupt, match=r"memory:test/00000000000000000000\.log: file header checksum"):
        WalWriter(storage=mem)
    mem.lock().release()  # a failed open released the lock


def test_damaged_header_of_the_last_file_is_recreated(mem: MemoryWalStorage) -> None:
    seed_file(mem, 0, file_bytes(0, [b"x", b"y"]))
    seed_file(mem, 2, encode_file_header(2)[:11])  # a roll cut short by a crash
    with WalWriter(storage=mem) as writer:
        assert [e.payload for e in read_all(writer)] == [b"x", b"y"]
        assert writer.append(b"z") == 2
    assert mem.read("00000000000000000002.log")[:FILE_HEADER_SIZE] == encode_file_header(2)


def test_bad_header_of_a_last_file_holding_frames_is_corrupt(mem: MemoryWalStorage) -> None:
    bad = bytearray(file_bytes(4, [b"acked"]))
    bad[0] ^= 1  # the header was synced before any frame: a crash cannot have damaged it
    seed_file(mem, 4, bytes(bad))
    with pytest.raises(WalCorrupt, match="bad file magic"):
        WalWriter(storage=mem)


def test_gap_between_files_is_corrupt(mem: MemoryWalStorage) -> None:
    seed_file(mem, 0, file_bytes(0, [b"x"]))
    seed_file(mem, 5, file_bytes(5, [b"y"]))
    with pytest.raises(WalCorrupt, match="previous file ends at 1"):
        WalWriter(storage=mem)


def test_header_that_disagrees_with_the_name_is_corrupt(mem: MemoryWalStorage) -> None:
    mem.create(f"{7:020d}.log", file_bytes(8, [b"x"]))
    with pytest.raises(WalCorrupt, match="the name says 7"):
        WalWriter(storage=mem)


def test_empty_storage_starts_at_seq_zero_and_ignores_foreign_files(mem: MemoryWalStorage) -> None:
    mem.create("notes.txt", b"hello")
    with WalWriter(storage=mem) as writer:
        assert (writer.next_seq, writer.first_seq, writer.size_bytes) == (0, 0, FILE_HEADER_SIZE)
    assert mem.list_files() == ["00000000000000000000.log", "notes.txt"]


def test_entries_detects_damage_after_recovery(tmp_path: Path) -> None:
    with WalWriter(tmp_path) as writer:
        for seq in range(3):
            writer.append(payload_for(seq))
        (log,) = tmp_path.glob("*.log")
        with log.open("r+b") as f:  # bit rot under a running writer
            f.seek(FILE_HEADER_SIZE + 30)
            byte = f.read(1)
            f.seek(FILE_HEADER_SIZE + 30)
            f.write(bytes([byte[0] ^ 1]))
        with pytest.raises(WalCorrupt, match=rf"\.log: frame checksum mismatch at byte {FILE_HEADER_SIZE}"):
            read_all(writer)


def test_recovery_reports_storage_failures_as_wal_errors(mem: MemoryWalStorage) -> None:
    with WalWriter(storage=mem) as writer:
        writer.append(b"x")
    failing = RecordingStorage(mem)
    failing.fail.add("read")
    with pytest.raises(WalError, match=r"memory:test: WAL recovery failed: .*injected read failure"):
        WalWriter(storage=failing)
    with WalWriter(storage=mem) as writer:  # the failed open released the lock
        assert read_all(writer) == [WalEntry(0, b"x")]
