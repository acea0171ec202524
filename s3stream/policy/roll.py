"""When the active segment rolls: rules ROLL-1..4 of docs/design/kafka-rules.md, as a pure function.

The roll check happens only on append (ROLL-1): before a batch of ``incoming_bytes`` whose largest record
timestamp is ``incoming_max_ts`` is appended, the active segment rolls if

* (ROLL-1(a)) ``active.size_bytes > segment_bytes - incoming_bytes`` (a segment may be exactly segment.bytes);
* (ROLL-1(b)) it is non-empty and ``time_waited > max_segment_ms - jitter_ms``, where (ROLL-2) ``time_waited`` is
  ``incoming_max_ts - first_batch_max_ts`` when the first batch had a timestamp, else wall time since
  the segment was created; ``max_segment_ms`` is ``min(segment.ms, max.compaction.lag.ms)`` on compacted
  topics (ROLL-3, computed by ``TopicConfig.max_segment_ms``);
* (ROLL-1(d)) the batch's last offset would be more than 2^31-1 past the segment base.

An empty active segment never rolls (ROLL-4: rolling it would re-create the same segment).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ActiveStats", "should_roll"]

_MAX_RELATIVE_OFFSET = 2**31 - 1


@dataclass(frozen=True, slots=True)
class ActiveStats:
    """What the roll rules need to know of the active segment."""

    base_offset: int
    size_bytes: int
    record_count: int
    first_batch_max_ts: int
    created_ms: int
    jitter_ms: int


def should_roll(active: ActiveStats, *, incoming_bytes: int, incoming_max_ts: int, incoming_last_offset: int,
                now_ms: int, segment_bytes: int, max_segment_ms: int) -> bool:
    """True when the active segment must be sealed before the incoming batch (ROLL-1..4)."""
    if active.record_count == 0 and active.size_bytes == 0:
        return False
    if active.size_bytes > segment_bytes - incoming_bytes:
        return True
    if active.first_batch_max_ts >= 0:
        waited = incoming_max_ts - active.first_batch_max_ts
    else:
        waited = now_ms - active.created_ms
    if waited > max_segment_ms - active.jitter_ms:
        return True
    return incoming_last_offset - active.base_offset > _MAX_RELATIVE_OFFSET
