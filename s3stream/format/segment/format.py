"""The segment object format: one partition's sealed records as a Parquet file (both directions).

A segment object is a plain Parquet file of :data:`s3stream.base.records.RECORD_SCHEMA` that Spark, DuckDB or
pyarrow read as is. s3stream adds only conventions on top of Parquet:

* **Row groups are sized by logical bytes** (``row_group_bytes`` of :func:`s3stream.base.records.batch_nbytes`
  worth of records, one record minimum), so reading one offset fetches about one row group.
* **Page checksums** (Parquet's CRC32 per page) are always written; readers of column subsets verify them.
  They cover every data page, hence every key, value and header byte. Readers of whole row groups check
  the row group's CRC32C from the index instead (it also covers the page headers).
* **A footer checksum**: ``s3stream.footer_crc32c`` holds ten ASCII digits, the CRC32C of the whole Thrift
  footer computed with those digits as ``0000000000``; the writer patches them in place after writing.
  Readers check it (:func:`~.footer_crc.verify_footer`) before the Parquet library parses the footer, because a damaged
  footer can abort the process inside it.
* **Footer key-value metadata** (``s3stream.*`` keys, see :data:`META_KEYS`) carries the segment's offset
  range, counts, timestamps and a compact per-row-group index ``[first_offset, last_offset,
  min_timestamp, max_timestamp, num_rows, size_bytes, unkeyed, tombstones, crc32c]``: ``unkeyed`` and
  ``tombstones`` count records without a key and without a value, ``crc32c`` covers the row group's bytes
  (so a reader fetching whole row groups verifies them at memory speed instead of page by page). Format
  version 1, before these three existed, has the first six entries and is still read (them as unknown).
  The offset index and the time index therefore come from the footer alone, and so does knowing that the
  cleaner drops every record of a row group (it then never fetches it); the row groups' byte ranges come
  from Parquet's own column-chunk metadata.

This module holds the format's vocabulary (footer keys, version, the dataclasses both directions share),
so the encoder (:mod:`.writer`), the footer checksum (:mod:`.footer_crc`), the footer parser
(:mod:`.footer`) and the logical record sizes (:mod:`.sizes`) agree on one definition. Encoding is
incremental (:class:`~.writer.SegmentWriter`: tables in, bytes out as row groups complete, so a seal
never holds a whole segment); :func:`~.writer.encode_segment` is the one-table form over the same writer.

Invariants (checked before writing by :class:`~.writer.SegmentWriter` and again after reading by
:func:`~.footer.parse_footer`): offsets strictly increase and lie in ``[base_offset, last_offset]``; row groups are
contiguous byte ranges from byte 4 up to the footer, in offset order, and their row counts and sizes add
up to the segment totals. Zero rows is a valid segment (compaction can empty a range; the range is kept).

Vocabulary: ``size_bytes`` is logical record bytes (what ``segment.bytes`` counts); ``object_size`` is the
length of the encoded object. Everything here is sans-IO: bytes in, values out.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "INDEX_WIDTH",
    "INT_KEYS",
    "KEY_CRC",
    "KEY_FORMAT",
    "KEY_PREFIX",
    "KEY_ROW_GROUPS",
    "META_KEYS",
    "PARQUET_MAGIC",
    "SEGMENT_FORMAT_VERSION",
    "RowGroupInfo",
    "SegmentFooter",
    "SegmentSummary",
]

SEGMENT_FORMAT_VERSION = 2
#: Entries per row group in the footer index, by format version (2 added null counts and a CRC32C).
INDEX_WIDTH = {1: 6, 2: 9}

KEY_PREFIX = "s3stream."
KEY_FORMAT = "s3stream.format"
KEY_ROW_GROUPS = "s3stream.row_groups"
KEY_CRC = "s3stream.footer_crc32c"
#: The integer footer keys, without :data:`KEY_PREFIX`.
INT_KEYS = ("base_offset", "last_offset", "record_count", "size_bytes", "min_timestamp", "max_timestamp",
            "first_batch_max_timestamp")
#: Every ``s3stream.*`` footer key.
META_KEYS = (KEY_FORMAT, *(KEY_PREFIX + k for k in INT_KEYS), KEY_ROW_GROUPS, KEY_CRC)
PARQUET_MAGIC = b"PAR1"


@dataclass(frozen=True, slots=True)
class SegmentSummary:
    """What the writer records in the manifest about an encoded segment."""

    base_offset: int
    last_offset: int
    record_count: int
    size_bytes: int  #: logical bytes (records.batch_nbytes over all rows)
    object_size: int  #: len(encoded bytes)
    max_timestamp: int  #: -1 when there are no records
    min_timestamp: int  #: -1 when there are no records
    first_batch_max_timestamp: int  #: rule ROLL-2, given by the caller; -1 if unknown
    crc32c: int  #: CRC32C of the whole object


@dataclass(frozen=True, slots=True)
class RowGroupInfo:
    """One row group as the footer index describes it; ``[byte_start, byte_end)`` in the object."""

    first_offset: int
    last_offset: int
    min_timestamp: int
    max_timestamp: int
    num_rows: int
    byte_start: int
    byte_end: int
    size_bytes: int  #: logical bytes of its records
    unkeyed: int | None = None  #: records with a null key (None: format 1, whose index did not count them)
    tombstones: int | None = None  #: records with a null value (None: format 1)
    crc32c: int | None = None  #: CRC32C of the bytes ``[byte_start, byte_end)`` (None: format 1)


@dataclass(frozen=True, slots=True)
class SegmentFooter:
    """The validated footer: segment totals plus the offset/time index."""

    base_offset: int
    last_offset: int
    record_count: int
    size_bytes: int
    min_timestamp: int
    max_timestamp: int
    first_batch_max_timestamp: int
    row_groups: tuple[RowGroupInfo, ...]
    version: int = SEGMENT_FORMAT_VERSION  #: the format version the object was written in
