"""A reader's cached manifest when GC deletes superseded versions quickly (a short ``manifest_min_age_ms``).

Found by the simulator (tests/sim): seeds 40019 and 40083 of 300 steps. A reader trusted its cached manifest
for five minutes, checking only that the next version did not exist; GC had deleted that version (and its
successors were still there), so the reader went on with a stale manifest: a log start another process had
moved was not seen, and a read met a segment GC had deleted since (ObjectNotFound, every retry).
"""

from __future__ import annotations

from pathlib import Path

from s3stream import ManualClock, Record
from s3stream.base.ids import IdSource

from .helpers import T0, open_mem, read_all


def test_a_reader_never_trusts_a_cached_manifest_longer_than_gc_keeps_its_successor(mem_url: str,
                                                                                     tmp_path: Path) -> None:
    clock = ManualClock(T0, pacing="manual")
    opts = {"background": "manual", "manifest_min_age_ms": 1000, "orphan_min_age_ms": 1000}
    writer = open_mem(mem_url, tmp_path, clock=clock, wal="w", ids=IdSource(1), **opts)
    reader = open_mem(mem_url, tmp_path, clock=clock, wal="r", ids=IdSource(2), **opts)
    try:
        writer.create_topic("t", 1)
        log = writer.partition("t", 0)
        log.append([Record(None, b"v%d" % i) for i in range(20)])
        log.roll()
        assert reader.partition("t", 0).log_start_offset == 0  # cached: the reader's view of version n
        for target in range(1, 13):  # twelve versions after it; GC keeps the newest ten
            log.delete_records(target)
        clock.advance(2000)
        assert writer.collect_garbage().deleted["manifest"]  # version n + 1 is gone
        got = reader.partition("t", 0)
        assert got.log_start_offset == 12
        assert [r.value for r in read_all(got)] == [b"v%d" % i for i in range(12, 20)]
    finally:
        reader.close()
        writer.close()
