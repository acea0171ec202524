"""Segments staged with relative offsets (``SegmentRef.offset_delta``, written by Spark tasks) are cleaned
in real offsets: the map, the keep rules and the outputs all use stored offset + delta."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

import s3stream
from s3stream.base import layout
from s3stream.base.records import RECORD_SCHEMA
from s3stream.format.segment import encode_segment
from s3stream.manifest.intents import add_segment
from s3stream.manifest.model import SegmentRef

from .conftest import Env
from .kit import COMPACT, T0, cleaned, read_all, triples


def stage(store: s3stream.Store, log: s3stream.PartitionLog, base: int, pairs: Sequence[tuple[str, str | None]],
          *, delta: int | None = None) -> None:
    """Commit a segment storing offsets ``0..n-1`` for real offsets ``base..base+n-1`` (delta = base)."""
    n = len(pairs)
    table = pa.Table.from_pylist([
        {"offset": i, "timestamp": T0, "key": k.encode(), "value": None if v is None else v.encode(),
         "headers": None, "horizon_ms": None} for i, (k, v) in enumerate(pairs)], schema=RECORD_SCHEMA)
    data, summary = encode_segment(table, base_offset=0, last_offset=n - 1, first_batch_max_timestamp=T0)
    rt = store.runtime
    key = layout.segment_key(log.topic_id, log.partition, base, rt.ids.ulid(T0))
    rt.objstore.put(key, data)
    ref = SegmentRef(key, base, base + n - 1, summary.size_bytes, summary.object_size, summary.record_count,
                     summary.max_timestamp, T0, T0, summary.crc32c, offset_delta=base if delta is None else delta)
    log.manifest_store.commit(add_segment(ref, None))


def test_staged_segments_are_compacted_in_real_offsets(env: Env) -> None:
    store = env.open()
    store.create_topic("t", 1, dict(COMPACT))
    log = store.partition("t", 0)
    stage(store, log, 0, [("a", "1"), ("b", "1")])
    stage(store, log, 2, [("a", "2"), ("c", "1"), ("b", None)])
    stage(store, log, 5, [("c", "2")])
    r = cleaned(store.run_cleaner())
    assert r.end_offset == 6 and r.records_kept == 3
    assert all(s.offset_delta == 0 for s in log.manifest().segments)
    reader = env.open("r").partition("t", 0)
    assert triples(read_all(reader)) == [(2, b"a", b"2"), (4, b"b", None), (5, b"c", b"2")]
    assert reader.log_end_offset == 6


def test_a_delta_that_disagrees_with_the_footer_makes_the_partition_uncleanable(env: Env) -> None:
    store = env.open()
    store.create_topic("t", 1, dict(COMPACT))
    log = store.partition("t", 0)
    stage(store, log, 0, [("a", "1"), ("a", "2")])
    stage(store, log, 2, [("a", "3"), ("b", "1")], delta=1)      # footer [0, 1] + 1 != manifest [2, 3]
    report = store.run_cleaner()
    assert report.cleaned is None and "CorruptData" in report.uncleanable[log.log_id]
    assert log.manifest().cleaner_checkpoint is None
