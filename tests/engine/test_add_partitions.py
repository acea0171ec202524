"""Store.add_partitions (Kafka's CreatePartitions): grows, never shrinks, typed errors, seen by every process."""

from __future__ import annotations

from pathlib import Path

import pytest

from s3stream import Record
from s3stream.base.errors import Closed, InvalidArgument, InvalidPartitions, InvalidRequest, UnknownTopic

from .helpers import open_mem, read_all, values


def test_new_partitions_start_empty_and_old_ones_keep_their_data(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t", partitions=1, config={"retention.ms": "3600000"})
        store.partition("t", 0).append([Record(b"k", b"old")])
        with pytest.raises(UnknownTopic):
            store.partition("t", 2)
        store.add_partitions("t", 3)
        assert store.partitions("t") == 3
        assert store.topic_overrides("t") == {"retention.ms": "3600000"}  # the config is kept
        new = store.partition("t", 2)
        assert new.log_end_offset == 0
        new.append([Record(b"k", b"new")])
        assert values(read_all(store.partition("t", 0))) == [b"old"]
        assert values(read_all(new)) == [b"new"]
        assert store.describe_topic("t")["partitions"] == 3
    with open_mem(mem_url, tmp_path) as again:
        assert again.partitions("t") == 3
        assert values(read_all(again.partition("t", 2))) == [b"new"]


def test_another_process_sees_the_new_partitions_at_once(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path, wal="a") as a, open_mem(mem_url, tmp_path, wal="b") as b:
        a.create_topic("t", partitions=2)
        assert b.partitions("t") == 2  # b caches the topic document now
        a.add_partitions("t", 4)
        b.partition("t", 3).append([Record(b"k", b"from b")])  # an index past b's cached count re-reads it
        b.flush()
        assert values(read_all(a.partition("t", 3))) == [b"from b"]


def test_bad_totals_are_typed_errors(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t", partitions=3)
        for total in (3, 2, 0, -1):
            with pytest.raises(InvalidPartitions, match="has 3 partitions"):
                store.add_partitions("t", total)
        with pytest.raises(InvalidPartitions, match="maximum"):
            store.add_partitions("t", 10**9)
        for bad in ("4", 4.0, True, None):
            with pytest.raises(InvalidArgument):
                store.add_partitions("t", bad)  # type: ignore[arg-type]
        with pytest.raises(UnknownTopic):
            store.add_partitions("missing", 4)
        store.create_topic("gone")
        store.delete_topic("gone")
        with pytest.raises(UnknownTopic):
            store.add_partitions("gone", 4)
        assert store.partitions("t") == 3
        with pytest.raises(InvalidPartitions):  # create_topic's bad counts are the same error
            store.create_topic("zero", partitions=0)
        assert issubclass(InvalidPartitions, InvalidRequest)
    with pytest.raises(Closed):
        store.add_partitions("t", 5)
