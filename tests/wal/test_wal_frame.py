"""The WAL byte format: round trips, golden bytes, and that damage is always detected."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wal import WalCorrupt, WalEntry, WalError, decode_frames, encode_frame
from wal.frame import (
    FILE_HEADER_SIZE,
    FRAME_HEADER_SIZE,
    MAX_PAYLOAD_BYTES,
    decode_file_header,
    encode_file_header,
    encode_frame_header,
    find_live_frame,
    payload_crc,
    scan_frames,
)

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "wal" / "00000000000000000005.log"
GOLDEN_ENTRIES = [WalEntry(5, b""), WalEntry(6, b"hello, wal"), WalEntry(7, bytes([0, 1, 2, 255]))]


def frames(entries: list[WalEntry]) -> bytes:
    return b"".join(encode_frame(e.seq, e.payload) for e in entries)


# -- layout and golden bytes -----------------------------------------------------------------------


def test_frame_layout_matches_the_documented_byte_table() -> None:
    frame = encode_frame(0x0102030405060708, b"abc")
    magic, version, flags, length, seq, crc = struct.unpack_from("<HBBIQI", frame)
    assert frame[:2] == b"WS"
    assert (magic, version, flags, length, seq) == (0x5357, 1, 0, 3, 0x0102030405060708)
    assert crc == crc32c.crc32c(frame[2:16], crc32c.crc32c(b"abc"))
    assert frame[FRAME_HEADER_SIZE:] == b"abc"
    assert len(frame) == FRAME_HEADER_SIZE + 3 == 23


def test_file_header_layout() -> None:
    header = encode_file_header(42)
    assert len(header) == FILE_HEADER_SIZE == 20
    assert header[:4] == b"SWAL" and header[4] == 1 and header[5:8] == b"\0\0\0"
    assert struct.unpack_from("<Q", header, 8)[0] == 42
    assert struct.unpack_from("<I", header, 16)[0] == crc32c.crc32c(header[:16])
    assert decode_file_header(header, "h") == 42


def test_golden_file_decodes_to_the_known_entries() -> None:
    data = GOLDEN.read_bytes()
    assert decode_file_header(data, str(GOLDEN)) == 5
    entries, valid_len = decode_frames(data[FILE_HEADER_SIZE:], str(GOLDEN), first_seq=5, strict=True)
    assert entries == GOLDEN_ENTRIES
    assert valid_len == len(data) - FILE_HEADER_SIZE


def test_golden_file_is_reproduced_byte_for_byte() -> None:
    assert encode_file_header(5) + frames(GOLDEN_ENTRIES) == GOLDEN.read_bytes()


def test_split_encoding_equals_whole_frame_encoding() -> None:
    payload = b"x" * 1000
    assert encode_frame_header(9, len(payload), payload_crc(payload)) + payload == encode_frame(9, payload)


# -- round trips -----------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(first=st.integers(0, 2**64 - 50), payloads=st.lists(st.binary(max_size=300), max_size=20))
def test_round_trip(first: int, payloads: list[bytes]) -> None:
    entries = [WalEntry(first + i, p) for i, p in enumerate(payloads)]
    buf = frames(entries)
    decoded, valid_len = decode_frames(buf, "prop", first_seq=first, strict=True)
    assert decoded == entries
    assert valid_len == len(buf)


@settings(max_examples=200, deadline=None)
@given(payloads=st.lists(st.binary(min_size=1, max_size=64), min_size=1, max_size=6), data=st.data())
def test_any_truncation_yields_exactly_the_whole_frames_before_the_cut(
    payloads: list[bytes], data: st.DataObject
) -> None:
    entries = [WalEntry(i, p) for i, p in enumerate(payloads)]
    buf = frames(entries)
    cut = data.draw(st.integers(0, len(buf)))
    decoded, valid_len = decode_frames(buf[:cut], "prop", first_seq=0)
    boundaries = [len(frames(entries[:k])) for k in range(len(entries) + 1)]
    whole = max(k for k, b in enumerate(boundaries) if b <= cut)
    assert decoded == entries[:whole]
    assert valid_len == boundaries[whole]


def test_empty_buffer_and_empty_payload() -> None:
    assert decode_frames(b"", "e") == ([], 0)
    assert decode_frames(encode_frame(3, b""), "e") == ([WalEntry(3, b"")], FRAME_HEADER_SIZE)


def test_accepts_bytearray_and_memoryview() -> None:
    buf = frames([WalEntry(0, b"a"), WalEntry(1, b"bc")])
    assert decode_frames(bytearray(buf), "b")[0] == decode_frames(memoryview(buf), "m")[0]


# -- damage is detected, never decoded into a wrong payload ------------------------------------------


@pytest.mark.parametrize("flip", [0x01, 0x80, 0xFF])
def test_every_single_byte_corruption_is_detected(flip: int) -> None:
    entries = [WalEntry(10, b"first payload"), WalEntry(11, b"second"), WalEntry(12, b"")]
    buf = frames(entries)
    starts = [len(frames(entries[:k])) for k in range(len(entries))]
    for pos in range(len(buf)):
        damaged = bytearray(buf)
        damaged[pos] ^= flip
        hit = max(k for k, s in enumerate(starts) if s <= pos)  # the frame holding the damaged byte
        decoded, valid_len = decode_frames(damaged, "c", first_seq=10)
        assert decoded == entries[:hit], f"byte {pos} ^ {flip:#x}"
        assert valid_len == starts[hit]
        with pytest.raises(WalCorrupt, match=r"^c: "):
            decode_frames(damaged, "c", first_seq=10, strict=True)


@pytest.mark.parametrize("flip", [0x01, 0x80, 0xFF])
def test_every_single_byte_corruption_of_a_file_header_is_detected(flip: int) -> None:
    header = encode_file_header(77)
    for pos in range(len(header)):
        damaged = bytearray(header)
        damaged[pos] ^= flip
        with pytest.raises(WalCorrupt, match=r"^src: "):
            decode_file_header(damaged, "src")


def test_short_file_header_is_corrupt_not_an_index_error() -> None:
    for cut in range(FILE_HEADER_SIZE):
        with pytest.raises(WalCorrupt, match="truncated"):
            decode_file_header(encode_file_header(1)[:cut], "short")


def test_seq_discontinuity_stops_the_scan() -> None:
    buf = encode_frame(1, b"a") + encode_frame(3, b"b")
    decoded, valid_len = decode_frames(buf, "gap", first_seq=1)
    assert decoded == [WalEntry(1, b"a")]
    assert valid_len == FRAME_HEADER_SIZE + 1
    assert decode_frames(buf, "gap", first_seq=0)[0] == []


def test_torn_versus_middle_classification() -> None:
    entries = [WalEntry(0, b"aaaa"), WalEntry(1, b"bbbb"), WalEntry(2, b"cccc")]
    buf = frames(entries)
    torn = scan_frames(buf[:-2], first_seq=0)
    assert torn.torn and torn.problem is not None and len(torn.spans) == 2
    zero_tail = scan_frames(buf + bytes(100), first_seq=0)
    assert zero_tail.torn and len(zero_tail.spans) == 3
    middle = bytearray(buf)
    middle[FRAME_HEADER_SIZE + 1] ^= 1  # payload of the first frame, with valid frames after it
    scan = scan_frames(middle, first_seq=0)
    assert not scan.torn and scan.valid_len == 0 and "checksum" in (scan.problem or "")


def test_unknown_version_and_flags_are_rejected_even_with_a_matching_crc() -> None:
    for offset, value in ((2, 2), (3, 1)):
        frame = bytearray(encode_frame(0, b"p"))
        frame[offset] = value
        crc = crc32c.crc32c(bytes(frame[2:16]), crc32c.crc32c(b"p"))
        frame[16:20] = struct.pack("<I", crc)
        assert decode_frames(frame, "v") == ([], 0)


def test_oversized_length_field_is_rejected_without_reading() -> None:
    frame = bytearray(encode_frame(0, b""))
    frame[4:8] = struct.pack("<I", MAX_PAYLOAD_BYTES + 1)
    scan = scan_frames(frame)
    assert scan.spans == [] and "exceeds" in (scan.problem or "")


def test_payload_and_seq_limits() -> None:
    with pytest.raises(WalError, match="exceeds"):
        encode_frame_header(0, MAX_PAYLOAD_BYTES + 1, 0)
    with pytest.raises(WalError, match="outside"):
        encode_frame_header(2**64, 0, 0)
    with pytest.raises(WalError, match="outside"):
        encode_file_header(-1)
    encode_frame_header(2**64 - 1, MAX_PAYLOAD_BYTES, 0)  # the bounds themselves are fine


def test_find_live_frame_skips_older_lives_and_garbage() -> None:
    old = b"".join(encode_frame(s, b"old-%d" % s) for s in range(3, 6))
    live = encode_frame(12, b"live")
    buf = b"\x00" * 7 + old + b"WS garbage" + live + encode_frame(13, b"next")
    assert find_live_frame(buf, 0, 10) == (7 + len(old) + 10, 12)
    assert find_live_frame(buf, 0, 14) is None  # only frames of seqs below it: an earlier life
    torn = live[:-1] + bytes([live[-1] ^ 1])
    assert find_live_frame(old + torn, 0, 10) is None  # a live frame must pass its CRC
