"""offset_for_timestamp, bad input (typed errors, nothing appended), and corrupt objects in the bucket."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import s3stream
from s3stream import (
    CorruptData,
    InvalidConfig,
    InvalidRecord,
    ManualClock,
    Record,
    RecordTooLarge,
    TopicExists,
    UnknownTopic,
)
from s3stream.base.errors import InvalidRequest, InvalidTopic

from .helpers import T0, open_mem, read_all


def test_offset_for_timestamp_sealed_unsealed_non_monotonic(mem_url: str, tmp_path: Path) -> None:
    stamps = [100, 50, 300, 200, 150, 120, 400, 90, 500, 80]
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t", config={"cleanup.policy": "delete"})
        log = store.partition("t", 0)
        assert log.offset_for_timestamp(T0) is None  # empty log
        for i, ts in enumerate(stamps):
            log.append([Record(b"k", b"v%d" % i, T0 + ts)])
            if i in (2, 5):
                log.roll()  # sealed: [0..2], [3..5]; unsealed: [6..9]
        log.flush()
        log.append([Record(b"k", b"tail", T0 + 450)])  # offset 10, in memory only
        stamps.append(450)

        def expected(target: int, start: int = 0) -> int | None:
            return next((i for i in range(start, len(stamps)) if stamps[i] >= target), None)

        for target in (0, 50, 51, 100, 101, 150, 201, 300, 301, 399, 400, 401, 450, 451, 500):
            assert log.offset_for_timestamp(T0 + target) == expected(target), target
        assert log.offset_for_timestamp(T0 + 501) is None
        log.delete_records(4)
        for target in (0, 100, 160, 300, 401):
            assert log.offset_for_timestamp(T0 + target) == expected(target, 4), target
    with open_mem(mem_url, tmp_path, wal="reader") as reader:
        rlog = reader.partition("t", 0)
        assert rlog.offset_for_timestamp(T0 + 401) == 8
        assert rlog.offset_for_timestamp(T0 + 450) == 8
        assert rlog.offset_for_timestamp(T0 + 460) == 8
        assert rlog.offset_for_timestamp(T0 + 600) is None


def test_null_key_on_compacted_topic_appends_nothing(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("c", config={"cleanup.policy": "compact"})
        log = store.partition("c", 0)
        log.append([Record(b"a", b"1")])
        with pytest.raises(InvalidRecord, match="null key"):
            log.append([Record(b"b", b"2"), Record(None, b"3"), Record(b"c", b"4")])
        assert log.log_end_offset == 1
        assert log.append([Record(b"d", None)]).base_offset == 1  # tombstones are fine
        assert [r.key for r in read_all(log)] == [b"a", b"d"]


def test_record_and_batch_too_large(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t", config={"max.message.bytes": 1000})
        log = store.partition("t", 0)
        with pytest.raises(RecordTooLarge):
            log.append([Record(b"k", b"x" * 1000)])
        with pytest.raises(RecordTooLarge):
            log.append([Record(b"k", b"x" * 300) for _ in range(4)])  # each fits, the batch does not
        assert log.log_end_offset == 0
        log.append([Record(b"k", b"x" * 300) for _ in range(2)])
        assert log.log_end_offset == 2


def test_bad_appends(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t")
        log = store.partition("t", 0)
        with pytest.raises(InvalidRequest):
            log.append([])
        with pytest.raises(InvalidRecord):
            log.append([Record(b"k", b"v", -5)])
        with pytest.raises(InvalidRecord):
            log.append([(b"k", b"v")])  # type: ignore[list-item]
        with pytest.raises(TypeError):
            Record("str-key", b"v")  # type: ignore[arg-type]
        assert log.log_end_offset == 0


def test_unknown_topic_and_partition(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t", partitions=2)
        with pytest.raises(UnknownTopic):
            store.partition("nope", 0)
        for bad in (2, -1, 100):
            with pytest.raises(UnknownTopic):
                store.partition("t", bad)
        with pytest.raises(UnknownTopic):
            store.describe_topic("nope")
        with pytest.raises(UnknownTopic):
            store.alter_topic_config("nope", {"retention.ms": 1})
        with pytest.raises(UnknownTopic):
            store.delete_topic("nope")
        log = store.partition("t", 1)
        store.delete_topic("t")
        with pytest.raises(UnknownTopic):
            log.append([Record(b"k", b"v")])


@pytest.mark.parametrize(("config", "key"), [
    ({"min.compaction.lag.ms": 1000, "max.compaction.lag.ms": 999}, "max.compaction.lag.ms"),
    ({"segment.bytes": 13}, "segment.bytes"),
    ({"segment.ms": 0}, "segment.ms"),
    ({"cleanup.policy": "shred"}, "cleanup.policy"),
    ({"retention.ms": "soon"}, "retention.ms"),
    ({"no.such.key": "1"}, "no.such.key"),
])
def test_invalid_config_names_the_key(mem_url: str, tmp_path: Path, config: dict[str, object], key: str) -> None:
    with open_mem(mem_url, tmp_path) as store:
        with pytest.raises(InvalidConfig) as info:
            store.create_topic("t", config=config)
        assert info.value.key == key
        assert key in str(info.value)
        assert store.list_topics() == []
        store.create_topic("ok")
        with pytest.raises(InvalidConfig) as info:
            store.alter_topic_config("ok", config)
        assert info.value.key == key
        assert store.topic_overrides("ok") == {}


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "bad/name", "sp ace", "ünï", "a:b"])
def test_invalid_topic_names(mem_url: str, tmp_path: Path, name: str) -> None:
    with open_mem(mem_url, tmp_path) as store:
        with pytest.raises(InvalidTopic):
            store.create_topic(name)
        assert store.list_topics() == []


def test_topic_exists_and_collisions(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("a.b")
        with pytest.raises(TopicExists):
            store.create_topic("a.b")
        with pytest.raises(TopicExists):
            store.create_topic("a_b")
        with pytest.raises(InvalidRequest):
            store.create_topic("zero", partitions=0)
        assert store.list_topics() == ["a.b"]


# -- corrupt bytes in the bucket ----------------------------------------------------------------------


def _file_store(tmp_path: Path, wal: str) -> s3stream.Store:
    return s3stream.open_store(f"file://{tmp_path}/data", clock=ManualClock(T0), probe=False,
                               wal_dir=str(tmp_path / wal), flush_interval_ms=50)


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("where", ["middle", "footer", "truncated"])
def test_corrupt_segment_object_raises_corrupt_data(tmp_path: Path, where: str) -> None:
    with _file_store(tmp_path, "w1") as store:
        store.create_topic("t")
        log = store.partition("t", 0)
        log.append([Record(b"k%d" % i, b"value-%d" % i * 20) for i in range(200)])
        log.roll()
        key = log.manifest().segments[0].key
    path = tmp_path / "data" / key
    size = path.stat().st_size
    if where == "middle":
        _flip(path, size // 3)
    elif where == "footer":
        _flip(path, size - 12)
    else:
        path.write_bytes(path.read_bytes()[: size - 100])
    with _file_store(tmp_path, "w2") as fresh:
        with pytest.raises(CorruptData) as info:
            fresh.partition("t", 0).read(0)
        assert key in str(info.value)


@pytest.mark.parametrize("where", ["chunk", "index"])
def test_corrupt_wal_object_raises_corrupt_data(tmp_path: Path, where: str) -> None:
    with _file_store(tmp_path, "w1") as store:
        store.create_topic("t")
        log = store.partition("t", 0)
        log.append([Record(b"k%d" % i, b"value-%d" % i * 20) for i in range(100)])
        store.flush()
        wal_keys = [e.key for e in store.object_store.list("wal/") if e.size > 200]
    assert len(wal_keys) == 1
    path = tmp_path / "data" / wal_keys[0]
    size = path.stat().st_size
    _flip(path, size // 3 if where == "chunk" else size - 20)
    with _file_store(tmp_path, "w2") as fresh:
        with pytest.raises(CorruptData) as info:
            fresh.partition("t", 0).read(0)
        assert wal_keys[0] in str(info.value)
    assert os.path.exists(path)
