"""PartitionLog.publish_segments: bulk writers publish staged segments atomically, replays are no-ops."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

import s3stream
from s3stream import Record
from s3stream.base import layout
from s3stream.base.records import batch_from_records
from s3stream.format.segment import encode_segment
from s3stream.partition.log import StagedSegment

from .helpers import open_mem


def _stage(store: s3stream.Store, log: s3stream.PartitionLog, keys: list[bytes], ts: int) -> StagedSegment:
    records = [Record(k, b"v-" + k, ts) for k in keys]
    table = pa.Table.from_batches([batch_from_records(records, 0, [ts] * len(records))])
    data, summary = encode_segment(table, base_offset=0, last_offset=len(records) - 1)
    key = layout.segment_key(log.topic_id, log.partition, 0, store.runtime.ids.ulid(store.clock.now_ms()))
    store.object_store.put(key, data)
    return StagedSegment(key, summary.object_size, summary.record_count, summary.size_bytes, summary.max_timestamp,
                         ts, summary.crc32c)


def test_published_segments_get_the_next_offsets_and_read_back(mem_url: str, tmp_path: Path) -> None:
    store = open_mem(mem_url, tmp_path)
    store.create_topic("t")
    log = store.partition("t", 0)
    log.append([Record(b"a", b"1", 1)])
    staged = [_stage(store, log, [b"x", b"y"], 10), _stage(store, log, [b"z"], 20)]
    assert log.publish_segments(staged) == s3stream.AppendResult(1, 3)
    log.append([Record(b"after", b"2")])
    got = [(r.offset, r.key) for r in log.read(0)]
    assert got == [(0, b"a"), (1, b"x"), (2, b"y"), (3, b"z"), (4, b"after")]
    assert log.offset_for_timestamp(20) == 3
    assert [s.base_offset for s in log.segments() if s.sealed] == [0, 1, 3]


def test_a_replayed_batch_publishes_nothing(mem_url: str, tmp_path: Path) -> None:
    store = open_mem(mem_url, tmp_path)
    store.create_topic("t")
    log = store.partition("t", 0)
    staged = [_stage(store, log, [b"x"], 10)]
    assert log.publish_segments(staged, marker=("query-1", 7)) == s3stream.AppendResult(0, 0)
    assert log.publish_segments(staged, marker=("query-1", 7)) is None
    assert log.publish_segments([_stage(store, log, [b"old"], 10)], marker=("query-1", 6)) is None
    assert log.log_end_offset == 1
    result = log.publish_segments([_stage(store, log, [b"new"], 10)], marker=("query-1", 8))
    assert result == s3stream.AppendResult(1, 1)
    assert [r.key for r in log.read(0)] == [b"x", b"new"]


def test_published_data_survives_a_reopen(mem_url: str, tmp_path: Path) -> None:
    store = open_mem(mem_url, tmp_path)
    store.create_topic("t")
    log = store.partition("t", 0)
    log.publish_segments([_stage(store, log, [b"k1", b"k2"], 10)])
    store.close()
    with open_mem(mem_url, tmp_path, wal="other") as again:
        assert [(r.offset, r.key) for r in again.partition("t", 0).read(0)] == [(0, b"k1"), (1, b"k2")]


def test_only_this_partitions_segment_keys_are_publishable() -> None:
    key = layout.segment_key("01jxtopic", 3, 0, "01JX0000000000000000000000")
    assert layout.is_segment_key(key, "01jxtopic", 3)
    for other in (layout.segment_key("01jxtopic", 4, 0, "01jx"), layout.segment_key("01jxother", 3, 0, "01jx"),
                  key + "/x", key.replace("segments/", "segments/../"), "../" + key, key[:-8] + ".wal",
                  layout.manifest_key("01jxtopic", 3, 1)):
        assert not layout.is_segment_key(other, "01jxtopic", 3), other
