"""Writing one segment object: encode the records as Parquet, PUT under a fresh unique key.

The key embeds a ULID, so a retried or zombie seal can never overwrite anything; an object whose
manifest commit never happens is an orphan that GC removes after ``orphan_min_age_ms``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from s3stream import layout
from s3stream.manifest.model import SegmentRef
from s3stream.segment import encode_segment

if TYPE_CHECKING:
    from s3stream.runtime import Runtime

__all__ = ["write_segment"]


def write_segment(rt: Runtime, *, topic_id: str, partition: int, table: pa.Table, base_offset: int,
                  last_offset: int, first_batch_max_ts: int, cleaned: bool = False,
                  crash_point: str = "seal.after_segment_put") -> SegmentRef:
    """Encode and upload ``table`` as the segment covering ``[base_offset, last_offset]``."""
    data, summary = encode_segment(table, base_offset=base_offset, last_offset=last_offset,
                                   first_batch_max_timestamp=first_batch_max_ts,
                                   row_group_bytes=rt.settings.segment_row_group_bytes)
    now = rt.clock.now_ms()
    key = layout.segment_key(topic_id, partition, base_offset, rt.ids.ulid(now))
    rt.objstore.put(key, data)
    rt.crash.hit(crash_point)
    return SegmentRef(key=key, base_offset=base_offset, last_offset=last_offset, size_bytes=summary.size_bytes,
                      object_size=summary.object_size, record_count=summary.record_count,
                      max_timestamp=summary.max_timestamp, first_batch_max_timestamp=first_batch_max_ts,
                      created_ms=now, crc32c=summary.crc32c, cleaned=cleaned)
