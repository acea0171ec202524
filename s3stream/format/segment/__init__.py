"""Segment objects: sealed per-partition records as Parquet, and their ranged reader (sans-IO).

``SegmentWriter`` turns records into object bytes incrementally (``encode_segment``: one table, in
memory) plus a :class:`SegmentSummary` for the manifest;
``SegmentReader`` reads them back by offset or timestamp through a ``fetch(start, end)`` callable,
fetching only the footer and the row groups it needs. See ``docs/formats.md`` for the byte layout.
"""

from s3stream.format.segment.format import (
    SEGMENT_FORMAT_VERSION,
    RowGroupInfo,
    SegmentFooter,
    SegmentSummary,
    SegmentWriter,
    encode_segment,
    row_sizes,
)
from s3stream.format.segment.ranged import Fetch, RangedFile
from s3stream.format.segment.reader import FOOTER_FETCH_BYTES, SegmentReader

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
