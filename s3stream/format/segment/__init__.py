"""Segment objects: sealed per-partition records as Parquet, and their ranged reader (sans-IO).

``SegmentWriter`` turns records into object bytes incrementally (``encode_segment``: one table, in
memory) plus a :class:`SegmentSummary` for the manifest;
``SegmentReader`` reads them back by offset or timestamp through a ``fetch(start, end)`` callable,
fetching only the footer and the row groups it needs. See ``docs/formats.md`` for the byte layout.

Modules: ``format`` (the conventions and the types both directions share), ``writer`` (encoding),
``sizes`` (logical record sizes), ``footer_crc`` and ``footer`` (the footer's checksum and index),
``codec`` (per-column compression), ``reader`` (ranged reads) over ``opening`` (the footer fetch),
``readahead`` (the fetch plan), ``budget`` (record/byte budgets), ``checks`` (what every read verifies),
``oneshot`` (whole-object and picked-row-group reads), ``ranged`` (the cached ranged file) and
``buffered`` (decoding cached bytes without the GIL).
"""

from s3stream.format.segment.format import SEGMENT_FORMAT_VERSION, RowGroupInfo, SegmentFooter, SegmentSummary
from s3stream.format.segment.opening import FOOTER_FETCH_BYTES
from s3stream.format.segment.ranged import Fetch, RangedFile
from s3stream.format.segment.reader import SegmentReader
from s3stream.format.segment.sizes import row_sizes
from s3stream.format.segment.writer import SegmentWriter, encode_segment

__all__ = [
    "FOOTER_FETCH_BYTES",
    "SEGMENT_FORMAT_VERSION",
    "Fetch",
    "RangedFile",
    "RowGroupInfo",
    "SegmentFooter",
    "SegmentReader",
    "SegmentSummary",
    "SegmentWriter",
    "encode_segment",
    "row_sizes",
]
