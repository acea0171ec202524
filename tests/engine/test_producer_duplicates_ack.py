"""A producer's duplicate batch honours its own ack mode (bugs the simulator found, issue 27).

* seed 8 (60 steps): an ``ack=s3`` retry of an ``ack=wal`` batch still only in the local WAL was acknowledged
  at once with the original's offsets; a takeover then replaced the records the retry had been promised were
  in the bucket. Such a duplicate now fails with StoreUnavailable (retriable) until the original is in a
  committed WAL object, and is deduplicated from then on.
* seed 20 (60 steps): with ``background=manual`` a blocking ``ack=wal`` retry of a queued ``ack=s3`` batch
  waited forever (it follows the original's future, which only an upload settles).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from s3stream import ManualClock, Record
from s3stream.base.errors import StoreUnavailable
from s3stream.base.producer import ProducerBatch
from s3stream.base.records import AppendResult

from .helpers import T0, open_mem, read_all

TOPIC = "t"


def test_an_ack_s3_duplicate_is_acknowledged_only_once_its_original_is_in_the_bucket(
        mem_url: str, tmp_path: Path) -> None:
    clock = ManualClock(T0, pacing="manual")
    with open_mem(mem_url, tmp_path, clock=clock, background="manual", flush_interval_ms=60_000,
                  max_block_ms=120_000) as store:
        store.create_topic(TOPIC)
        log = store.partition(TOPIC, 0)
        batch = ProducerBatch(7, 0, 0, 2)
        records = [Record(b"k", b"a"), Record(b"k", b"b")]
        assert log.append(records, ack="wal", producer=batch) == AppendResult(0, 1)
        with pytest.raises(StoreUnavailable, match="not in the object store yet") as caught:
            log.append(records, ack="s3", producer=batch)
        assert caught.value.retriable
        assert log.append(records, ack="wal", producer=batch) == AppendResult(0, 1)  # ack=wal: deduplicated
        store.flush()
        assert log.append(records, ack="s3", producer=batch) == AppendResult(0, 1)
        assert log.log_end_offset == 2
        assert [r.value for r in read_all(log, 0)] == [b"a", b"b"]


@pytest.mark.timeout(60)
def test_a_blocking_ack_wal_duplicate_of_a_queued_ack_s3_batch_settles_in_manual_mode(
        mem_url: str, tmp_path: Path) -> None:
    clock = ManualClock(T0, pacing="manual")
    with open_mem(mem_url, tmp_path, clock=clock, background="manual", flush_interval_ms=100,
                  max_block_ms=3000) as store:
        store.create_topic(TOPIC)
        log = store.partition(TOPIC, 0)
        batch = ProducerBatch(8, 0, 0, 1)
        original = log.append_async([Record(b"k", b"x")], ack="s3", producer=batch)
        assert not original.done()
        assert log.append([Record(b"k", b"x")], ack="wal", producer=batch) == AppendResult(0, 0)
        assert original.result() == AppendResult(0, 0)
        assert log.log_end_offset == 1


@pytest.mark.timeout(60)
def test_a_blocking_ack_s3_duplicate_of_an_uploaded_batch_awaiting_its_fsync_settles_in_manual_mode(
        mem_url: str, tmp_path: Path) -> None:
    """Seed 150 (60 steps): the original (``ack=wal``) is in a committed WAL object but its local WAL entry is
    not fsynced yet; the ``ack=s3`` duplicate follows the original's future, which only the WAL settles."""
    clock = ManualClock(T0, pacing="manual")
    with open_mem(mem_url, tmp_path, clock=clock, background="manual", flush_interval_ms=100,
                  max_block_ms=3000) as store:
        store.create_topic(TOPIC)
        log = store.partition(TOPIC, 0)
        batch = ProducerBatch(9, 0, 0, 1)
        original = log.append_async([Record(b"k", b"y")], ack="wal", producer=batch)
        steps = store.runtime.steps()
        assert steps.drain()
        clock.advance(200)
        assert steps.flush()  # uploaded and committed; the local WAL entry is still not fsynced
        assert not original.done()
        assert log.append([Record(b"k", b"y")], ack="s3", producer=batch) == AppendResult(0, 0)
        assert original.result() == AppendResult(0, 0)
