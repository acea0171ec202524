"""Segment objects: sealed per-partition records as Parquet, and their ranged reader (sans-IO).

``encode_segment`` turns records into object bytes plus a :class:`SegmentSummary` for the manifest;
``SegmentReader`` reads them back by offset or timestamp through a ``fetch(start, end)`` callable,
fetching only the footer and the row groups it needs. See ``docs/formats.md`` for the byte layout.
"""

from s3stream.segment.format import (
    SEGMENT_FORMAT_VERSION,
    RowGroupInfo,
    SegmentFooter,
    SegmentSummary,
    encode_segment,
    row_sizes,
)
from s3stream.segment.ranged import Fetch, RangedFile
from s3stream.segment.reader import FOOTER_FETCH_BYTES, SegmentReader

__all__ = [
    "FOOTER_FETCH_BYTES",
    "SEGMENT_FORMAT_VERSION",
    "Fetch",
    "RangedFile",
    "RowGroupInfo",
    "SegmentFooter",
    "SegmentReader",
    "SegmentSummary",
    "encode_segment",
    "row_sizes",
]
