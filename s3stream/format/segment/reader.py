"""Reading segment objects by offset or timestamp with ranged fetches only.

:class:`SegmentReader` opens a segment lazily: one suffix fetch of the last :data:`FOOTER_FETCH_BYTES`
(a second one only when the footer is larger), validated by :func:`format.parse_footer`, gives the offset
and time index. A read then fetches only the byte ranges of the row groups (and, for a column subset, the
column chunks) it needs, coalescing consecutive row groups into GETs of up to ``_GET_BLOCKS`` blocks.
``pyarrow.parquet`` decodes the bytes a :class:`ranged.RangedFile` cached, handed over as native buffers
(:mod:`segment.buffered`: no call back into Python, which must take the GIL back from the fetch threads;
the footer is read through the file itself): a whole row group (every column) of a format-2 segment is
first checked against its CRC32C from the footer index and decoded without page checksums; column subsets
and format-1 segments are decoded with page-checksum verification on. A read decodes the whole groups its
budgets take, and the group where a budget ends, in one call once they are fetched; only that last group's
rows are sized (the others count their size from the footer index), and it is kept for the read that
resumes inside it.

Read-ahead: a read that continues where the previous one stopped (or that has no budget) is *streaming*:
the reader keeps the row groups of the next ``_WINDOW_BLOCKS`` blocks of the object fetching in the
background (whole GETs, topped up as row groups are consumed), so decoding and the network overlap and the
next call finds its bytes arriving or arrived. Other reads fetch what their budget needs, concurrently.
Cached plus in-flight bytes stay within window + one GET + two blocks; a read that returns the segment's
last record drops them. :meth:`SegmentReader.warm` opens a segment and starts its first window in the
background, for a caller about to stream into it. :meth:`SegmentReader.read_groups` reads row groups the
caller picked from the footer (the cleaner), with no stream state. An error of a background fetch is
raised by the read that needs those bytes (as the same exception), never by anything else.

Every row group read is checked against the footer index (row count, first/last offset, strictly
increasing offsets, timestamp bounds, null keys and values, schema), so a damaged object yields
:class:`CorruptData` naming ``source``, never wrong records. Errors raised by ``fetch`` itself (not found,
throttled, ...) propagate unchanged.

Callers cache one reader per segment object (a consumer reading sequentially must not refetch the footer);
a reader is thread-safe (one lock).
"""

from __future__ import annotations

import bisect
import itertools
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import NamedTuple

import crc32c
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from s3stream.base.errors import CorruptData, InvalidRequest, S3StreamError
from s3stream.base.records import RECORD_SCHEMA
from s3stream.format.segment.buffered import chunk_bounds, decode_in_memory
from s3stream.format.segment.format import RowGroupInfo, SegmentFooter, parse_footer, row_sizes, verify_footer
from s3stream.format.segment.ranged import Extent, Fetch, FetchMany, RangedFile, fetch_pool

__all__ = ["FOOTER_FETCH_BYTES", "SegmentRead", "SegmentReader"]

#: Bytes fetched from the end of the object to find the footer (one fetch for most segments).
FOOTER_FETCH_BYTES = 64 << 10
_DECODE_ERRORS = (pa.ArrowException, OSError, ValueError, TypeError, KeyError, IndexError, OverflowError,
                  EOFError, struct.error, RuntimeError)
_SIZE_COLUMNS = ("key", "value", "headers")
_ALL_COLUMNS = tuple(RECORD_SCHEMA.names)
_ALL_COLUMN_SET = frozenset(_ALL_COLUMNS)

#: read-ahead window, in blocks; within it adjacent row groups are merged into GETs of up to _GET_BLOCKS
#: blocks (per-request overhead dominates small GETs) that are fetched concurrently
_WINDOW_BLOCKS = 8
_GET_BLOCKS = 4

Span = tuple[int, int]


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
                 block_bytes: int = 1 << 20, fetch_many: FetchMany | None = None) -> None:
        self._fetch = fetch
        self._fetch_many = fetch_many
        self._object_size = object_size
        self._source = source
        self._block_bytes = block_bytes
        self._window = _WINDOW_BLOCKS * block_bytes
        self._get_bytes = _GET_BLOCKS * block_bytes
        self._lock = threading.RLock()
        self._file = RangedFile(fetch, object_size, source=source, block_bytes=block_bytes,
                                cache_bytes=max(self._window + self._get_bytes + 2 * block_bytes,
                                                2 * FOOTER_FETCH_BYTES))
        self._pf: pq.ParquetFile | None = None
        self._pf_crc_checked: pq.ParquetFile | None = None  # for whole row groups whose CRC32C was checked
        self._footer: SegmentFooter | None = None
        self._last_offsets: list[int] = []
        self._spans: dict[tuple[str, ...], list[Span]] = {}  # byte span of each row group, per column set
        self._schemas: dict[tuple[str, ...], pa.Schema] = {}
        self._decoded: _Decoded | None = None
        self._stream_group = -1  # the row group where a read continuing the last one starts
        # streaming read-ahead: the GET runs of _ahead_columns from _ahead_run on are not started yet
        # (-1: from the run of the group being read)
        self._runs: dict[tuple[str, ...], tuple[list[tuple[int, int, int]], list[int]]] = {}
        self._ahead_columns: tuple[str, ...] = ()
        self._ahead_run = -1
        self._warming = False
        self._reading = False  # a read holds the lock (release() leaves the reader alone)
        self._tail_signalled = False

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
            self._open()
            assert self._footer is not None
            return self._footer

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
        return self._window

    @property
    def read_ahead_at_end(self) -> bool:
        """Whether streaming read-ahead has started fetching this segment's last row group."""
        runs = self._runs.get(self._ahead_columns)
        return runs is not None and self._ahead_run >= len(runs[0]) > 0

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
        out_cols = _check_columns(columns)
        need = ["offset", *(c for c in out_cols if c != "offset")]
        if max_bytes is not None:
            need += [c for c in _SIZE_COLUMNS if c not in need]
        cols = tuple(need)
        with self._lock, self._reading_now(), self._decoding(self._file):
            self._open()
            groups = self._groups()
            g = bisect.bisect_left(self._last_offsets, from_offset)
            streaming = g == self._stream_group or (max_records is None and max_bytes is None)
            if not streaming or cols != self._ahead_columns:
                self._ahead_columns, self._ahead_run, self._tail_signalled = cols, -1, False
                if g < len(groups):  # fetches started for another position are not waited for
                    start = self._spans_for(cols)[g][0]
                    self._file.drop_pending(start, start + self._window)
            pieces: list[pa.Table] = []
            last_sizes: npt.NDArray[np.int64] | None = None  # the last piece's row sizes, when it may be cut
            rows = nbytes = 0
            requested = g  # non-streaming reads: row groups [g, requested) are fetching
            while g < len(groups) and not _satisfied(rows, nbytes, max_records, max_bytes):
                if streaming:
                    self._read_ahead(g, cols)
                    if on_tail is not None and not self._tail_signalled and self.read_ahead_at_end:
                        self._tail_signalled = True
                        on_tail()
                elif g >= requested:
                    requested = self._fetch_needed(g, from_offset, max_records, max_bytes, cols, rows, nbytes)
                info = groups[g]
                partial = info.first_offset < from_offset
                limit = self._fetched_end(g, cols, streaming, requested)
                fit = g if partial else _whole_groups_end(groups, g, limit, rows, nbytes, max_records, max_bytes)
                whole_rows = sum(i.num_rows for i in groups[g:fit])
                whole_bytes = sum(i.size_bytes for i in groups[g:fit]) if max_bytes is not None else 0
                # the group where a budget ends is decoded with the whole groups before it, when fetched with them
                h = fit + 1 if fit < limit and not _satisfied(rows + whole_rows, nbytes + whole_bytes, max_records,
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
            table, used, trimmed = _limit(pieces, need, rows, nbytes, last_sizes, max_records, max_bytes,
                                          at_least_one)
            self._after_read(table)
            return SegmentRead(table.select(out_cols), used, trimmed or g < len(groups))

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """The earliest offset whose record timestamp is ``>= timestamp``; None if there is none.

        Timestamps need not be monotonic: the first row group whose max timestamp qualifies holds the
        answer (every earlier group has only smaller timestamps), and only its two index columns are read.
        """
        cols = ("offset", "timestamp")
        with self._lock, self._reading_now(), self._decoding(self._file):
            self._open()
            groups = self._groups()
            for g, info in enumerate(groups):
                if info.max_timestamp >= timestamp:
                    self._fetch_needed(g, info.first_offset, 1, None, cols, 0, 0)
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
        out_cols = _check_columns(columns)
        data = RangedFile(self._fetch, self._object_size, source=self._source).fetch(0, self._object_size)
        if verify_crc32c is not None and crc32c.crc32c(data) != verify_crc32c:
            raise CorruptData("segment object CRC32C mismatch", source=self._source)
        with self._decoding(None):
            _verify_whole(data, self._source)
            pf = pq.ParquetFile(pa.BufferReader(data), page_checksum_verification=True, pre_buffer=False)
            footer = parse_footer(pf.metadata, pf.schema_arrow, self._object_size, source=self._source)
            need = ["offset", *(c for c in out_cols if c != "offset")]
            tables = [self._checked(pf.read_row_group(g, columns=need, use_threads=True), info, g)
                      for g, info in enumerate(footer.row_groups)]
            return _concat(tables, need).select(out_cols)

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
        out_cols = _check_columns(columns)
        need = ("offset", *(c for c in out_cols if c != "offset"))
        with self._lock:
            self._open()
            infos = self._groups()
            spans = self._spans_for(need)
            assert self._pf is not None
            metadata = self._pf.metadata
        picked = list(groups)
        if any(not 0 <= g < len(infos) for g in picked) or any(b <= a for a, b in itertools.pairwise(picked)):
            raise InvalidRequest(f"row groups must be ascending indexes below {len(infos)}, got {picked[:8]}")
        if not picked:
            return _concat([], need).select(out_cols)
        whole = set(need) == _ALL_COLUMN_SET and all(infos[g].crc32c is not None for g in picked)
        runs = _coalesce([spans[g] for g in picked])
        file = RangedFile(self._fetch, self._object_size, source=self._source, block_bytes=self._block_bytes,
                          cache_bytes=sum(b - a for a, b in runs), fetch_many=self._fetch_many)
        if whole:  # each group's CRC32C is checked as its bytes arrive: no page checksums to verify
            # runs after the first are fetched on the fetch pool meanwhile (store latency, not bandwidth)
            later = [fetch_pool().submit(self._fetch_groups, run, infos) for run in runs[1:]]
            file.prime(runs[0][0], self._fetch_groups(runs[0], infos))
            for run, fetched in zip(runs[1:], later, strict=True):
                file.prime(run[0], fetched.result())
        else:  # in one call on this thread where the store offers it (a key scan: a range per row group)
            file.load(runs)
        with self._decoding(file):
            table = decode_in_memory(metadata, file.extents(), spans, picked, need, verify_pages=not whole)
            if table is None:  # a run's bytes were not kept whole (never expected: the cache holds them all)
                pf = pq.ParquetFile(file, metadata=metadata, page_checksum_verification=not whole,
                                    pre_buffer=True)
                table = pf.read_row_groups(picked, columns=list(need), use_threads=False)
            file.clear()
            self._check_groups(table, [infos[g] for g in picked])
        return table.replace_schema_metadata(None).select(out_cols)

    def _fetch_groups(self, span: Span, infos: Sequence[RowGroupInfo]) -> Extent:
        """Bytes ``span`` (whole row groups), each group checked against its CRC32C in the footer index."""
        a, b = span
        data = RangedFile(self._fetch, self._object_size, source=self._source).fetch(a, b)
        view = memoryview(data)
        for g in infos:
            inside = a <= g.byte_start and g.byte_end <= b
            if inside and crc32c.crc32c(view[g.byte_start - a:g.byte_end - a]) != g.crc32c:
                raise CorruptData(f"row group at bytes [{g.byte_start}, {g.byte_end}) fails its CRC32C",
                                  source=self._source)
        return data

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
            fetch_pool().submit(self._warm, from_offset, _check_columns(columns))
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
                self._ahead_run = self._stream_group = -1
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

    @contextmanager
    def _decoding(self, file: RangedFile | None) -> Iterator[None]:
        """Turn any decode error into CorruptData(source), but let errors of ``file``'s fetches through.

        pyarrow may wrap an exception raised inside its reads of ``file``; the original is kept in
        ``file.fetch_error`` (the caller holds the lock, so it is this call's).
        """
        if file is not None:
            file.fetch_error = None
        try:
            yield
        except S3StreamError:
            raise
        except _DECODE_ERRORS as e:
            if file is not None and file.fetch_error is not None:
                raise file.fetch_error from None
            raise CorruptData(f"cannot decode segment: {e}", source=self._source) from e

    def _open(self) -> None:
        if self._pf is not None:
            return
        with self._decoding(self._file):
            self._prime_footer()
            pf = pq.ParquetFile(self._file, page_checksum_verification=True, pre_buffer=True)
            footer = parse_footer(pf.metadata, pf.schema_arrow, self._object_size, source=self._source)
            checked = pq.ParquetFile(self._file, metadata=pf.metadata, page_checksum_verification=False,
                                     pre_buffer=True)
        self._pf, self._pf_crc_checked, self._footer = pf, checked, footer
        self._last_offsets = [g.last_offset for g in footer.row_groups]

    def _prime_footer(self) -> None:
        size = self._object_size
        if size < 12:
            raise CorruptData(f"object of {size} bytes is too small for a segment", source=self._source)
        start = max(0, size - FOOTER_FETCH_BYTES)
        tail = bytes(self._file.fetch(start, size))  # the footer tail: small, parsed as bytes
        if tail[-4:] != b"PAR1":
            raise CorruptData("missing Parquet magic at the end of the object", source=self._source)
        footer_len = struct.unpack("<I", tail[-8:-4])[0]
        footer_start = size - 8 - footer_len
        if footer_start < 4:
            raise CorruptData(f"footer length {footer_len} exceeds the object", source=self._source)
        if footer_start < start:
            tail = bytes(self._file.fetch(footer_start, start)) + tail
            start = footer_start
        verify_footer(tail[footer_start - start: len(tail) - 8], source=self._source)
        self._file.prime(start, tail)

    def _warm(self, from_offset: int, columns: list[str]) -> None:
        """Pool task of :meth:`warm`: never waits for the lock or for other pool tasks."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            if self._stream_group != -1:  # read already: its stream state is better than a guess
                return
            with self._decoding(self._file):
                self._open()
                g = bisect.bisect_left(self._last_offsets, from_offset)
                if g < len(self._groups()):
                    cols = ("offset", *(c for c in columns if c != "offset"))
                    self._stream_group, self._ahead_columns, self._ahead_run = g, cols, -1
                    self._read_ahead(g, cols)
        except Exception:  # noqa: BLE001 - the read that needs this segment opens it again and meets the error
            pass
        finally:
            self._lock.release()

    def _groups(self) -> tuple[RowGroupInfo, ...]:
        assert self._footer is not None
        return self._footer.row_groups

    def _spans_for(self, columns: tuple[str, ...]) -> list[Span]:
        """The byte span of every row group's chunks of ``columns`` (from the footer, computed once)."""
        spans = self._spans.get(columns)
        if spans is None:
            assert self._pf is not None
            meta = self._pf.metadata
            spans = [chunk_bounds(meta.row_group(i), columns) for i in range(meta.num_row_groups)]
            self._spans[columns] = spans
        return spans

    def _fetch_needed(self, g: int, from_offset: int, max_records: int | None, max_bytes: int | None,
                      columns: tuple[str, ...], rows: int, nbytes: int) -> int:
        """Start fetching group ``g`` and the following groups the read will likely need (estimated from
        the footer index, within the window), coalesced; returns the first group not requested."""
        groups = self._groups()
        spans = self._spans_for(columns)
        end = g
        while end < len(groups):
            if end > g and (spans[end][1] - spans[g][0] > self._window
                            or _satisfied(rows, nbytes, max_records, max_bytes)):
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
        self._file.fetch_async(_coalesce(missing, limit=self._get_bytes))
        return end

    def _runs_for(self, columns: tuple[str, ...]) -> tuple[list[tuple[int, int, int]], list[int]]:
        """The row groups' spans coalesced from the first into GET runs ``(start, end, first group)``, and
        the run of each group: the fixed units of streaming read-ahead (computed once per column set)."""
        runs = self._runs.get(columns)
        if runs is None:
            spans = self._spans_for(columns)
            merged = _coalesce_groups(spans, list(range(len(spans))), limit=self._get_bytes)
            run_of = [0] * len(spans)
            for r, (_, _, first) in enumerate(merged):
                stop = merged[r + 1][2] if r + 1 < len(merged) else len(spans)
                run_of[first:stop] = [r] * (stop - first)
            runs = self._runs[columns] = (merged, run_of)
        return runs

    def _read_ahead(self, g: int, columns: tuple[str, ...]) -> None:
        """Keep the window after group ``g``'s GET run fetching, in whole runs (streaming reads).

        The run holding ``g`` is required (fetched whatever the bound); the runs ending within the window
        after it are speculative: started while they fit, else by a later call. Groups already cached or
        pending (and groups before ``g``) are left out of a run's GETs.
        """
        runs, run_of = self._runs_for(columns)
        r = run_of[g]
        j = max(self._ahead_run, r)
        while j < len(runs) and (j == r or runs[j][1] - runs[r][1] <= self._window):
            stop = runs[j + 1][2] if j + 1 < len(runs) else len(run_of)
            spans = self._spans_for(columns)
            todo = [spans[i] for i in range(max(g, runs[j][2]), stop) if not self._file.touch(*spans[i])]
            gets = _coalesce(todo, limit=self._get_bytes)
            if j == r:
                self._file.fetch_async(gets)
            elif self._file.fetch_async(gets, required=False, evict_below=spans[g][0]) < len(gets):
                break  # the bound holds the rest back (a GET started in part is completed by a later call)
            j += 1
        self._ahead_run = j

    def _group(self, g: int, columns: tuple[str, ...], *, sizes: bool) -> _Decoded:
        """Row group ``g`` decoded and checked (the last one decoded is kept), with row sizes if asked."""
        decoded = self._decoded
        if decoded is None or decoded.group != g or decoded.columns != columns:
            info = self._groups()[g]
            start, end = self._spans_for(columns)[g]
            self._file.wait(start, end)  # its fetch's error is raised here, before pyarrow sees it
            table = self._decode_cached([g], columns)
            decoded = _Decoded(g, columns, self._checked(table, info, g), None)
        if sizes and decoded.sizes is None:
            decoded = decoded._replace(sizes=row_sizes(decoded.table))
        self._decoded = decoded
        return decoded

    def _fetched_end(self, g: int, columns: tuple[str, ...], streaming: bool, requested: int) -> int:
        """The end of the groups fetched together with ``g``: its streaming GET run, or the groups a
        budgeted read requested."""
        if not streaming:
            return requested
        runs, run_of = self._runs_for(columns)
        r = run_of[g] + 1
        return runs[r][2] if r < len(runs) else len(run_of)

    def _groups_at_once(self, g: int, h: int, columns: tuple[str, ...]) -> pa.Table | None:
        """Whole row groups ``[g, h)`` decoded in one call and checked (per-group Python and pyarrow
        overheads paid once), or None when their bytes are not all cached at once (read them one by one)."""
        spans = self._spans_for(columns)[g:h]
        for start, end in spans:
            self._file.wait(start, end)  # a fetch's error is raised here, before pyarrow sees it
        if not all(self._file.holds(start, end) for start, end in spans):
            return None  # a wait evicted an earlier group's bytes
        table = self._decode_cached(list(range(g, h)), columns)
        self._check_groups(table, self._groups()[g:h])
        return table.replace_schema_metadata(None)

    def _decode_cached(self, groups: list[int], columns: tuple[str, ...]) -> pa.Table:
        """Row groups ``groups`` (their bytes all cached) decoded in one pyarrow call.

        The cached extents are decoded as native buffers (:func:`segment.buffered.decode_in_memory`):
        through the Python file every read pyarrow made had to take the GIL back from the fetch threads
        (measured with one busy thread: 87 MB/s read per chunk, 683 MB/s pre-buffered, ~4.7 GB/s idle).
        A whole group (every column) is checked against its CRC32C from the footer index and decoded
        without page checksums (pyarrow decodes exactly the bytes checked); a column subset is decoded
        verifying its pages' CRCs.
        """
        assert self._pf is not None
        assert self._pf_crc_checked is not None
        infos = self._groups()
        spans = self._spans_for(columns)
        pf = self._pf
        if set(columns) == _ALL_COLUMN_SET and all(infos[g].crc32c is not None for g in groups):
            for g in groups:
                # ~40 us a MiB: holding the GIL is cheaper than waiting to take it back from fetch threads
                if crc32c.crc32c(self._file.view(*spans[g]), 0, 0) != infos[g].crc32c:
                    raise CorruptData(f"row group {g} fails its CRC32C", source=self._source)
            pf = self._pf_crc_checked
        table = decode_in_memory(pf.metadata, self._file.extents(), spans, groups, columns,
                                 verify_pages=pf is self._pf)
        return table if table is not None else pf.read_row_groups(groups, columns=list(columns), use_threads=False)

    def _after_read(self, table: pa.Table) -> None:
        """Remember where a continuing read starts; a read that got the last record drops the held bytes."""
        if not table.num_rows:
            return
        last = int(table.column("offset")[-1].as_py())
        self._stream_group = bisect.bisect_left(self._last_offsets, last + 1)
        if last >= self._last_offsets[-1]:
            self._file.clear()
            self._decoded = None

    def _checked(self, table: pa.Table, info: RowGroupInfo, g: int) -> pa.Table:
        """Check one decoded row group against the footer index; the table without Parquet's metadata."""
        self._check_groups(table, [info], what=f"row group {g} disagrees")
        return table.replace_schema_metadata(None)

    def _check_groups(self, table: pa.Table, infos: Sequence[RowGroupInfo], *,
                      what: str = "row groups disagree") -> None:
        """Check decoded row groups (consecutive in ``table``) against the footer index, all at once: row
        counts, first/last and strictly increasing offsets, timestamp bounds, null keys and values, schema."""
        rows = np.array([g.num_rows for g in infos], dtype=np.int64)
        ends = np.cumsum(rows)
        starts = ends - rows
        offs = np.asarray(table.column("offset").to_numpy(), dtype=np.int64)
        bad = (len(offs) != int(ends[-1]) or not bool(np.all(offs[1:] > offs[:-1]))
               or not np.array_equal(offs[starts], [g.first_offset for g in infos])
               or not np.array_equal(offs[ends - 1], [g.last_offset for g in infos]))
        if not bad and "timestamp" in table.column_names:
            ts = np.asarray(table.column("timestamp").to_numpy(), dtype=np.int64)
            bad = (not np.array_equal(np.minimum.reduceat(ts, starts), [g.min_timestamp for g in infos])
                   or not np.array_equal(np.maximum.reduceat(ts, starts), [g.max_timestamp for g in infos]))
        for column, counts in (("key", [g.unkeyed for g in infos]), ("value", [g.tombstones for g in infos])):
            if bad or column not in table.column_names:
                continue
            col = table.column(column)
            bad = any(n is not None and col.slice(int(a), int(r)).null_count != n
                      for a, r, n in zip(starts, rows, counts, strict=True))
        names = tuple(table.column_names)
        expected = self._schemas.get(names)
        if expected is None:
            expected = self._schemas[names] = pa.schema([RECORD_SCHEMA.field(n) for n in names])
        if bad or not table.schema.equals(expected):
            raise CorruptData(f"{what} with the footer index", source=self._source)


def _verify_whole(data: Extent, source: str) -> None:
    if len(data) < 12 or data[-4:] != b"PAR1" or data[:4] != b"PAR1":
        raise CorruptData("not a Parquet object (magic)", source=source)
    footer_len = int.from_bytes(data[-8:-4], "little")
    if footer_len > len(data) - 12:
        raise CorruptData(f"footer length {footer_len} exceeds the object", source=source)
    verify_footer(bytes(data[len(data) - 8 - footer_len: -8]), source=source)


def _check_columns(columns: Sequence[str] | None) -> list[str]:
    if columns is None:
        return list(_ALL_COLUMNS)
    unknown = [c for c in columns if c not in _ALL_COLUMNS]
    if unknown:
        raise InvalidRequest(f"unknown segment columns {unknown}; known: {list(_ALL_COLUMNS)}")
    return list(columns)


def _whole_groups_end(groups: Sequence[RowGroupInfo], g: int, limit: int, rows: int, nbytes: int,
                      max_records: int | None, max_bytes: int | None) -> int:
    """The end of the groups from ``g`` (below ``limit``) a read takes whole: each fits both budgets
    with the rows and bytes before it, and the read goes on after each until a budget is reached."""
    h = g
    while h < limit and not _satisfied(rows, nbytes, max_records, max_bytes):
        info = groups[h]
        if ((max_records is not None and rows + info.num_rows > max_records)
                or (max_bytes is not None and nbytes + info.size_bytes > max_bytes)):
            break
        rows, nbytes, h = rows + info.num_rows, nbytes + info.size_bytes, h + 1
    return h


def _satisfied(rows: int, nbytes: int, max_records: int | None, max_bytes: int | None) -> bool:
    if max_records is None and max_bytes is None:
        return False
    return rows > 0 and ((max_records is not None and rows >= max_records)
                         or (max_bytes is not None and nbytes >= max_bytes))


def _coalesce(spans: list[Span], *, limit: int | None = None) -> list[Span]:
    """Merge touching spans (never splitting one, so a row group stays in one cached extent), up to ``limit``."""
    out: list[Span] = []
    for start, end in spans:
        if out and start <= out[-1][1] and (limit is None or max(out[-1][1], end) - out[-1][0] <= limit):
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _coalesce_groups(spans: list[Span], groups: list[int], *, limit: int) -> list[tuple[int, int, int]]:
    """Like :func:`_coalesce` over the spans of ``groups`` (ascending): ``(start, end, first group)`` runs."""
    out: list[tuple[int, int, int]] = []
    for g in groups:
        start, end = spans[g]
        if out and start <= out[-1][1] and max(out[-1][1], end) - out[-1][0] <= limit:
            out[-1] = (out[-1][0], max(out[-1][1], end), out[-1][2])
        else:
            out.append((start, end, g))
    return out


def _concat(tables: list[pa.Table], columns: Sequence[str]) -> pa.Table:
    if not tables:
        return pa.schema([RECORD_SCHEMA.field(c) for c in columns]).empty_table()
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def _limit(pieces: list[pa.Table], columns: Sequence[str], rows: int, nbytes: int,
           last_sizes: npt.NDArray[np.int64] | None, max_records: int | None, max_bytes: int | None,
           at_least_one: bool) -> tuple[pa.Table, int, bool]:
    """The pieces' longest prefix within both budgets (at least one row if ``at_least_one``), its logical
    bytes, and whether rows were left out.

    ``rows``/``nbytes`` are the pieces' totals. Every piece but the last is within both budgets (the read
    loop stops at the first piece that reaches one), so only the last may be cut, and ``last_sizes`` (its
    row sizes) is given whenever a byte budget can cut it.
    """
    over_rows = max_records is not None and rows > max_records
    over_bytes = max_bytes is not None and nbytes > max_bytes
    if not over_rows and not over_bytes:
        return _concat(pieces, columns), nbytes, False
    last = pieces[-1]
    rows_before = rows - last.num_rows
    keep = last.num_rows if max_records is None else min(last.num_rows, max_records - rows_before)
    used = nbytes
    if max_bytes is not None:
        assert last_sizes is not None
        bytes_before = nbytes - int(last_sizes.sum())
        cum = np.cumsum(last_sizes[:keep])
        keep = int(np.searchsorted(cum, max_bytes - bytes_before, side="right"))
        if at_least_one and keep == 0 and rows_before == 0:
            keep = 1
        used = bytes_before + (int(cum[keep - 1]) if keep else 0)
    kept = [*pieces[:-1], last.slice(0, keep)] if keep else pieces[:-1]
    return _concat(kept, columns), used, True
