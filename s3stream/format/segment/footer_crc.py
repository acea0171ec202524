"""The footer checksum, both directions: patched in by the writer, checked by every reader.

A damaged Thrift footer can abort the process inside the Parquet library, so readers must verify it
before anything parses it; Parquet has no checksum of its own there. The CRC32C lives in the footer's
key-value metadata (``s3stream.footer_crc32c``: ten ASCII digits, computed with them as ``0000000000``)
so the object stays a plain Parquet file. Both directions are here because they must agree on the
exact Thrift bytes of that entry.
"""

from __future__ import annotations

import crc32c

from s3stream.base.errors import CorruptData, InternalError
from s3stream.format.segment.format import KEY_CRC

__all__ = ["FOOTER_CRC_PLACEHOLDER", "patch_footer_crc", "verify_footer"]

_CRC_PLACEHOLDER = b"0" * 10
#: The footer CRC entry's value as written, before :func:`patch_footer_crc` replaces the digits.
FOOTER_CRC_PLACEHOLDER = _CRC_PLACEHOLDER.decode()
# The footer CRC entry as Thrift compact protocol encodes a KeyValue: field 1 (binary) = key,
# field 2 (binary, length 10) = ten ASCII digits. The writer patches the digits in place.
_CRC_ENTRY = b"\x18" + bytes([len(KEY_CRC)]) + KEY_CRC.encode() + b"\x18\x0a"


def patch_footer_crc(tail: bytearray) -> None:
    """Patch the CRC32C of the Thrift footer (computed with the placeholder digits) into ``tail``.

    ``tail`` ends with the footer, its length and ``PAR1``: the digits are patched before they leave.
    """
    footer_len = int.from_bytes(tail[-8:-4], "little")
    footer_start = len(tail) - 8 - footer_len
    if len(tail) < 8 or footer_start < 0:
        raise InternalError("the Parquet footer was not written in one piece at close")
    footer = bytes(tail[footer_start:-8])
    at = footer.find(_CRC_ENTRY + _CRC_PLACEHOLDER)
    if at < 0 or footer.count(_CRC_ENTRY) != 1:
        raise InternalError("cannot locate the footer CRC entry in the Parquet footer")
    digits = footer_start + at + len(_CRC_ENTRY)
    tail[digits: digits + 10] = b"%010d" % crc32c.crc32c(footer)


def verify_footer(footer: bytes, *, source: str) -> None:
    """Check the footer CRC32C before any Parquet library parses the footer.

    ``footer`` is the Thrift ``FileMetaData`` bytes (between the column chunks and the trailing
    length + ``PAR1``). Parsing a damaged footer can abort the process inside the Parquet library, so
    this runs first.

    Raises:
        CorruptData: the CRC entry is missing, malformed or does not match.
    """
    at = footer.find(_CRC_ENTRY)
    if at < 0 or footer.count(_CRC_ENTRY) != 1:
        raise CorruptData("segment footer has no s3stream CRC entry", source=source)
    digits = at + len(_CRC_ENTRY)
    stored = footer[digits: digits + 10]
    if len(stored) != 10 or not stored.isdigit():
        raise CorruptData("segment footer CRC entry is malformed", source=source)
    if crc32c.crc32c(footer[:digits] + _CRC_PLACEHOLDER + footer[digits + 10:]) != int(stored):
        raise CorruptData("segment footer CRC32C mismatch", source=source)
