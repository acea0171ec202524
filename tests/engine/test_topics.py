"""Topic lifecycle: create/list/describe/alter/delete, effective config, alter without restart, re-create."""

from __future__ import annotations

from pathlib import Path

import pytest

from s3stream import Record, RecordTooLarge, UnknownTopic

from .helpers import open_mem, read_all, recs


def test_create_list_describe(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        assert store.list_topics() == []
        store.create_topic("b", partitions=3, config={"cleanup.policy": "compact", "segment.ms": "1000"})
        store.create_topic("a")
        assert store.list_topics() == ["a", "b"]
        assert store.partitions("b") == 3
        store.partition("b", 1).append(recs(4))
        d = store.describe_topic("b")
        assert d["name"] == "b" and d["partitions"] == 3 and d["topic_id"]
        assert d["overrides"] == {"cleanup.policy": "compact", "segment.ms": "1000"}
        assert d["config"]["cleanup.policy"] == "compact"
        assert d["config"]["retention.ms"] == "604800000"  # Kafka default
        info = {p["partition"]: p for p in d["partition_info"]}
        assert info[1]["log_end_offset"] == 4 and info[0]["log_end_offset"] == 0
        assert info[1]["size_bytes"] == sum(r.size_bytes for r in recs(4))
    with open_mem(mem_url, tmp_path, wal="other") as other:
        assert other.list_topics() == ["a", "b"]
        assert other.describe_topic("b")["partition_info"][1]["log_end_offset"] == 4


def test_effective_config_has_every_default(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t", config={"retention.ms": 1000})
        cfg = store.topic_config("t")
        assert cfg["retention.ms"] == "1000"
        assert cfg["segment.bytes"] == "1073741824"
        assert cfg["cleanup.policy"] == "delete"
        assert cfg["max.compaction.lag.ms"] == str(2**63 - 1)
        assert cfg["segment.jitter.ms"] == "0"
        assert store.topic_overrides("t") == {"retention.ms": "1000"}


def test_store_default_topic_config_applies_at_create(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path, **{"log.retention.ms": 5000}) as store:
        store.create_topic("t")
        store.create_topic("u", config={"retention.ms": 7})
        assert store.topic_config("t")["retention.ms"] == "5000"
        assert store.topic_config("u")["retention.ms"] == "7"


def test_alter_takes_effect_without_restart(mem_url: str, tmp_path: Path) -> None:
    size = Record(b"k", b"x" * 100).size_bytes
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t")
        log = store.partition("t", 0)
        for _ in range(4):
            log.append([Record(b"k", b"x" * 100)])
        assert len(log.segments()) == 1
        store.alter_topic_config("t", {"segment.bytes": 5 * size, "max.message.bytes": 500})
        assert store.topic_overrides("t") == {"segment.bytes": str(5 * size), "max.message.bytes": "500"}
        log.append([Record(b"k", b"x" * 100)])  # 5 * size: exactly full
        log.append([Record(b"k", b"x" * 100)])  # rolls under the new size
        log.flush()
        assert [(s.record_count, s.sealed) for s in log.segments()] == [(5, True), (1, False)]
        with pytest.raises(RecordTooLarge):
            log.append([Record(b"k", b"x" * 600)])
        store.alter_topic_config("t", {"max.message.bytes": None})  # back to the default
        assert "max.message.bytes" not in store.topic_overrides("t")
        log.append([Record(b"k", b"x" * 600)])
        assert log.log_end_offset == 7
    with open_mem(mem_url, tmp_path) as again:
        assert again.topic_overrides("t") == {"segment.bytes": str(5 * size)}


def test_delete_then_recreate_starts_empty(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t", partitions=2)
        old_id = store.describe_topic("t")["topic_id"]
        old = store.partition("t", 0)
        old.append(recs(5))
        old.roll()
        old.append(recs(2))
        store.flush()
        store.delete_topic("t")
        assert store.list_topics() == []
        with pytest.raises(UnknownTopic):
            store.partition("t", 0)
        with pytest.raises(UnknownTopic):
            old.read(0)
        store.create_topic("t", partitions=1)
        new_id = store.describe_topic("t")["topic_id"]
        assert new_id != old_id
        log = store.partition("t", 0)
        assert log.log_end_offset == 0 and log.read(0) == []
        assert log.append(recs(1, prefix="new")).base_offset == 0
        with pytest.raises(UnknownTopic):
            old.append(recs(1))
        with pytest.raises(UnknownTopic):
            store.partition("t", 1)
    with open_mem(mem_url, tmp_path) as again:  # recovery must not replay the old topic's entries
        log = again.partition("t", 0)
        assert [r.key for r in read_all(log)] == [b"new0"]
        assert again.describe_topic("t")["topic_id"] == new_id


def test_listing_without_fresh_reads_the_index_not_every_topic(mem_url: str, tmp_path: Path) -> None:
    # an all-topics Kafka Metadata lists every topic; re-reading each one's document was a request per topic
    from s3stream.objectstore.recording import RecordingObjectStore
    from s3stream.objectstore.url import open_object_store

    recorder = RecordingObjectStore(open_object_store(mem_url))
    with open_mem(mem_url, tmp_path, object_store=recorder) as store:
        names = [f"t{i:02d}" for i in range(20)]
        for name in names:
            store.create_topic(name)
        recorder.reset()
        assert store.list_topics(fresh=False) == names
        cached = sum(recorder.counts().values())
        recorder.reset()
        assert store.list_topics() == names
        fresh = sum(recorder.counts().values())
        assert cached <= 3 < len(names) <= fresh  # the index's probe, against one read per topic and more
        store.delete_topic("t07")  # this process's own delete is seen at once either way
        assert store.list_topics(fresh=False) == [n for n in names if n != "t07"]
