"""Reading segment objects by offset or timestamp with ranged fetches only.

Consumers read a partition's history from segments of up to a GiB over an object store where every GET
costs latency, so :class:`SegmentReader` never downloads an object whole: it opens a segment lazily
(:mod:`.opening`: one suffix fetch of the footer gives the offset and time index), then fetches only the
byte ranges of the row groups (for a column subset, the column chunks) a read needs, as :mod:`.readahead`
plans them (streaming read-ahead for a read that continues the previous one, budgeted prefetches
otherwise; a read that returns the segment's last record drops the held bytes). A read decodes the whole
groups its budgets take (:mod:`.budget`) and the group where a budget ends in one call once fetched; only
that last group's rows are sized (the others count their size from the footer index), and it is kept for
the read that resumes inside it. :meth:`SegmentReader.warm` starts a segment's first window in the
background for a caller about to stream into it; :meth:`~SegmentReader.read_groups` and
:meth:`~SegmentReader.read_all` keep no stream state (:mod:`.oneshot`).

Every row group read is checked against the footer index (:mod:`.checks`), so a damaged object yields
:class:`CorruptData` naming ``source``, never wrong records. Errors raised by ``fetch`` itself (not found,
throttled, ...) propagate unchanged, raised by the read that needs those bytes, never by anything else.

Callers cache one reader per segment object (a consumer reading sequentially must not refetch the footer);
a reader is thread-safe (one lock).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from contextlib import contextmanager
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from s3stream.base.errors import CorruptData, InvalidRequest
from s3stream.format.segment.budget import cut_to_budget, satisfied, whole_groups_end
from s3stream.format.segment.checks import check_columns, check_groups, checked_group, decoding
from s3stream.format.segment.format import RowGroupInfo, SegmentFooter
from s3stream.format.segment.oneshot import read_picked, read_whole
from s3stream.format.segment.opening import FOOTER_FETCH_BYTES, OpenSegment, open_segment
from s3stream.format.segment.ranged import Fetch, FetchMany, RangedFile, fetches
from s3stream.format.segment.readahead import GET_BLOCKS, WINDOW_BLOCKS, ReadAhead, Span
from s3stream.format.segment.sizes import row_sizes

__all__ = ["FOOTER_FETCH_BYTES", "SegmentRead", "SegmentReader"]

_SIZE_COLUMNS = ("key", "value", "headers")


class SegmentRead(NamedTuple):
    """A budgeted read: the rows, their logical bytes (0 without ``max_bytes``), whether a budget cut it."""

    table: pa.Table
    nbytes: int
    cut: bool  #: rows of this segment after ``table`` were left out by a budget


class _Decoded(NamedTuple):
    """The last row group decoded (a read that stops inside a group resumes in it)."""

    group: int
    columns: tuple[str, ...]
    table: pa.Table
    sizes: npt.NDArray[np.int64] | None


class SegmentReader:
    """Offset and timestamp reads of one immutable segment object through ranged fetches."""

    def __init__(self, fetch: Fetch, object_size: int, *, source: str,
                 block_bytes: int = 1 << 20, fetch_many: FetchMany | None = None,
                 executor: Executor | None = None) -> None:
        self._fetch = fetch
        self._executor = executor  # read-ahead and warming (None: the process-wide fetch pool)
        self._fetch_many = fetch_many
        self._object_size = object_size
        self._source = source
        self._block_bytes = block_bytes
        window, get_bytes = WINDOW_BLOCKS * block_bytes, GET_BLOCKS * block_bytes
        self._lock = threading.RLock()
        self._file = RangedFile(fetch, object_size, source=source, block_bytes=block_bytes,
                                cache_bytes=max(window + get_bytes + 2 * block_bytes, 2 * FOOTER_FETCH_BYTES),
                                executor=executor)
        self._ahead = ReadAhead(self._file, self._spans_for, window=window, get_bytes=get_bytes)
        self._seg: OpenSegment | None = None  # opened on first use
        self._decoded: _Decoded | None = None
        self._stream_group = -1  # the row group where a read continuing the last one starts
        self._warming = False
        self._reading = False  # a read holds the lock (release() leaves the reader alone)

    # -- index (from the footer alone) --------------------------------------------------------------------

    @property
    def source(self) -> str:
        return self._source

    @property
    def object_size(self) -> int:
        return self._object_size

    @property
    def footer(self) -> SegmentFooter:
        """The validated footer (opens the segment on first use)."""
        with self._lock:
            return self._opened().footer

    @property
    def base_offset(self) -> int:
        return self.footer.base_offset

    @property
    def last_offset(self) -> int:
        return self.footer.last_offset

    @property
    def record_count(self) -> int:
        return self.footer.record_count

    @property
    def row_groups(self) -> list[RowGroupInfo]:
        return list(self.footer.row_groups)

    @property
    def fetch_count(self) -> int:
        """Fetches issued so far (footer included)."""
        return self._file.fetch_count

    @property
    def fetched_bytes(self) -> int:
        return self._file.fetched_bytes

    @property
    def held_bytes(self) -> int:
        """Bytes cached or being fetched for this reader (bounded by :attr:`max_held_bytes`)."""
        with self._lock:
            return self._file.cached_bytes + self._file.inflight_bytes

    @property
    def max_held_bytes(self) -> int:
        return self._file.cache_bytes

    @property
    def window_bytes(self) -> int:
        """How far ahead (object bytes) streaming read-ahead fetches."""
        return self._ahead.window

    @property
    def read_ahead_at_end(self) -> bool:
        """Whether streaming read-ahead has started fetching this segment's last row group."""
        return self._ahead.at_end

    # -- reads --------------------------------------------------------------------------------------------

    def read(self, from_offset: int, *, max_records: int | None = None, max_bytes: int | None = None,
             columns: Sequence[str] | None = None) -> pa.Table:
        """Rows with ``offset >= from_offset`` in offset order, limited by ``max_records``/``max_bytes``.

        ``max_bytes`` counts logical record bytes and is soft: the first record is returned even if
        larger. Only the row groups needed are fetched.

        Raises:
            InvalidRequest: ``max_records < 1`` or an unknown column name.
            CorruptData: the object failed a checksum or disagrees with its footer.
        """
        return self.read_budgeted(from_offset, max_records=max_records, max_bytes=max_bytes, columns=columns).table

    def read_budgeted(self, from_offset: int, *, max_records: int | None = None, max_bytes: int | None = None,
                      columns: Sequence[str] | None = None, at_least_one: bool = True,
                      on_tail: Callable[[], None] | None = None) -> SegmentRead:
        """Like :meth:`read`, also giving the rows' logical bytes and whether a budget stopped the read.

        Without ``at_least_one`` the byte budget is strict (the result may be empty, and then ``cut``).
        ``on_tail`` is called (once per stream, during the read) when streaming read-ahead has reached the
        segment's last row group: the moment to :meth:`warm` the next segment.
        """
        if max_records is not None and max_records < 1:
            raise InvalidRequest(f"max_records must be >= 1, got {max_records}")
        out_cols = check_columns(columns)
        need = ["offset", *(c for c in out_cols if c != "offset")]
        if max_bytes is not None:
            need += [c for c in _SIZE_COLUMNS if c not in need]
        cols = tuple(need)
        ahead = self._ahead
        with self._lock, self._reading_now(), decoding(self._file, self._source):
            groups = self._opened().groups
            g = bisect.bisect_left(self._opened().last_offsets, from_offset)
            streaming = g == self._stream_group or (max_records is None and max_bytes is None)
            if not streaming or cols != ahead.columns:
                ahead.restart(cols)
                if g < len(groups):  # fetches started for another position are not waited for
                    start = self._spans_for(cols)[g][0]
                    self._file.drop_pending(start, start + ahead.window)
            pieces: list[pa.Table] = []
            last_sizes: npt.NDArray[np.int64] | None = None  # the last piece's row sizes, when it may be cut
            rows = nbytes = 0
            requested = g  # non-streaming reads: row groups [g, requested) are fetching
            while g < len(groups) and not satisfied(rows, nbytes, max_records, max_bytes):
                if streaming:
                    ahead.keep_ahead(g, cols)
                    if on_tail is not None and not ahead.tail_signalled and ahead.at_end:
                        ahead.tail_signalled = True
                        on_tail()
                elif g >= requested:
                    requested = ahead.fetch_needed(groups, g, from_offset, max_records, max_bytes, cols, rows, nbytes)
                info = groups[g]
                partial = info.first_offset < from_offset
                limit = ahead.fetched_end(g, cols, streaming, requested)
                fit = g if partial else whole_groups_end(groups, g, limit, rows, nbytes, max_records, max_bytes)
                whole_rows = sum(i.num_rows for i in groups[g:fit])
                whole_bytes = sum(i.size_bytes for i in groups[g:fit]) if max_bytes is not None else 0
                # the group where a budget ends is decoded with the whole groups before it, when fetched with them
                h = fit + 1 if fit < limit and not satisfied(rows + whole_rows, nbytes + whole_bytes, max_records,
                                                              max_bytes) else fit
                if h > g + 1:  # decoded at once: per-call Python and pyarrow overheads paid once
                    batch = self._groups_at_once(g, h, cols)
                    if batch is not None:
                        rows, nbytes, last_sizes = rows + whole_rows, nbytes + whole_bytes, None
                        if h > fit:  # the last group may be cut: its rows sized, kept for a read resuming in it
                            last = batch.slice(whole_rows)
                            last_sizes = row_sizes(last) if max_bytes is not None else None
                            # a copy: the slice would pin the whole batch until the next read
                            self._decoded = _Decoded(h - 1, cols, last.take(np.arange(last.num_rows)), last_sizes)
                            if whole_rows:
                                pieces.append(batch.slice(0, whole_rows))
                            batch = last
                            rows += last.num_rows
                            nbytes += int(last_sizes.sum()) if last_sizes is not None else 0
                        pieces.append(batch)
                        g = h
                        continue
                # a whole group within both budgets counts its footer size; row sizes only where a read
                # starts inside a group or a budget may end one (the loop stops there)
                row_sized = max_bytes is not None and (
                    partial or nbytes + info.size_bytes > max_bytes
                    or (max_records is not None and rows + info.num_rows > max_records))
                decoded = self._group(g, cols, sizes=row_sized)
                table, last_sizes = decoded.table, decoded.sizes if row_sized else None
                if table.num_rows and partial:
                    skip = int(np.searchsorted(table.column("offset").to_numpy(), from_offset))
                    table = table.slice(skip)
                    last_sizes = None if last_sizes is None else last_sizes[skip:]
                pieces.append(table)
                rows += table.num_rows
                if max_bytes is not None:
                    nbytes += int(last_sizes.sum()) if last_sizes is not None else info.size_bytes
                g += 1
            table, used, trimmed = cut_to_budget(pieces, need, rows, nbytes, last_sizes, max_records, max_bytes,
                                                 at_least_one)
            self._after_read(table)
            return SegmentRead(table.select(out_cols), used, trimmed or g < len(groups))

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """The earliest offset whose record timestamp is ``>= timestamp``; None if there is none.

        Timestamps need not be monotonic: the first row group whose max timestamp qualifies holds the
        answer (every earlier group has only smaller timestamps), and only its two index columns are read.
        """
        cols = ("offset", "timestamp")
        with self._lock, self._reading_now(), decoding(self._file, self._source):
            groups = self._opened().groups
            for g, info in enumerate(groups):
                if info.max_timestamp >= timestamp:
                    self._ahead.fetch_needed(groups, g, info.first_offset, 1, None, cols, 0, 0)
                    table = self._group(g, cols, sizes=False).table
                    idx = pc.index(pc.greater_equal(table.column("timestamp"), timestamp), True).as_py()
                    if idx < 0:
                        raise CorruptData(f"row group {g} has no timestamp >= its indexed max",
                                          source=self._source)
                    return int(table.column("offset")[idx].as_py())
            return None

    def read_all(self, *, verify_crc32c: int | None = None, columns: Sequence[str] | None = None) -> pa.Table:
        """The whole segment in one fetch, CRC32C-verified when ``verify_crc32c`` is given.

        Raises:
            CorruptData: CRC mismatch, or any decode/validation failure.
        """
        return read_whole(self._fetch, self._object_size, self._source, verify_crc32c=verify_crc32c,
                          columns=check_columns(columns))

    def read_groups(self, groups: Sequence[int], *, columns: Sequence[str] | None = None) -> pa.Table:
        """Row groups ``groups`` (ascending indexes) decoded at once, for a caller that chose them from the footer.

        The bytes go into a file of this call's own, so calls may run concurrently on one reader and
        nothing stays cached. Whole row groups (every column) are fetched touching ones in one GET (the
        first on this thread, any others meanwhile on the fetch pool) and checked against their CRC32Cs;
        for a column subset the column chunks are fetched in parallel on the fetch pool, or in one
        ``fetch_many`` call on this thread when the reader has one (a store without request latency), and
        pyarrow verifies their page checksums. Every group is checked against the footer index.

        Raises:
            InvalidRequest: an unknown column name or a group index out of range or not ascending.
            CorruptData: the object failed a checksum or disagrees with its footer.
        """
        out_cols = check_columns(columns)
        need = ("offset", *(c for c in out_cols if c != "offset"))
        with self._lock:
            seg = self._opened()
            infos, spans, metadata = seg.groups, seg.spans_for(need), seg.verified.metadata
        table = read_picked(self._fetch, self._object_size, self._source, groups, need, metadata=metadata,
                            infos=infos, spans=spans, block_bytes=self._block_bytes, fetch_many=self._fetch_many,
                            executor=self._executor)
        return table.select(out_cols)

    def warm(self, from_offset: int, columns: Sequence[str] | None = None) -> None:
        """Start opening the segment and fetching the first window from ``from_offset``, in the background.

        For a caller about to stream into this segment: its next read from ``from_offset`` then counts as
        continuing one (read-ahead on). Does nothing if the reader is busy or already warmed; errors are
        left for that read to meet.
        """
        if self._warming:  # a flag, not the lock: a read in progress must not delay the caller
            return
        self._warming = True
        try:
            fetches(self._executor).submit(self._warm, from_offset, check_columns(columns))
        except RuntimeError:  # the interpreter is shutting down: nothing to warm for
            pass

    def release(self) -> None:
        """Drop cached bytes and cancel fetches not yet started (skipped while a read is in progress)."""
        if self._lock.acquire(blocking=False):
            try:
                if self._reading:  # this thread is inside a read of this reader
                    return
                self._file.clear()
                self._decoded = None
                self._ahead.next_run = self._stream_group = -1
            finally:
                self._lock.release()

    # -- internals ----------------------------------------------------------------------------------------

    @contextmanager
    def _reading_now(self) -> Iterator[None]:
        self._reading = True
        try:
            yield
        finally:
            self._reading = False

    def _opened(self) -> OpenSegment:
        seg = self._seg
        if seg is None:
            seg = self._seg = open_segment(self._file, self._object_size, self._source)
        return seg

    def _warm(self, from_offset: int, columns: list[str]) -> None:
        """Pool task of :meth:`warm`: never waits for the lock or for other pool tasks."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            if self._stream_group != -1:  # read already: its stream state is better than a guess
                return
            with decoding(self._file, self._source):
                seg = self._opened()
                g = bisect.bisect_left(seg.last_offsets, from_offset)
                if g < len(seg.groups):
                    cols = ("offset", *(c for c in columns if c != "offset"))
                    self._stream_group, self._ahead.columns, self._ahead.next_run = g, cols, -1
                    self._ahead.keep_ahead(g, cols)
        except Exception:  # noqa: BLE001 - the read that needs this segment opens it again and meets the error
            pass
        finally:
            self._lock.release()

    def _spans_for(self, columns: tuple[str, ...]) -> list[Span]:
        return self._opened().spans_for(columns)

    def _group(self, g: int, columns: tuple[str, ...], *, sizes: bool) -> _Decoded:
        """Row group ``g`` decoded and checked (the last one decoded is kept), with row sizes if asked."""
        decoded = self._decoded
        if decoded is None or decoded.group != g or decoded.columns != columns:
            info = self._opened().groups[g]
            start, end = self._spans_for(columns)[g]
            self._file.wait(start, end)  # its fetch's error is raised here, before pyarrow sees it
            table = self._decode_cached([g], columns)
            decoded = _Decoded(g, columns, checked_group(table, info, g, self._source), None)
        if sizes and decoded.sizes is None:
            decoded = decoded._replace(sizes=row_sizes(decoded.table))
        self._decoded = decoded
        return decoded

    def _groups_at_once(self, g: int, h: int, columns: tuple[str, ...]) -> pa.Table | None:
        """Whole row groups ``[g, h)`` decoded in one call and checked (per-group Python and pyarrow
        overheads paid once), or None when their bytes are not all cached at once (read them one by one)."""
        spans = self._spans_for(columns)[g:h]
        for start, end in spans:
            self._file.wait(start, end)  # a fetch's error is raised here, before pyarrow sees it
        if not all(self._file.holds(start, end) for start, end in spans):
            return None  # a wait evicted an earlier group's bytes
        table = self._decode_cached(list(range(g, h)), columns)
        check_groups(table, self._opened().groups[g:h], self._source)
        return table.replace_schema_metadata(None)

    def _decode_cached(self, groups: list[int], columns: tuple[str, ...]) -> pa.Table:
        """Row groups ``groups`` (their bytes all cached) decoded in one pyarrow call (see
        :meth:`~.opening.OpenSegment.decode_cached`)."""
        return self._opened().decode_cached(self._file, groups, columns, self._source)

    def _after_read(self, table: pa.Table) -> None:
        """Remember where a continuing read starts; a read that got the last record drops the held bytes."""
        if not table.num_rows:
            return
        last = int(table.column("offset")[-1].as_py())
        last_offsets = self._opened().last_offsets
        self._stream_group = bisect.bisect_left(last_offsets, last + 1)
        if last >= last_offsets[-1]:
            self._file.clear()
            self._decoded = None
