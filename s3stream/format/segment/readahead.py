"""Which row groups' bytes a segment reader fetches, and when: the I/O plan ahead of the decoder.

Object-store GETs cost latency and a per-request overhead, so the reader never fetches a row group at the
moment it decodes it. A read that continues where the previous one stopped (or that has no budget) is
*streaming*: :meth:`ReadAhead.keep_ahead` keeps the row groups of the next :data:`WINDOW_BLOCKS` blocks
of the object fetching in the background, in whole GETs of up to :data:`GET_BLOCKS` blocks (adjacent row
groups merged; topped up as row groups are consumed), so decoding and the network overlap and the next
call finds its bytes arriving or arrived. Other reads fetch what their budget needs, estimated from the
footer index (:meth:`ReadAhead.fetch_needed`), concurrently. Cached plus in-flight bytes stay within
window + one GET + two blocks (the bound of the reader's :class:`~.ranged.RangedFile`).

The plan is kept apart from the reader's decoding so its state (the GET runs per column set, how far
read-ahead has started) has one owner; the reader serializes calls (it holds its lock).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from s3stream.format.segment.budget import satisfied
from s3stream.format.segment.format import RowGroupInfo
from s3stream.format.segment.ranged import RangedFile

__all__ = ["GET_BLOCKS", "WINDOW_BLOCKS", "ReadAhead", "Span", "coalesce", "coalesce_groups"]

#: read-ahead window, in blocks; within it adjacent row groups are merged into GETs of up to GET_BLOCKS
#: blocks (per-request overhead dominates small GETs) that are fetched concurrently
WINDOW_BLOCKS = 8
GET_BLOCKS = 4

Span = tuple[int, int]
#: GET runs ``(start, end, first group)`` and the run of each group
Runs = tuple[list[tuple[int, int, int]], list[int]]


class ReadAhead:
    """The fetch plan of one reader: streaming read-ahead state and budgeted prefetches.

    ``spans_for(columns)`` gives the byte span of every row group's chunks of ``columns``.
    """

    def __init__(self, file: RangedFile, spans_for: Callable[[tuple[str, ...]], list[Span]], *,
                 window: int, get_bytes: int) -> None:
        self._file = file
        self._spans_for = spans_for
        self.window = window  #: how far ahead (object bytes) streaming read-ahead fetches
        self.get_bytes = get_bytes  #: the largest GET read-ahead merges row groups into
        self._runs: dict[tuple[str, ...], Runs] = {}
        #: streaming read-ahead: the GET runs of ``columns`` from ``next_run`` on are not started yet
        #: (-1: from the run of the group being read)
        self.columns: tuple[str, ...] = ()
        self.next_run = -1
        self.tail_signalled = False  #: the caller was told read-ahead reached the last row group

    def restart(self, columns: tuple[str, ...]) -> None:
        """Start a new stream of ``columns`` (nothing of it started yet, the tail not signalled)."""
        self.columns, self.next_run, self.tail_signalled = columns, -1, False

    @property
    def at_end(self) -> bool:
        """Whether streaming read-ahead has started fetching the segment's last row group."""
        runs = self._runs.get(self.columns)
        return runs is not None and self.next_run >= len(runs[0]) > 0

    def runs_for(self, columns: tuple[str, ...]) -> Runs:
        """The row groups' spans coalesced from the first into GET runs ``(start, end, first group)``, and
        the run of each group: the fixed units of streaming read-ahead (computed once per column set)."""
        runs = self._runs.get(columns)
        if runs is None:
            spans = self._spans_for(columns)
            merged = coalesce_groups(spans, list(range(len(spans))), limit=self.get_bytes)
            run_of = [0] * len(spans)
            for r, (_, _, first) in enumerate(merged):
                stop = merged[r + 1][2] if r + 1 < len(merged) else len(spans)
                run_of[first:stop] = [r] * (stop - first)
            runs = self._runs[columns] = (merged, run_of)
        return runs

    def keep_ahead(self, g: int, columns: tuple[str, ...]) -> None:
        """Keep the window after group ``g``'s GET run fetching, in whole runs (streaming reads).

        The run holding ``g`` is required (fetched whatever the bound); the runs ending within the window
        after it are speculative: started while they fit, else by a later call. Groups already cached or
        pending (and groups before ``g``) are left out of a run's GETs.
        """
        runs, run_of = self.runs_for(columns)
        r = run_of[g]
        j = max(self.next_run, r)
        while j < len(runs) and (j == r or runs[j][1] - runs[r][1] <= self.window):
            stop = runs[j + 1][2] if j + 1 < len(runs) else len(run_of)
            spans = self._spans_for(columns)
            todo = [spans[i] for i in range(max(g, runs[j][2]), stop) if not self._file.touch(*spans[i])]
            gets = coalesce(todo, limit=self.get_bytes)
            if j == r:
                self._file.fetch_async(gets)
            elif self._file.fetch_async(gets, required=False, evict_below=spans[g][0]) < len(gets):
                break  # the bound holds the rest back (a GET started in part is completed by a later call)
            j += 1
        self.next_run = j

    def fetched_end(self, g: int, columns: tuple[str, ...], streaming: bool, requested: int) -> int:
        """The end of the groups fetched together with ``g``: its streaming GET run, or the groups a
        budgeted read requested."""
        if not streaming:
            return requested
        runs, run_of = self.runs_for(columns)
        r = run_of[g] + 1
        return runs[r][2] if r < len(runs) else len(run_of)

    def fetch_needed(self, groups: Sequence[RowGroupInfo], g: int, from_offset: int, max_records: int | None,
                     max_bytes: int | None, columns: tuple[str, ...], rows: int, nbytes: int) -> int:
        """Start fetching group ``g`` and the following groups the read will likely need (estimated from
        the footer index, within the window), coalesced; returns the first group not requested."""
        spans = self._spans_for(columns)
        end = g
        while end < len(groups):
            if end > g and (spans[end][1] - spans[g][0] > self.window
                            or satisfied(rows, nbytes, max_records, max_bytes)):
                break
            info = groups[end]
            if end == g and info.first_offset < from_offset:  # only part of it is wanted: estimate pro rata
                frac = (info.last_offset - from_offset + 1) / (info.last_offset - info.first_offset + 1)
                rows += max(1, int(info.num_rows * frac))
                nbytes += int(info.size_bytes * frac)
            else:
                rows += info.num_rows
                nbytes += info.size_bytes
            end += 1
        # groups already cached are skipped (a sequential reader fetches each byte once); the rest is
        # fetched concurrently, one request per contiguous run of row groups
        missing = [sp for sp in spans[g:end] if not self._file.touch(*sp)]
        self._file.fetch_async(coalesce(missing, limit=self.get_bytes))
        return end


def coalesce(spans: list[Span], *, limit: int | None = None) -> list[Span]:
    """Merge touching spans (never splitting one, so a row group stays in one cached extent), up to ``limit``."""
    out: list[Span] = []
    for start, end in spans:
        if out and start <= out[-1][1] and (limit is None or max(out[-1][1], end) - out[-1][0] <= limit):
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def coalesce_groups(spans: list[Span], groups: list[int], *, limit: int) -> list[tuple[int, int, int]]:
    """Like :func:`coalesce` over the spans of ``groups`` (ascending): ``(start, end, first group)`` runs."""
    out: list[tuple[int, int, int]] = []
    for g in groups:
        start, end = spans[g]
        if out and start <= out[-1][1] and max(out[-1][1], end) - out[-1][0] <= limit:
            out[-1] = (out[-1][0], max(out[-1][1], end), out[-1][2])
        else:
            out.append((start, end, g))
    return out
