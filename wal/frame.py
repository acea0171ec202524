"""The local WAL's byte format: pure encode/decode of file headers and entry frames (sans-IO).

A WAL file is one file header followed by frames, back to back, with consecutive seqs starting at the
header's ``first_seq``. Integers are little-endian.

File header (20 bytes)::

    offset  size  type   field
    0       4     bytes  magic       b"SWAL"
    4       1     u8     version     1
    5       1     u8     flags       0 (reserved; anything else is rejected)
    6       2     u16    reserved    0
    8       8     u64    first_seq   seq of the file's first frame (also the file's name)
    16      4     u32    crc         CRC32C of bytes [0, 16)

Frame (20-byte header, then the payload)::

    offset  size  type   field
    0       2     u16    magic       0x5357 (bytes 57 53, "WS")
    2       1     u8     version     1
    3       1     u8     flags       0 (reserved; anything else is rejected)
    4       4     u32    length      payload bytes, <= MAX_PAYLOAD_BYTES
    8       8     u64    seq         the entry's sequence number
    16      4     u32    crc         CRC32C(payload), continued over header bytes [2, 16)
    20      length       payload     opaque bytes (s3stream decides what they mean)

Why the CRC runs over the payload *first*: the payload checksum (the expensive part) does not depend on
the seq, so appending threads compute it in parallel, outside the writer's lock, and only the 14 header
bytes (version, flags, length, seq) are folded in once the seq is assigned. The CRC still covers every
byte of the frame except the magic (checked by value) and itself.

Invariants: a frame decodes only if magic, version, flags, length bound, CRC and seq continuity all hold;
decoders never index past the buffer and never return a payload whose CRC failed. A scan stops at the
first bad frame and says whether the damage looks like a torn tail (the bad frame reaches the end of the
data, or only zero bytes follow) or like corruption in the middle; :func:`find_live_frame` says whether
a valid frame of the current seqs follows it; the caller decides what to do.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

from wal.errors import WalCorrupt, WalError

__all__ = [
    "FILE_HEADER_SIZE",
    "FORMAT_VERSION",
    "FRAME_HEADER_SIZE",
    "MAX_PAYLOAD_BYTES",
    "FrameScan",
    "WalEntry",
    "decode_file_header",
    "decode_frames",
    "encode_file_header",
    "encode_frame",
    "encode_frame_header",
    "find_live_frame",
    "payload_crc",
    "scan_frames",
]

FORMAT_VERSION = 1
MAX_PAYLOAD_BYTES = 256 * 1024 * 1024
_MAX_SEQ = (1 << 64) - 1

_FILE_MAGIC = b"SWAL"
_FILE_HEADER = struct.Struct("<4sBBHQ")  # magic, version, flags, reserved, first_seq
_FILE_CRC = struct.Struct("<I")
FILE_HEADER_SIZE = _FILE_HEADER.size + _FILE_CRC.size

_FRAME_MAGIC = 0x5357
_FRAME_MAGIC_BYTES = struct.pack("<H", _FRAME_MAGIC)
_FRAME_FIELDS = struct.Struct("<BBIQ")  # version, flags, length, seq: the CRC'd header bytes [2, 16)
_FRAME_HEADER = struct.Struct("<HBBIQI")  # magic, version, flags, length, seq, crc
FRAME_HEADER_SIZE = _FRAME_HEADER.size

Buf = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True)
class WalEntry:
    """One durable entry: its sequence number and its opaque payload."""

    seq: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class FrameScan:
    """The result of scanning a buffer of frames.

    ``spans`` holds ``(seq, payload_start, payload_end)`` for each valid frame, in order;
    ``valid_len`` is the length of the valid prefix; ``problem`` says why the scan stopped early
    (``None`` when the whole buffer is valid) and ``torn`` whether that looks like a torn tail.
    """

    spans: list[tuple[int, int, int]]
    valid_len: int
    problem: str | None
    torn: bool


def payload_crc(payload: Buf) -> int:
    """CRC32C of a payload: the seq-independent part of a frame's checksum."""
    return crc32c.crc32c(payload)


def encode_frame_header(seq: int, length: int, crc_of_payload: int) -> bytes:
    """The 20-byte frame header for a payload of ``length`` bytes whose CRC32C is ``crc_of_payload``.

    Raises:
        WalError: the seq is outside u64 or the payload is larger than ``MAX_PAYLOAD_BYTES``.
    """
    if not 0 <= seq <= _MAX_SEQ:
        raise WalError(f"WAL seq {seq} is outside [0, 2**64)")
    if not 0 <= length <= MAX_PAYLOAD_BYTES:
        raise WalError(f"WAL payload of {length} bytes exceeds the {MAX_PAYLOAD_BYTES}-byte limit")
    fields = _FRAME_FIELDS.pack(FORMAT_VERSION, 0, length, seq)
    crc = crc32c.crc32c(fields, crc_of_payload)
    return _FRAME_MAGIC_BYTES + fields + _FILE_CRC.pack(crc)


def encode_frame(seq: int, payload: Buf) -> bytes:
    """One complete frame (header and payload) as bytes."""
    return encode_frame_header(seq, len(payload), payload_crc(payload)) + bytes(payload)


def encode_file_header(first_seq: int) -> bytes:
    """The 20-byte header that starts every WAL file."""
    if not 0 <= first_seq <= _MAX_SEQ:
        raise WalError(f"WAL seq {first_seq} is outside [0, 2**64)")
    body = _FILE_HEADER.pack(_FILE_MAGIC, FORMAT_VERSION, 0, 0, first_seq)
    return body + _FILE_CRC.pack(crc32c.crc32c(body))


def decode_file_header(buf: Buf, source: str) -> int:
    """The ``first_seq`` of a WAL file, from its first bytes.

    Raises:
        WalCorrupt: (naming ``source``) the header is short, or its magic, version, flags or CRC is bad.
    """
    if len(buf) < FILE_HEADER_SIZE:
        raise WalCorrupt(f"file header truncated ({len(buf)} of {FILE_HEADER_SIZE} bytes)", source=source)
    view = memoryview(buf)
    magic, version, flags, reserved, first_seq = _FILE_HEADER.unpack_from(view, 0)
    (crc,) = _FILE_CRC.unpack_from(view, _FILE_HEADER.size)
    if magic != _FILE_MAGIC:
        raise WalCorrupt(f"bad file magic {bytes(magic)!r}", source=source)
    if crc32c.crc32c(view[: _FILE_HEADER.size]) != crc:
        raise WalCorrupt("file header checksum mismatch", source=source)
    if version != FORMAT_VERSION:
        raise WalCorrupt(f"unsupported WAL format version {version}", source=source)
    if flags != 0 or reserved != 0:
        raise WalCorrupt(f"unknown file header flags 0x{flags:02x}/0x{reserved:04x}", source=source)
    return int(first_seq)


def scan_frames(buf: Buf, *, first_seq: int | None = None, base: int = 0) -> FrameScan:
    """Validate the frames in ``buf`` (which starts at a frame boundary), stopping at the first bad one.

    Args:
        buf: frame bytes, e.g. a WAL file without its header.
        first_seq: when given, the first frame must carry this seq; later frames always continue by one.
        base: where ``buf`` starts in its file: ``problem`` names the bad frame's byte offset in the file.
    """
    view = memoryview(buf)
    total = len(view)
    spans: list[tuple[int, int, int]] = []
    expected = first_seq
    pos = 0
    while pos < total:
        try:
            seq, end = _check_frame(view, pos, expected)
        except _BadFrame as bad:
            return FrameScan(spans, pos, f"{bad.problem} at byte {base + pos}", _looks_torn(view, pos, bad.end))
        spans.append((seq, pos + FRAME_HEADER_SIZE, end))
        expected = seq + 1
        pos = end
    return FrameScan(spans, pos, None, False)


def decode_frames(
    buf: Buf, source: str, *, first_seq: int | None = None, strict: bool = False
) -> tuple[list[WalEntry], int]:
    """The entries of the valid prefix of ``buf`` and that prefix's length.

    Args:
        buf: frame bytes starting at a frame boundary.
        source: names the bytes' origin in errors (a file path).
        first_seq: when given, the seq the first frame must carry.
        strict: raise instead of stopping when anything after the valid prefix remains.

    Raises:
        WalCorrupt: only when ``strict`` and some bytes do not decode.
    """
    scan = scan_frames(buf, first_seq=first_seq)
    if strict and scan.problem is not None:
        raise WalCorrupt(scan.problem, source=source)
    view = memoryview(buf)
    entries = [WalEntry(seq, bytes(view[start:end])) for seq, start, end in scan.spans]
    return entries, scan.valid_len


def find_live_frame(buf: bytes | bytearray, start: int, min_seq: int) -> tuple[int, int] | None:
    """``(position, seq)`` of the first valid frame at or after ``start`` whose seq is at least ``min_seq``.

    Recovery asks this after the first bad frame (at ``start``, where seq ``min_seq`` was due) to tell a
    torn tail from damage: a crash cuts only the last write, so nothing valid of the current seqs can
    follow it, while entries written after a damaged one are still there. Older bytes of a reused file
    are frames too, but of an earlier life: their seqs are below every live one, so they never count.
    Cost: one ``find`` per magic occurrence, a header unpack each, a CRC only for a live seq.
    """
    total = len(buf)
    view = memoryview(buf)
    pos = start
    while (pos := buf.find(_FRAME_MAGIC_BYTES, pos)) >= 0 and pos + FRAME_HEADER_SIZE <= total:
        _, version, flags, length, seq, crc = _FRAME_HEADER.unpack_from(view, pos)
        end = pos + FRAME_HEADER_SIZE + length
        if (version == FORMAT_VERSION and flags == 0 and seq >= min_seq and length <= MAX_PAYLOAD_BYTES and end <= total
                and crc32c.crc32c(view[pos + 2 : pos + 16], crc32c.crc32c(view[pos + FRAME_HEADER_SIZE : end])) == crc):
            return pos, int(seq)
        pos += 1
    return None


class _BadFrame(Exception):
    """Why the frame at a position is bad, and where it ends when its length field is plausible."""

    def __init__(self, problem: str, end: int | None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.end = end


def _check_frame(view: memoryview, pos: int, expected_seq: int | None) -> tuple[int, int]:
    """``(seq, end)`` of the valid frame at ``pos``; raises :class:`_BadFrame` otherwise."""
    total = len(view)
    if total - pos < FRAME_HEADER_SIZE:
        raise _BadFrame("incomplete frame header", total)
    magic, version, flags, length, seq, crc = _FRAME_HEADER.unpack_from(view, pos)
    if magic != _FRAME_MAGIC:
        raise _BadFrame(f"bad frame magic 0x{magic:04x}", None)
    if version != FORMAT_VERSION:
        raise _BadFrame(f"unsupported frame version {version}", None)
    if flags != 0:
        raise _BadFrame(f"unknown frame flags 0x{flags:02x}", None)
    if length > MAX_PAYLOAD_BYTES:
        raise _BadFrame(f"frame length {length} exceeds the limit", None)
    end = pos + FRAME_HEADER_SIZE + length
    if end > total:
        raise _BadFrame(f"frame of {length} payload bytes runs past the end ({total - pos} bytes left)", end)
    actual = crc32c.crc32c(view[pos + 2 : pos + 16], crc32c.crc32c(view[pos + FRAME_HEADER_SIZE : end]))
    if actual != crc:
        raise _BadFrame("frame checksum mismatch", end)
    if expected_seq is not None and seq != expected_seq:
        raise _BadFrame(f"frame seq {seq} where {expected_seq} was expected", end)
    return int(seq), end


def _looks_torn(view: memoryview, pos: int, end: int | None) -> bool:
    """Whether damage at ``pos`` is explained by a crash cutting the last write short."""
    total = len(view)
    if end is not None and end >= total:
        return True
    return view[pos:] == bytes(total - pos)
