"""Sequential reads of sealed segments through a fresh store: every byte fetched once, the next segments
opened ahead of the reader (read-ahead across segment boundaries), and budgets across segments."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from s3stream.base.errors import OffsetOutOfRange
from s3stream.format.segment import FOOTER_FETCH_BYTES, SegmentReader, row_sizes
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.objectstore.protocol import ByteRange, ObjectStore
from s3stream.testing.forwarding import ForwardingObjectStore

from .helpers import open_mem, recs

KIB = 1 << 10


class GetRecorder(ForwardingObjectStore):
    """Records every GET: key, range, and the thread that issued it."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.lock = threading.Lock()
        self.gets: list[tuple[str, ByteRange | None, str]] = []

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        with self.lock:
            self.gets.append((key, byte_range, threading.current_thread().name))
        return self.inner.get(key, byte_range)


def _sealed_log(mem_url: str, tmp_path: Path) -> int:
    """A partition of ~12 MiB in six sealed segments of 128 KiB row groups; returns its record count."""
    with open_mem(mem_url, tmp_path, segment_row_group_bytes=128 * KIB) as store:
        store.create_topic("t", config={"segment.bytes": 2 << 20})
        log = store.partition("t", 0)
        n = 0
        for _ in range(24):
            log.append(recs(500, start=n, size=1000))
            n += 500
        log.flush()
        log.roll()
        log.flush()
        sealed = [s for s in log.segments() if s.record_count]
        assert len(sealed) >= 5 and all(s.sealed for s in sealed)
        return n


def test_sequential_read_fetches_each_byte_once_and_opens_segments_ahead(mem_url: str, tmp_path: Path) -> None:
    n = _sealed_log(mem_url, tmp_path)
    recorder = GetRecorder(MemoryObjectStore(mem_url.removeprefix("memory://")))
    with open_mem(mem_url, tmp_path, wal="wal-reader", object_store=recorder) as store:
        log = store.partition("t", 0)
        sizes = {s.key: s.object_size for s in log.manifest().segments}
        recorder.gets.clear()
        pos, got = 0, []
        while pos < n:
            table = log.read_arrow(pos, max_bytes=700 * KIB)
            offsets = table.column("offset").to_pylist()
            assert offsets[0] == pos
            got.extend(offsets)
            pos = offsets[-1] + 1
        assert got == list(range(n))
    segment_gets = [(k, r, t) for k, r, t in recorder.gets if k in sizes]
    assert {k for k, _, _ in segment_gets} == set(sizes)
    for key, size in sizes.items():
        ranges = sorted((r.start, r.end if r.end is not None else size) for k, r, _ in segment_gets
                        if k == key and r is not None)
        footers = [rg for rg in ranges if rg[1] == size]
        assert len(footers) == 1, f"{key}: footer fetched {len(footers)} times"
        body = [rg for rg in ranges if rg[1] != size]
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(body)), f"{key}: a byte was fetched twice"
        assert sum(e - s for s, e in ranges) <= size + FOOTER_FETCH_BYTES
    # the segments after the first were opened (footer fetched) by background read-ahead, not by the reader
    warmed = [k for k, r, t in segment_gets if r is not None and r.end == sizes[k] and t.startswith("s3stream-fetch")]
    assert warmed


def test_budgets_across_segments_match_the_records(mem_url: str, tmp_path: Path) -> None:
    n = _sealed_log(mem_url, tmp_path)
    with open_mem(mem_url, tmp_path, wal="wal-reader") as store:
        log = store.partition("t", 0)
        everything = log.read_arrow(0, max_bytes=1 << 40)
        assert everything.num_rows == n
        sizes = row_sizes(everything)
        rng = np.random.default_rng(5)
        pos = 0
        while pos < n:  # one sequential consumer with varying budgets
            max_records = None if rng.random() < 0.5 else int(rng.integers(1, 3000))
            max_bytes = int(rng.integers(1, 3 << 20))
            table = log.read_arrow(pos, max_records=max_records, max_bytes=max_bytes)
            keep = n - pos if max_records is None else min(n - pos, max_records)
            keep = max(1, int(np.searchsorted(np.cumsum(sizes[pos:pos + keep]), max_bytes, side="right")))
            assert table.column("offset").to_pylist() == list(range(pos, pos + keep))
            assert table.equals(everything.slice(pos, keep))
            pos += keep


def test_whole_row_groups_within_the_budget_decode_in_one_call(mem_url: str, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    n = _sealed_log(mem_url, tmp_path)
    calls: list[list[tuple[str, int]]] = []
    decode = SegmentReader._decode_cached

    def counting(self: SegmentReader, groups: list[int], columns: tuple[str, ...]) -> pa.Table:
        calls.append([(self.source, g) for g in groups])
        return decode(self, groups, columns)

    monkeypatch.setattr(SegmentReader, "_decode_cached", counting)
    with open_mem(mem_url, tmp_path, wal="wal-reader") as store:
        log = store.partition("t", 0)
        pos, reads = 0, 0
        while pos < n:
            table = log.read_arrow(pos, max_bytes=700 * KIB)
            assert table.column("offset").to_pylist() == list(range(pos, pos + table.num_rows))
            pos += table.num_rows
            reads += 1
    decoded = sum(len(c) for c in calls)
    # each read decodes the whole groups within its budget together with the group where the budget ends
    # (one call; two when it crosses into the next segment); the next read resumes inside that last group
    # without decoding it again, so every group is decoded once
    assert max(len(c) for c in calls) > 2
    assert len(calls) <= 2 * reads < decoded
    decoded_groups = [(source, g) for c in calls for source, g in c]
    assert len(set(decoded_groups)) == len(decoded_groups)  # none twice


def test_a_read_of_the_sealed_tier_sees_a_log_start_another_store_moved(mem_url: str, tmp_path: Path) -> None:
    n = _sealed_log(mem_url, tmp_path)
    with open_mem(mem_url, tmp_path, wal="wal-reader") as reader, \
            open_mem(mem_url, tmp_path, wal="wal-other") as other:
        log = reader.partition("t", 0)
        assert log.read_arrow(0, max_records=10).num_rows == 10  # its manifest is cached now
        moved = other.partition("t", 0).delete_records(n // 2)
        # the cached manifest still says offset 0 is readable: the read must not trust it
        with pytest.raises(OffsetOutOfRange):
            log.read_arrow(0, max_records=10)
        assert log.read_arrow(moved, max_records=10).column("offset")[0].as_py() == moved
