"""``PartitionLog.extent()``: the log's bounds and sealed segments from one look at its state, equal to what the
separate properties say, for a reader process at the cost of one look (a Kafka fetch asks for all of them)."""

from __future__ import annotations

from pathlib import Path

from s3stream.objectstore.recording import RecordingObjectStore
from s3stream.objectstore.url import open_object_store

from .helpers import open_mem, recs


def test_extent_matches_the_properties_in_the_writer_and_in_a_reader_for_fewer_requests(
        mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as writer:
        writer.create_topic("t")
        log = writer.partition("t", 0)
        for i in range(3):
            log.append(recs(5, start=5 * i))
            log.roll()
        log.append(recs(4, start=15))  # unsealed, in the WAL
        log.flush()
        log.delete_records(3)
        mine = log.extent()
        assert (mine.log_start_offset, mine.high_watermark, mine.log_end_offset) == (3, 19, 19)
        assert [(s.base_offset, s.last_offset) for s in mine.sealed] == [
            (s.base_offset, s.last_offset) for s in log.segments() if s.sealed]
        assert mine.sealed_at(7) == mine.sealed[1] and mine.sealed_at(16) is None

        recorder = RecordingObjectStore(open_object_store(mem_url))
        with open_mem(mem_url, tmp_path, wal="reader", object_store=recorder) as reader:
            other = reader.partition("t", 0)
            separate = (other.log_start_offset, other.high_watermark, other.log_end_offset,
                        [s for s in other.segments() if s.sealed])
            recorder.reset()
            theirs = other.extent()
            one_look = sum(recorder.counts().values())
            recorder.reset()
            assert (theirs.log_start_offset, theirs.high_watermark, theirs.log_end_offset,
                    list(theirs.sealed)) == separate
            _ = (other.log_start_offset, other.high_watermark, other.log_end_offset, other.segments())
            looks = sum(recorder.counts().values())
            assert one_look <= 2 < looks  # a manifest probe and a WAL probe, against those per property
            assert theirs.sealed_at(14) == theirs.sealed[-1]
