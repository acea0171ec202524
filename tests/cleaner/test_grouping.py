"""Grouping of segments to rewrite together: rule CLEAN-GRP-1 (KT-35 empty segments, KAFKA-12889)."""

from __future__ import annotations

from dataclasses import dataclass

from cleaner.grouping import group_segments


@dataclass(frozen=True)
class Seg:
    base_offset: int
    end_offset: int
    size_bytes: int


def chain(*spec: tuple[int, int]) -> list[Seg]:
    """Contiguous segments from (offset span, size) pairs."""
    out: list[Seg] = []
    base = 0
    for span, size in spec:
        out.append(Seg(base, base + span, size))
        base += span
    return out


def bases(groups: list[list[Seg]]) -> list[list[int]]:
    return [[s.base_offset for s in g] for g in groups]


def test_groups_fill_up_to_segment_bytes_inclusive() -> None:
    segs = chain((10, 40), (10, 60), (10, 50), (10, 50), (10, 1))
    assert bases(group_segments(segs, end_offset=50, max_bytes=100, upper=50)) == [[0, 10], [20, 30], [40]]


def test_only_segments_below_the_end_offset_are_rewritten() -> None:
    segs = chain((10, 1), (10, 1), (10, 1))
    assert bases(group_segments(segs, end_offset=15, max_bytes=100, upper=30)) == [[0, 10]]
    assert bases(group_segments(segs, end_offset=10, max_bytes=100, upper=30)) == [[0]]


def test_a_segment_larger_than_segment_bytes_is_its_own_group() -> None:
    segs = chain((10, 500), (10, 10), (10, 10))
    assert bases(group_segments(segs, end_offset=30, max_bytes=100, upper=30)) == [[0], [10, 20]]


def test_kt35_empty_segments_always_merge_even_past_the_offset_span() -> None:
    huge = 2**31
    segs = chain((10, 5), (huge, 0), (huge, 0), (10, 5))
    groups = group_segments(segs, end_offset=segs[-1].end_offset, max_bytes=100, upper=segs[-1].end_offset)
    # the empty ones join; the last non-empty one would stretch the span past 2^31-1
    assert bases(groups) == [[0, 10, 10 + huge], [10 + 2 * huge]]


def test_offset_span_limit_splits_non_empty_segments() -> None:
    segs = chain((2**31 - 10, 5), (100, 5))
    groups = group_segments(segs, end_offset=segs[-1].end_offset, max_bytes=100, upper=segs[-1].end_offset)
    assert bases(groups) == [[0], [2**31 - 10]]


def test_no_segments() -> None:
    assert group_segments([], end_offset=10, max_bytes=100, upper=10) == []


def test_every_segment_appears_once_in_order() -> None:
    segs = chain(*[(7, s) for s in (3, 90, 0, 0, 12, 88, 40, 0, 61, 1)])
    groups = group_segments(segs, end_offset=segs[-1].end_offset, max_bytes=100, upper=segs[-1].end_offset)
    flat = [s for g in groups for s in g]
    assert flat == segs
    assert all(sum(s.size_bytes for s in g) <= 100 or len(g) == 1 for g in groups)
