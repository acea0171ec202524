"""Asynchronous read-ahead of segment reads: bytes fetched once, the memory bound, errors of background
fetches, readers dropped with fetches in flight, warming, and the budgeted read's semantics."""

from __future__ import annotations

import gc
import itertools
import threading
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pytest

from s3stream.base.errors import CorruptData, TransientError
from s3stream.format.segment import FOOTER_FETCH_BYTES, RangedFile, SegmentReader, encode_segment, row_sizes

from .test_segment_ranged import big_batch

KIB = 1 << 10
BLOCK = 64 * KIB  # window 512 KiB, GETs of 256 KiB


class FakeFetch:
    """A thread-safe fake ranged GET: records requests, can be slowed, failed or held at a gate."""

    def __init__(self, data: bytes, *, delay_s: float = 0.0) -> None:
        self.data = data
        self.delay_s = delay_s
        self.lock = threading.Lock()
        self.calls: list[tuple[int, int, str]] = []  # (start, end, thread name), in request order
        self.fail: Callable[[int, int], bool] = lambda start, end: False
        self.error: BaseException = TransientError("connection reset")
        self.hold: Callable[[int, int], bool] = lambda start, end: False
        self.gate = threading.Event()
        self.gate.set()
        self.active = 0
        self.active_bytes = 0
        self.max_active_bytes = 0

    def __call__(self, start: int, end: int) -> bytes:
        with self.lock:
            self.calls.append((start, end, threading.current_thread().name))
            self.active += 1
            self.active_bytes += end - start
            self.max_active_bytes = max(self.max_active_bytes, self.active_bytes)
        try:
            if self.hold(start, end):
                self.gate.wait(10)
            if self.delay_s:
                time.sleep(self.delay_s)
            if self.fail(start, end):
                raise self.error
            return self.data[start:end]
        finally:
            with self.lock:
                self.active -= 1
                self.active_bytes -= end - start

    def requests(self) -> list[tuple[int, int]]:
        with self.lock:
            return [(s, e) for s, e, _ in self.calls]


def wait_until(cond: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.002)


@pytest.fixture(scope="module")
def segment() -> tuple[bytes, pa.RecordBatch]:
    batch = big_batch(2048, 1024, seed=11)  # ~2 MiB of 1 KiB records, offsets 0, 2, 4, ...
    data, _ = encode_segment(batch, base_offset=0, last_offset=2 * batch.num_rows, row_group_bytes=32 * KIB)
    return data, batch


def group_spans(reader: SegmentReader) -> list[tuple[int, int]]:
    return [(g.byte_start, g.byte_end) for g in reader.row_groups]


def stream(reader: SegmentReader, *, max_bytes: int, before: Callable[[int], None] | None = None) -> list[int]:
    """Read the whole segment in order; returns the offsets read."""
    pos, seen = 0, list[int]()
    while True:
        if before is not None:
            before(pos)
        table = reader.read(pos, max_bytes=max_bytes)
        if table.num_rows == 0:
            return seen
        offs = table.column("offset").to_pylist()
        seen.extend(offs)
        pos = offs[-1] + 1


def non_footer(fetch: FakeFetch, size: int) -> list[tuple[int, int]]:
    return [(s, e) for s, e in fetch.requests() if e != size]


def test_streaming_reads_fetch_each_byte_once_and_ahead_of_the_read(segment: tuple[bytes, pa.RecordBatch]) -> None:
    data, batch = segment
    fetch = FakeFetch(data)
    reader = SegmentReader(fetch, len(data), source="s", block_bytes=BLOCK)
    spans = group_spans(reader)
    last_offsets = [g.last_offset for g in reader.row_groups]
    requested_before: list[tuple[int, set[int]]] = []

    def before(pos: int) -> None:  # the groups whose bytes are cached or being fetched (started or queued)
        requested_before.append((pos, {g for g, (a, b) in enumerate(spans) if reader._file.covers(a, b)}))

    seen = stream(reader, max_bytes=100 * KIB, before=before)
    assert seen == batch.column("offset").to_pylist()
    ranges = sorted(non_footer(fetch, len(data)))
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(ranges)), "a byte was fetched twice"
    assert sum(e - s for s, e in fetch.requests()) <= len(data) + FOOTER_FETCH_BYTES
    # from the third read on, the bytes of every group a read uses were requested before it was called
    # (the window, 512 KiB, is much larger than a read, 100 KiB)
    for (pos, requested), (nxt, _) in itertools.pairwise(requested_before[2:]):
        for g in range(int(np.searchsorted(last_offsets, pos)), int(np.searchsorted(last_offsets, nxt - 1)) + 1):
            assert g in requested, f"group {g} was not fetching before the read"
    assert reader.held_bytes == 0  # the read that returned the last record dropped everything


def test_read_ahead_never_runs_further_than_the_bound(segment: tuple[bytes, pa.RecordBatch]) -> None:
    data, batch = segment
    fetch = FakeFetch(data, delay_s=0.002)
    reader = SegmentReader(fetch, len(data), source="s", block_bytes=BLOCK)
    spans = group_spans(reader)
    last_offsets = [g.last_offset for g in reader.row_groups]
    bound = reader.max_held_bytes
    assert bound == 8 * BLOCK + 4 * BLOCK + 2 * BLOCK

    def before(pos: int) -> None:
        assert reader.held_bytes <= bound
        g = int(np.searchsorted(last_offsets, pos))
        if g < len(spans):  # nothing requested lies further ahead of the reader than the bound
            furthest = max((e for s, e in non_footer(fetch, len(data))), default=0)
            assert furthest - spans[g][0] <= bound

    assert stream(reader, max_bytes=48 * KIB, before=before) == batch.column("offset").to_pylist()
    assert fetch.max_active_bytes <= bound


def test_background_fetch_error_surfaces_on_the_read_that_needs_it(segment: tuple[bytes, pa.RecordBatch]) -> None:
    data, batch = segment
    fetch = FakeFetch(data)
    reader = SegmentReader(fetch, len(data), source="s", block_bytes=BLOCK)
    groups = reader.row_groups
    bad = groups[len(groups) // 2]  # every fetch reaching this group fails
    fetch.fail = lambda start, end: start <= bad.byte_start < end
    pos, seen = 0, []
    with pytest.raises(TransientError, match="connection reset"):
        while True:  # reads of the groups before it succeed, though read-ahead already failed behind them
            table = reader.read(pos, max_bytes=40 * KIB)
            offs = table.column("offset").to_pylist()
            seen.extend(offs)
            pos = offs[-1] + 1
    assert seen and seen[-1] < bad.first_offset  # raised by the first read needing the failed bytes
    assert seen == batch.column("offset").to_pylist()[: len(seen)]
    fetch.fail = lambda start, end: False  # the error was not cached: the same read now succeeds
    while True:
        table = reader.read(pos, max_bytes=40 * KIB)
        if not table.num_rows:
            break
        offs = table.column("offset").to_pylist()
        seen.extend(offs)
        pos = offs[-1] + 1
    assert seen == batch.column("offset").to_pylist()


def test_short_background_fetch_is_corrupt_on_the_read_that_needs_it(segment: tuple[bytes, pa.RecordBatch]) -> None:
    data, batch = segment
    mid = len(data) // 2

    def short_after_mid(start: int, end: int) -> bytes:  # the store holds less than the manifest says
        return data[start:end][:-1] if start > mid and end != len(data) else data[start:end]

    reader = SegmentReader(short_after_mid, len(data), source="short-src", block_bytes=BLOCK)
    seen: list[int] = []
    with pytest.raises(CorruptData, match="short-src"):
        stream(reader, max_bytes=40 * KIB, before=lambda pos: seen.append(pos))
    assert 0 < seen[-1] <= batch.column("offset").to_pylist()[-1]


def test_errors_of_bytes_nobody_reads_are_never_raised(segment: tuple[bytes, pa.RecordBatch]) -> None:
    data, batch = segment
    fetch = FakeFetch(data)
    reader = SegmentReader(fetch, len(data), source="s", block_bytes=BLOCK)
    groups = reader.row_groups
    fetch.fail = lambda start, end: end > groups[8].byte_end and end != len(data)
    pos = 0
    for _ in range(3):  # streaming reads of the first groups start read-ahead that fails in the background
        table = reader.read(pos, max_bytes=20 * KIB)
        pos = table.column("offset")[-1].as_py() + 1
    wait_until(lambda: fetch.active == 0 and any(e > groups[8].byte_end for _, e in non_footer(fetch, len(data))))
    assert pos <= groups[8].last_offset
    # other reads of bytes that were fetched fine do not meet those errors; nor does dropping the reader
    assert reader.read(0, max_records=5).column("offset").to_pylist() == [0, 2, 4, 6, 8]
    reader.release()
    del reader
    gc.collect()
    fresh = SegmentReader(FakeFetch(data), len(data), source="s", block_bytes=BLOCK)
    assert stream(fresh, max_bytes=200 * KIB) == batch.column("offset").to_pylist()


def test_reader_released_or_dropped_with_fetches_in_flight(segment: tuple[bytes, pa.RecordBatch]) -> None:
    data, batch = segment
    fetch = FakeFetch(data)
    reader = SegmentReader(fetch, len(data), source="s", block_bytes=BLOCK)
    groups = reader.row_groups
    fetch.gate.clear()
    fetch.hold = lambda start, end: start >= groups[6].byte_start and end != len(data)
    table = reader.read(0, max_bytes=20 * KIB)
    table = reader.read(table.column("offset")[-1].as_py() + 1, max_bytes=20 * KIB)  # streaming: read-ahead
    wait_until(lambda: fetch.active > 0)  # some fetches are stuck at the gate
    held = reader.held_bytes
    assert held > 0
    started = time.monotonic()
    reader.release()  # does not wait for them, and keeps counting their bytes until they end
    assert time.monotonic() - started < 1.0
    assert reader.held_bytes > 0
    file_ref = reader._file
    del reader
    gc.collect()
    fetch.gate.set()
    wait_until(lambda: fetch.active == 0)
    assert file_ref.inflight_bytes == 0 and file_ref.cached_bytes == 0
    fresh = SegmentReader(FakeFetch(data), len(data), source="s", block_bytes=BLOCK)  # the pool is not wedged
    assert stream(fresh, max_bytes=100 * KIB) == batch.column("offset").to_pylist()


def test_warm_opens_and_starts_the_first_window(segment: tuple[bytes, pa.RecordBatch]) -> None:
    data, batch = segment
    fetch = FakeFetch(data)
    reader = SegmentReader(fetch, len(data), source="s", block_bytes=BLOCK)
    reader.warm(0)
    reader.warm(0)  # once only
    wait_until(lambda: len(fetch.requests()) >= 2 and fetch.active == 0)
    reqs = fetch.requests()
    assert [r for r in reqs if r[1] == len(data)] == [(len(data) - FOOTER_FETCH_BYTES, len(data))]
    assert all(name.startswith("s3stream-fetch") for _, _, name in fetch.calls)
    first = reader.row_groups[0]
    assert any(s <= first.byte_start and first.byte_end <= e for s, e in reqs)
    before = len(reqs)
    table = reader.read(0, max_bytes=20 * KIB)  # served by the warmed window: no new fetch for its groups
    last = table.column("offset")[-1].as_py()
    used_end = max(g.byte_end for g in reader.row_groups if g.first_offset <= last)
    assert all(s >= used_end for s, _ in fetch.requests()[before:])
    assert stream(reader, max_bytes=300 * KIB) == batch.column("offset").to_pylist()


def test_warm_leaves_a_reader_in_use_alone(segment: tuple[bytes, pa.RecordBatch]) -> None:
    data, batch = segment
    fetch = FakeFetch(data)
    reader = SegmentReader(fetch, len(data), source="s", block_bytes=BLOCK)
    table = reader.read(0, max_bytes=20 * KIB)
    pos = table.column("offset")[-1].as_py() + 1
    reader.warm(0)  # too late: it would reset the stream to the start
    wait_until(lambda: fetch.active == 0)
    got = table.column("offset").to_pylist()
    while True:
        more = reader.read(pos, max_bytes=100 * KIB)
        if not more.num_rows:
            break
        got.extend(more.column("offset").to_pylist())
        pos = got[-1] + 1
    assert got == batch.column("offset").to_pylist()
    ranges = sorted(non_footer(fetch, len(data)))
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(ranges))


@pytest.mark.parametrize("at_least_one", [True, False])
def test_read_budgeted_reports_bytes_and_cuts(segment: tuple[bytes, pa.RecordBatch], at_least_one: bool) -> None:
    data, batch = segment
    reader = SegmentReader(FakeFetch(data), len(data), source="s", block_bytes=BLOCK)
    sizes = row_sizes(batch)
    offsets = batch.column("offset").to_numpy()
    rng = np.random.default_rng(3)
    for _ in range(40):
        i = int(rng.integers(0, len(offsets)))
        from_offset = int(offsets[i]) - int(rng.integers(0, 2))
        max_records = None if rng.random() < 0.3 else int(rng.integers(1, 300))
        max_bytes = None if rng.random() < 0.2 else int(rng.integers(1, 200 * KIB))
        got = reader.read_budgeted(from_offset, max_records=max_records, max_bytes=max_bytes,
                                   at_least_one=at_least_one)
        rest = np.arange(i, len(offsets))
        keep = len(rest) if max_records is None else min(len(rest), max_records)
        if max_bytes is not None:
            fit = int(np.searchsorted(np.cumsum(sizes[rest[:keep]]), max_bytes, side="right"))
            keep = max(1, fit) if at_least_one else fit
        assert got.table.column("offset").to_pylist() == offsets[rest[:keep]].tolist()
        assert got.nbytes == (int(sizes[rest[:keep]].sum()) if max_bytes is not None else 0)
        assert got.cut == (keep < len(rest))


# ---------------------------------------------------------------------------------------------- RangedFile


def test_ranged_file_pending_extents() -> None:
    blob = bytes(range(256)) * 64
    fetch = FakeFetch(blob)
    fetch.gate.clear()
    fetch.hold = lambda start, end: True
    f = RangedFile(fetch, len(blob), source="r", block_bytes=1024, cache_bytes=8192)
    assert f.fetch_async([(0, 4096), (4096, 6144)]) == 2
    assert f.covers(100, 200) and f.covers(4096, 6144) and not f.covers(4000, 4200)
    assert f.inflight_bytes == 6144
    assert f.fetch_async([(6144, 8192), (8192, 12288)], required=False) == 1  # the second does not fit
    fetch.gate.set()
    f.seek(4000)
    assert f.read(200) == blob[4000:4200]  # waits for both pending extents, no new fetch
    assert len(fetch.requests()) == 3
    assert bytes(f.read_buffer(100)) == blob[4200:4300]
    f.drop_pending(0, 6144)  # the speculative one past that range is forgotten
    wait_until(lambda: fetch.active == 0)
    assert not f.covers(6144, 8192) and f.inflight_bytes == 0
    assert f.cached_bytes + f.inflight_bytes <= 8192


def test_ranged_file_failed_pending_extent_is_raised_once_then_refetched() -> None:
    blob = bytes(range(256)) * 16
    fetch = FakeFetch(blob)
    fetch.fail = lambda start, end: True
    f = RangedFile(fetch, len(blob), source="r", block_bytes=1024)
    f.fetch_async([(0, 1024)])
    wait_until(lambda: fetch.active == 0 and len(fetch.requests()) == 1)
    assert f.covers(0, 1024)  # pending until someone needs it
    with pytest.raises(TransientError):
        f.wait(0, 1024)
    assert f.fetch_error is fetch.error
    assert not f.covers(0, 1024)
    fetch.fail = lambda start, end: False
    f.seek(10)
    assert f.read(10) == blob[10:20]


def test_between_reads_a_reader_keeps_one_decoded_group_not_the_whole_read(
        segment: tuple[bytes, pa.RecordBatch]) -> None:
    """A streaming read decodes its groups in one call; the group where its budget ended is kept for the
    next read, copied out, so the rest of that call's decoded bytes are freed with the caller's table."""
    data, _ = segment
    reader = SegmentReader(FakeFetch(data), len(data), source="s", block_bytes=BLOCK)
    before = pa.total_allocated_bytes()
    got = reader.read_budgeted(0, max_bytes=200 * KIB)  # ~6 groups of 32 KiB, the last one cut
    assert got.cut and got.table.num_rows > 100
    read_bytes = pa.total_allocated_bytes() - before
    del got
    held = pa.total_allocated_bytes() - before
    assert held < read_bytes / 3  # one group of ~32 KiB, not the ~200 KiB decoded for the read
