"""Fuzzing the public Python API: every Store and PartitionLog method, given arguments of any type and value
(names, partition counts, offsets, budgets, records, Arrow batches, configs, store options), succeeds or
raises an S3StreamError (InvalidTopic, InvalidConfig, InvalidArgument, ...), never a TypeError, ValueError,
KeyError or pyarrow error of its own; and the store keeps serving what it held before."""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import s3stream
from s3stream import ManualClock, Record
from s3stream.base.errors import S3StreamError
from s3stream.base.records import HEADER_TYPE
from s3stream.base.settings import StoreSettings
from s3stream.base.topic_config import TOPIC_CONFIGS
from s3stream.objectstore.memory import MemoryObjectStore

from .kit import FUZZ, SLOW_FUZZ, fuzz

T0 = 1_700_000_000_000
_NS = "fuzz-api"

#: values of every kind a caller might pass by mistake
anything: st.SearchStrategy[Any] = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.sampled_from([-1, 0, 1, 2**31, 2**63, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12), st.binary(max_size=12),
    st.builds(np.int64, st.integers(-(2**63), 2**63 - 1)), st.just(object()), st.just(math.nan),
    st.lists(st.integers(), max_size=3), st.tuples(st.text(max_size=3), st.binary(max_size=3)),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2), st.just(Record(b"k", b"v")),
    st.just(pa.array([1, 2])))
names = st.one_of(anything, st.text(max_size=300), st.sampled_from(
    ["", ".", "..", "../x", "/abs", "a/b", "t\x00", "\ud800", "x" * 250, "ok-topic", "t"]))
configs = st.one_of(anything, st.dictionaries(st.one_of(st.sampled_from(list(TOPIC_CONFIGS)), anything.filter(
    lambda v: isinstance(v, str | int | bytes | None))), anything, max_size=3))
_records = st.builds(Record, st.none() | st.binary(max_size=8), st.none() | st.binary(max_size=8))
record_lists = st.one_of(anything, st.lists(st.one_of(_records, anything), max_size=3), st.lists(_records, max_size=3))
_columns = {"key": [pa.binary(), pa.string(), pa.int64(), pa.null()], "value": [pa.binary(), pa.large_binary()],
            "timestamp": [pa.int64(), pa.timestamp("ms"), pa.float64(), pa.string()],
            "headers": [HEADER_TYPE, pa.string()], "offset": [pa.int64()], "bogus": [pa.int8()]}


@st.composite
def arrow_inputs(draw: st.DrawFn) -> Any:
    """Tables and batches with arbitrary subsets of columns, of the right or wrong types, nulls included."""
    n = draw(st.integers(0, 3))
    cols = draw(st.lists(st.sampled_from(sorted(_columns)), unique=True, max_size=4))
    arrays, fields = [], []
    for name in cols:
        kind = draw(st.sampled_from(_columns[name]))
        values = draw(st.lists(st.none() | st.integers(-5, 5) | st.binary(max_size=3) | st.text(max_size=3),
                               min_size=n, max_size=n))
        try:
            arrays.append(pa.array(values, type=kind))
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            arrays.append(pa.nulls(n, type=kind))
        fields.append(pa.field(name, kind))
    table = pa.table(arrays, schema=pa.schema(fields)) if cols else pa.table({})
    return draw(st.sampled_from([table, table.to_batches()[0] if table.num_rows else table, table.columns]))


@pytest.fixture(scope="module")
def store() -> Iterator[s3stream.Store]:
    MemoryObjectStore.drop_namespace(_NS)
    with tempfile.TemporaryDirectory() as wal, s3stream.open_store(
            f"memory://{_NS}", wal_dir=wal, probe=False, clock=ManualClock(T0), flush_interval_ms=20) as st_:
        st_.create_topic("t", partitions=2)
        st_.create_topic("c", config={"cleanup.policy": "compact"})
        st_.partition("t", 0).append([Record(b"k%d" % i, b"v%d" % i, T0 + i) for i in range(5)])
        st_.partition("t", 0).roll()
        st_.partition("t", 0).append([Record(b"k5", b"v5", T0 + 5)])
        yield st_
    MemoryObjectStore.drop_namespace(_NS)


def _typed(call: Callable[[], object]) -> None:
    """``call()`` returns, or raises an S3StreamError; anything else fails the test."""
    try:
        call()
    except S3StreamError:
        pass


def _intact(store: s3stream.Store) -> None:
    """What the fixture wrote is still there and readable (the bad calls changed nothing of it)."""
    log = store.partition("t", 0)
    assert [r.value for r in log.read(0)][:6] == [b"v%d" % i for i in range(6)]
    assert {"t", "c"} <= set(store.list_topics())


@FUZZ
@given(name=names, partitions=anything, config=configs, total=anything, index=anything, updates=configs)
def test_store_methods(store: s3stream.Store, name: Any, partitions: Any, config: Any, total: Any, index: Any,
                       updates: Any) -> None:
    if name in ("t", "c"):  # the fixture's topics: only reads and idempotent refusals
        _typed(lambda: store.create_topic(name, partitions, config))
    else:
        _typed(lambda: store.create_topic(name, partitions, config))
        _typed(lambda: store.add_partitions(name, total))
        _typed(lambda: store.alter_topic_config(name, updates))
        _typed(lambda: store.delete_topic(name))
    for call in (store.topic_config, store.topic_overrides, store.partitions, store.topic_id, store.describe_topic):
        _typed(lambda call=call: call(name))
    _typed(lambda: store.partition(name, index))
    _intact(store)


@FUZZ
@given(offset=anything, max_records=anything, max_bytes=anything, timestamp=anything, topic=st.sampled_from("tc"))
def test_log_reads(store: s3stream.Store, offset: Any, max_records: Any, max_bytes: Any, timestamp: Any,
                   topic: str) -> None:
    log = store.partition(topic, 0)
    _typed(lambda: log.read(offset, max_records, max_bytes))
    _typed(lambda: log.read(offset, max_records=max_records))
    _typed(lambda: log.read_arrow(offset, max_records=max_records, max_bytes=max_bytes))
    _typed(lambda: log.offset_for_timestamp(timestamp))
    _intact(store)


@FUZZ
@given(records=record_lists, ack=st.one_of(st.none(), st.sampled_from(["wal", "s3", "WAL", "", "all"]), anything),
       topic=st.sampled_from("tc"))
def test_log_appends(store: s3stream.Store, records: Any, ack: Any, topic: str) -> None:
    log = store.partition(topic, 0)
    _typed(lambda: log.append(records, ack=ack))
    _typed(lambda: log.append_async(records, ack=ack).result(timeout=60))
    _intact(store)


@fuzz(80)
@given(batch=arrow_inputs(), topic=st.sampled_from("tc"))
def test_log_arrow_appends(store: s3stream.Store, batch: Any, topic: str) -> None:
    log = store.partition(topic, 0)
    end = log.log_end_offset
    try:
        log.append_arrow(batch)
    except S3StreamError:
        assert log.log_end_offset == end  # refused: nothing was appended
    _typed(lambda: log.read(end))  # what was accepted reads back as Records
    _intact(store)


@FUZZ
@given(before=anything)
def test_delete_records(store: s3stream.Store, before: Any) -> None:
    log = store.partition("t", 1)  # partition 0 holds what _intact checks
    _typed(lambda: log.delete_records(before))
    _intact(store)


_SETTINGS = [f for f in StoreSettings.__dataclass_fields__ if f not in ("wal_dir", "node_id", "probe")]


@SLOW_FUZZ
@given(options=st.dictionaries(
    st.one_of(st.sampled_from(_SETTINGS),
              st.sampled_from(["log.retention.hours", "num.io.threads", "bogus", "FLUSH_BYTES", "ack "])),
    anything, max_size=3))
def test_store_options(options: dict[str, Any]) -> None:
    """Options of any name and value (a setting or its Kafka broker synonym) open the store or are refused."""
    with tempfile.TemporaryDirectory() as wal:
        try:
            opened = s3stream.open_store("memory://fuzz-api-options", wal_dir=wal, probe=False, **options)
        except S3StreamError:
            return
        opened.close()


_FILE_URLS = ["file://", "file://relative", "file://host/x", "file:///dev/null/x", "file:///proc/x", "file:///%00"]


_S3_URLS = ["s3://", "s3://b/%00", "s3://b/p?endpoint_url=ftp://x", "s3://b?endpoint_url=http://u:p@h:1",
            "s3://b?region=..", "s3://b?x=1", "s3://b?endpoint_url=http://[::1", "s3://b/a/../c"]


@FUZZ
@given(url=st.one_of(anything, st.text(max_size=40), st.sampled_from([
    "", "memory://", "memory://a/../b", "gs://b", "memory://a?b=c", "memory://x/%2e%2e/y", *_FILE_URLS,
    *_S3_URLS])))
def test_store_urls(url: Any) -> None:
    if isinstance(url, str) and url.lower().startswith("file:") and url not in _FILE_URLS:
        return  # would create a directory wherever the text says (the file backend has its own tests)
    if isinstance(url, str) and url.lower().startswith("s3:") and url not in _S3_URLS:
        return  # would reach out to AWS (S3 endpoints have their own tests)
    with tempfile.TemporaryDirectory() as wal:
        try:
            s3stream.open_store(url, wal_dir=wal, probe=False).close()
        except S3StreamError:
            pass


def test_a_null_header_in_an_arrow_append_is_refused(store: s3stream.Store, tmp_path: Path) -> None:
    """append_arrow accepted a headers list holding a null header (its key is what may not be null), and
    every read of that offset then raised TypeError: the partition could no longer be read past it."""
    log = store.partition("t", 1)
    end = log.log_end_offset
    table = pa.table({"key": pa.array([b"k"]), "value": pa.array([b"v"]), "headers": pa.array([[None]], HEADER_TYPE)})
    with pytest.raises(S3StreamError):
        log.append_arrow(table)
    assert log.log_end_offset == end
    assert [r.offset for r in log.read(log.log_start_offset)] == list(range(log.log_start_offset, end))


@FUZZ
@given(staged=st.one_of(anything, st.lists(anything, max_size=2)))
def test_publish_segments_with_any_argument(store: s3stream.Store, staged: Any) -> None:
    log = store.partition("t", 1)
    end = log.log_end_offset
    try:
        log.publish_segments(staged)
    except S3StreamError:
        assert log.log_end_offset == end
    _intact(store)


def test_publish_segments_refuses_what_is_not_this_partitions_segment(tmp_path: Path) -> None:
    """``publish_segments`` committed any key it was given: another topic's segment (whose records this
    topic then served, and which that topic's retention and GC later delete under it), a key with ``..``
    or a missing object (the partition could then never be read past it)."""
    from s3stream.partition.publish import StagedSegment

    with s3stream.open_store("memory://fuzz-api-publish", wal_dir=str(tmp_path), probe=False) as store:
        store.create_topic("t")
        store.create_topic("other")
        other = store.partition("other", 0)
        other.append([Record(b"k", b"other topic's record")])
        other.roll()
        seg = other.segments()[0]
        size = store.object_store.head(seg.key).size
        log = store.partition("t", 0)
        log.append([Record(b"k", b"v")])
        foreign = [StagedSegment(seg.key, size, 1, seg.size_bytes, seg.max_timestamp, seg.max_timestamp, 0),
                   StagedSegment("../x", 10, 1, 30, 0, 0, 0),
                   StagedSegment(f"logs/{store.topic_id('t')}/0/segments/00000000000000000009-missing.parquet",
                                 10, 1, 30, 0, 0, 0)]
        for staged in foreign:
            with pytest.raises(S3StreamError):
                log.publish_segments([staged])
        assert log.log_end_offset == 1 and [r.value for r in log.read(0)] == [b"v"]
    MemoryObjectStore.drop_namespace("fuzz-api-publish")
