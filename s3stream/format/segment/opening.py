"""Opening a segment object, and what an opened one knows: footer, Parquet metadata, chunk byte spans.

Every reader pays this before its first row, so it must cost one request for most segments: the last
:data:`FOOTER_FETCH_BYTES` are fetched at once (a second GET only when the footer is larger) and primed
into the reader's file, from which pyarrow then parses the metadata without fetching again. The footer's
CRC32C is checked before pyarrow sees it, since parsing damaged Thrift can abort the process.
Everything derived from the footer alone (the Parquet files, the byte span of each row group's column
chunks, how a whole group's CRC32C replaces page checksums when decoding) lives on :class:`OpenSegment`,
so the reader keeps only its stream state.
"""

from __future__ import annotations

import struct

import crc32c
import pyarrow as pa
import pyarrow.parquet as pq

from s3stream.base.errors import CorruptData
from s3stream.format.segment.buffered import Span, chunk_bounds, decode_in_memory
from s3stream.format.segment.checks import ALL_COLUMN_SET, decoding
from s3stream.format.segment.footer import parse_footer
from s3stream.format.segment.footer_crc import verify_footer
from s3stream.format.segment.format import SegmentFooter
from s3stream.format.segment.ranged import RangedFile

__all__ = ["FOOTER_FETCH_BYTES", "OpenSegment", "open_segment"]

#: Bytes fetched from the end of the object to find the footer (one fetch for most segments).
FOOTER_FETCH_BYTES = 64 << 10


class OpenSegment:
    """An opened segment: its validated footer, its Parquet file two ways (page checksums verified, or
    not: for row groups whose CRC32C was checked), and the byte spans of row-group chunks derived from them.

    Not thread-safe: the reader serializes access (the spans are computed once per column set).
    """

    def __init__(self, verified: pq.ParquetFile, crc_checked: pq.ParquetFile, footer: SegmentFooter) -> None:
        self.verified = verified
        self.crc_checked = crc_checked
        self.footer = footer
        self.groups = footer.row_groups
        self.last_offsets = [g.last_offset for g in footer.row_groups]
        self._spans: dict[tuple[str, ...], list[Span]] = {}  # byte span of each row group, per column set

    def spans_for(self, columns: tuple[str, ...]) -> list[Span]:
        """The byte span of every row group's chunks of ``columns`` (from the footer, computed once)."""
        spans = self._spans.get(columns)
        if spans is None:
            meta = self.verified.metadata
            spans = [chunk_bounds(meta.row_group(i), columns) for i in range(meta.num_row_groups)]
            self._spans[columns] = spans
        return spans

    def decode_cached(self, file: RangedFile, groups: list[int], columns: tuple[str, ...], source: str) -> pa.Table:
        """Row groups ``groups`` (their bytes all cached in ``file``) decoded in one pyarrow call.

        The cached extents are decoded as native buffers (:func:`segment.buffered.decode_in_memory`):
        through the Python file every read pyarrow made had to take the GIL back from the fetch threads
        (measured with one busy thread: 87 MB/s read per chunk, 683 MB/s pre-buffered, ~4.7 GB/s idle).
        A whole group (every column) is checked against its CRC32C from the footer index and decoded
        without page checksums (pyarrow decodes exactly the bytes checked); a column subset is decoded
        verifying its pages' CRCs.
        """
        infos = self.groups
        spans = self.spans_for(columns)
        pf = self.verified
        if set(columns) == ALL_COLUMN_SET and all(infos[g].crc32c is not None for g in groups):
            for g in groups:
                # ~40 us a MiB: holding the GIL is cheaper than waiting to take it back from fetch threads
                if crc32c.crc32c(file.view(*spans[g]), 0, 0) != infos[g].crc32c:
                    raise CorruptData(f"row group {g} fails its CRC32C", source=source)
            pf = self.crc_checked
        table = decode_in_memory(pf.metadata, file.extents(), spans, groups, columns,
                                 verify_pages=pf is self.verified)
        return table if table is not None else pf.read_row_groups(groups, columns=list(columns), use_threads=False)


def open_segment(file: RangedFile, object_size: int, source: str) -> OpenSegment:
    """Open the segment ``file`` reads (its footer bytes stay cached in it).

    Raises:
        CorruptData: the footer is missing, too large for the object, fails its CRC32C or is invalid.
    """
    with decoding(file, source):
        _prime_footer(file, object_size, source)
        pf = pq.ParquetFile(file, page_checksum_verification=True, pre_buffer=True)
        footer = parse_footer(pf.metadata, pf.schema_arrow, object_size, source=source)
        checked = pq.ParquetFile(file, metadata=pf.metadata, page_checksum_verification=False, pre_buffer=True)
    return OpenSegment(pf, checked, footer)


def _prime_footer(file: RangedFile, size: int, source: str) -> None:
    if size < 12:
        raise CorruptData(f"object of {size} bytes is too small for a segment", source=source)
    start = max(0, size - FOOTER_FETCH_BYTES)
    tail = bytes(file.fetch(start, size))  # the footer tail: small, parsed as bytes
    if tail[-4:] != b"PAR1":
        raise CorruptData("missing Parquet magic at the end of the object", source=source)
    footer_len = struct.unpack("<I", tail[-8:-4])[0]
    footer_start = size - 8 - footer_len
    if footer_start < 4:
        raise CorruptData(f"footer length {footer_len} exceeds the object", source=source)
    if footer_start < start:
        tail = bytes(file.fetch(footer_start, start)) + tail
        start = footer_start
    verify_footer(tail[footer_start - start: len(tail) - 8], source=source)
    file.prime(start, tail)
