"""Which segments are rewritten together: rule CLEAN-GRP-1, pure.

Every sealed segment overlapping ``[0, end_offset)`` is rewritten — the clean section too, so old values
of keys updated in the dirty section disappear (CLEAN-GRP-1). Oldest first, a segment joins the
current group while the group's pre-clean size stays within ``segment.bytes`` and its offset span
within 2^31-1 (an empty segment always joins: KAFKA-12889). Each group becomes one new segment with the
first source's base and the last source's last offset (CLEAN-GRP-2), so the log's offset ranges are kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

__all__ = ["SegmentLike", "group_segments"]

_MAX_SPAN = 2**31 - 1


class SegmentLike(Protocol):
    @property
    def base_offset(self) -> int: ...
    @property
    def end_offset(self) -> int: ...
    @property
    def size_bytes(self) -> int: ...


S = TypeVar("S", bound=SegmentLike)


def group_segments(segments: Sequence[S], *, end_offset: int, max_bytes: int,
                                   upper: int) -> list[list[S]]:
    """Groups of consecutive segments to rewrite, over segments with ``base_offset < end_offset``."""
    todo = [s for s in segments if s.base_offset < end_offset]
    groups: list[list[S]] = []
    i = 0
    while i < len(todo):
        group = [todo[i]]
        size = todo[i].size_bytes
        i += 1
        while i < len(todo):
            cand = todo[i]
            last_estimate = (todo[i + 1].base_offset - 1) if i + 1 < len(todo) else upper - 1
            if size + cand.size_bytes > max_bytes:
                break
            if cand.size_bytes > 0 and last_estimate - group[0].base_offset > _MAX_SPAN:
                break
            group.append(cand)
            size += cand.size_bytes
            i += 1
        groups.append(group)
    return groups
