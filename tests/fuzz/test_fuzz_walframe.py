"""Fuzzing the local WAL's frame reader and recovery (``wal/``): file headers, frame scans and the search
for a live frame take any bytes and answer, or raise WalCorrupt (strict decoding); recovery of any
directory contents either refuses with WalCorrupt/WalError and changes nothing, or recovers a log whose
entries are a prefix of what was written, never a wrong payload. (s3stream maps these errors onto its own:
``tests/fuzz/test_fuzz_localwal.py`` drives them through a store.)"""

from __future__ import annotations

import struct

import crc32c
from hypothesis import given
from hypothesis import strategies as st

from wal import MemoryWalStorage, WalCorrupt, WalEntry, WalError, decode_frames, encode_frame
from wal.frame import (
    FILE_HEADER_SIZE,
    FRAME_HEADER_SIZE,
    decode_file_header,
    encode_file_header,
    find_live_frame,
    scan_frames,
)
from wal.recovery import FileExtent, RecoveredWal, file_name, find_damage, read_entries, recover

from .kit import FUZZ, mutated, mutations, typed_or_value

_FRAME = struct.Struct("<HBBIQI")  # magic, version, flags, length, seq, crc
ENTRIES = [WalEntry(40 + i, bytes([i]) * (3 * i)) for i in range(6)]


def _frames(entries: list[WalEntry]) -> bytes:
    return b"".join(encode_frame(e.seq, e.payload) for e in entries)


def _assert_frames_are_genuine(buf: bytes, spans: list[tuple[int, int, int]]) -> None:
    """Every span a scan accepted is exactly the frame :func:`encode_frame` makes of its seq and payload."""
    for seq, start, end in spans:
        assert buf[start - FRAME_HEADER_SIZE:end] == encode_frame(seq, buf[start:end])


@FUZZ
@given(st.binary(max_size=64))
def test_file_headers_of_any_bytes(data: bytes) -> None:
    got = typed_or_value(lambda: decode_file_header(data, "f.log"), WalCorrupt)
    if isinstance(got, int):
        assert encode_file_header(got) == data[:FILE_HEADER_SIZE]
    else:
        assert str(got).startswith("f.log: ")


@FUZZ
@given(st.binary(max_size=400), st.none() | st.integers(0, 2**64 - 1), st.booleans())
def test_frames_of_any_bytes(data: bytes, first_seq: int | None, strict: bool) -> None:
    scan = scan_frames(data, first_seq=first_seq)
    assert 0 <= scan.valid_len <= len(data) and (scan.problem is None) == (scan.valid_len == len(data))
    _assert_frames_are_genuine(data, scan.spans)
    got = typed_or_value(lambda: decode_frames(data, "f.log", first_seq=first_seq, strict=strict), WalCorrupt)
    if isinstance(got, WalCorrupt):
        assert strict and scan.problem is not None
    else:
        entries, valid_len = got  # type: ignore[misc]
        assert valid_len == scan.valid_len and [e.seq for e in entries] == [s for s, _, _ in scan.spans]


@FUZZ
@given(mutations(), st.booleans())
def test_damaged_frames_decode_to_a_prefix_of_what_was_written(ops: list[tuple[str, int, int, int]],
                                                               strict: bool) -> None:
    good = _frames(ENTRIES)
    bad = mutated(good, ops)
    got = typed_or_value(lambda: decode_frames(bad, "f.log", first_seq=ENTRIES[0].seq, strict=strict), WalCorrupt)
    if isinstance(got, WalCorrupt):
        assert strict
        return
    entries, _ = got  # type: ignore[misc]
    assert entries == ENTRIES[:len(entries)]


@FUZZ
@given(which=st.integers(0, len(ENTRIES) - 1), length=st.integers(0, 2**32 - 1), seq=st.integers(0, 2**64 - 1),
       version=st.integers(0, 255), flags=st.integers(0, 255), what=st.sets(
           st.sampled_from(["length", "seq", "version", "flags"]), min_size=1))
def test_lying_frame_headers_behind_a_patched_crc(which: int, length: int, seq: int, version: int, flags: int,
                                                  what: set[str]) -> None:
    """A header field changed and the frame's CRC recomputed over it: the bounds, version, flag and seq checks
    hold where the CRC cannot (a forged frame is accepted only when it is well-formed): the entries before it
    are intact and nothing is read past the buffer."""
    good = _frames(ENTRIES)
    pos = len(_frames(ENTRIES[:which]))
    magic, v, f, n, s, _ = _FRAME.unpack_from(good, pos)
    fields = (version if "version" in what else v, flags if "flags" in what else f,
              length if "length" in what else n, seq if "seq" in what else s)
    payload = good[pos + FRAME_HEADER_SIZE: pos + FRAME_HEADER_SIZE + fields[2]]
    crc = crc32c.crc32c(struct.pack("<BBIQ", *fields), crc32c.crc32c(payload))
    bad = good[:pos] + _FRAME.pack(magic, *fields, crc) + good[pos + FRAME_HEADER_SIZE:]
    scan = scan_frames(bad, first_seq=ENTRIES[0].seq)
    _assert_frames_are_genuine(bad, scan.spans)
    entries, _ = decode_frames(bad, "f.log", first_seq=ENTRIES[0].seq)
    assert entries[:which] == ENTRIES[:which]
    if fields[0] != 1 or fields[1] != 0 or fields[3] != ENTRIES[which].seq or fields[2] > len(bad) - pos - 20:
        assert entries == ENTRIES[:which]  # an impossible header ends the valid prefix there


@FUZZ
@given(st.binary(max_size=300), st.integers(0, 400), st.integers(0, 2**64 - 1))
def test_find_live_frame_of_any_bytes(data: bytes, start: int, min_seq: int) -> None:
    found = find_live_frame(data, start, min_seq)
    if found is not None:
        pos, seq = found
        assert pos >= start and seq >= min_seq
        assert scan_frames(data[pos:], first_seq=seq).spans[0][0] == seq


def _storage(files: dict[str, bytes]) -> MemoryWalStorage:
    storage = MemoryWalStorage("fuzz")
    for name, data in files.items():
        storage.create(name, data)
    return storage


def _snapshot(storage: MemoryWalStorage) -> dict[str, bytes]:
    return {name: storage.read(name) for name in storage.list_files()}


@FUZZ
@given(st.dictionaries(st.sampled_from([file_name(0), file_name(40), file_name(43), "garbage.log", "LOCK"]),
                       st.binary(max_size=120), max_size=3))
def test_recovery_of_arbitrary_files(files: dict[str, bytes]) -> None:
    _check_recovery(files, written=[])


@FUZZ
@given(st.integers(1, len(ENTRIES) - 1), mutations(3), st.sampled_from(["first", "second", "both"]))
def test_recovery_of_damaged_files(split: int, ops: list[tuple[str, int, int, int]], where: str) -> None:
    """Two files of a valid log, one or both damaged: recovery refuses (changing nothing) or recovers a prefix."""
    first, second = ENTRIES[:split], ENTRIES[split:]
    files = {file_name(first[0].seq): encode_file_header(first[0].seq) + _frames(first),
             file_name(second[0].seq): encode_file_header(second[0].seq) + _frames(second)}
    names = sorted(files)
    for i, name in enumerate(names):
        if where == "both" or where == ("first", "second")[i]:
            files[name] = mutated(files[name], ops)
    _check_recovery(files, written=ENTRIES)


def _check_recovery(files: dict[str, bytes], written: list[WalEntry]) -> None:
    storage = _storage(files)
    before = _snapshot(storage)
    damage = find_damage(storage)
    assert _snapshot(storage) == before  # looking changes nothing
    got = typed_or_value(lambda: recover(storage), WalCorrupt, WalError)
    if isinstance(got, WalError):
        assert isinstance(got, WalCorrupt) and damage is not None and str(got) == str(damage)
        assert _snapshot(storage) == before  # refused: nothing was changed
        return
    assert damage is None and isinstance(got, RecoveredWal)
    files = got.files
    ends = [f.first_seq for f in files[1:]] + [got.next_seq]
    extents = [FileExtent(f.name, f.first_seq, end, f.size_bytes) for f, end in zip(files, ends, strict=True)]
    entries = list(read_entries(storage, extents, 0))
    if written:
        assert entries == written[:len(entries)]  # a torn tail may go; nothing before it, nothing changed
    assert recover(storage).next_seq == got.next_seq  # recovery is idempotent
