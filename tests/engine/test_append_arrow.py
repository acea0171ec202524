"""append_arrow: a RecordBatch/Table of key, value, timestamp, headers appended with Arrow checks only."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from s3stream import AppendResult, ManualClock, Record
from s3stream.base.errors import InvalidArgument, InvalidRecord, RecordTooLarge
from s3stream.base.records import HEADER_TYPE

from .helpers import T0, open_mem, read_all


def _headers(rows: list[list[tuple[str, bytes | None]]]) -> pa.Array:
    return pa.array([[{"key": k, "value": v} for k, v in row] for row in rows], type=HEADER_TYPE)


def test_a_full_batch_reads_back_as_records(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t")
        log = store.partition("t", 0)
        batch = pa.RecordBatch.from_arrays(
            [pa.array([b"k0", None, b"k2"], pa.binary()), pa.array([b"v0", b"v1", None], pa.binary()),
             pa.array([T0 - 5, T0, T0 + 5], pa.int64()), _headers([[("h", b"x")], [], [("a", b"1"), ("b", b"2")]])],
            names=["key", "value", "timestamp", "headers"])
        assert log.append_arrow(batch) == AppendResult(0, 2)
        assert read_all(log) == [Record(b"k0", b"v0", T0 - 5, (("h", b"x"),)), Record(None, b"v1", T0),
                                 Record(b"k2", None, T0 + 5, (("a", b"1"), ("b", b"2")))]
        log.append([Record(b"py", b"record")])  # Record appends and Arrow appends interleave
        table = pa.table({"value": pa.array(["s0", "s1"]), "key": pa.array(["a", "b"])})  # strings, any order
        assert log.append_arrow(table) == AppendResult(4, 5)
        got = read_all(log)
        assert [(r.offset, r.key, r.value, r.timestamp) for r in got[3:]] == [
            (3, b"py", b"record", T0), (4, b"a", b"s0", T0), (5, b"b", b"s1", T0)]


def test_optional_columns_and_chunked_tables(mem_url: str, tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with open_mem(mem_url, tmp_path, clock=clock) as store:
        store.create_topic("t")
        log = store.partition("t", 0)
        table = pa.concat_tables([pa.table({"value": pa.array([b"a", b"b"])}),
                                  pa.table({"value": pa.array([b"c"])})])
        assert table.column("value").num_chunks == 2
        assert log.append_arrow(table) == AppendResult(0, 2)
        stamps = pa.table({"value": pa.array([b"d", b"e"]), "timestamp": pa.array([None, T0 - 1], pa.int64())})
        log.append_arrow(stamps)
        as_timestamp = pa.table({"value": [b"f"], "timestamp": pa.array([T0 * 1000], pa.timestamp("us"))})
        log.append_arrow(as_timestamp)
        got = read_all(log)
        assert [(r.key, r.value, r.timestamp, r.headers) for r in got] == [
            (None, b"a", T0, ()), (None, b"b", T0, ()), (None, b"c", T0, ()), (None, b"d", T0, ()),
            (None, b"e", T0 - 1, ()), (None, b"f", T0, ())]


def test_log_append_time_overrides_the_batch_timestamps(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t", config={"message.timestamp.type": "LogAppendTime"})
        log = store.partition("t", 0)
        log.append_arrow(pa.table({"value": [b"a"], "timestamp": pa.array([5], pa.int64())}))
        assert [r.timestamp for r in read_all(log)] == [T0]


def test_invalid_batches_are_refused_whole(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("c", config={"cleanup.policy": "compact", "max.message.bytes": "300",
                                        "message.timestamp.before.max.ms": "3600000"})
        log = store.partition("c", 0)
        with pytest.raises(InvalidRecord, match="record 1 has a null key"):
            log.append_arrow(pa.table({"key": pa.array([b"k", None]), "value": pa.array([b"v", b"v"])}))
        with pytest.raises(InvalidRecord, match="record 0 has a null key"):
            log.append_arrow(pa.table({"value": pa.array([b"v"])}))  # no key column: all null
        with pytest.raises(RecordTooLarge, match="record 1 is 421 bytes"):
            log.append_arrow(pa.table({"key": [b"k", b"k"], "value": [b"v", b"v" * 399]}))
        with pytest.raises(RecordTooLarge, match="the batch"):
            log.append_arrow(pa.table({"key": [b"k"] * 3, "value": [b"v" * 60] * 3}))
        with pytest.raises(InvalidRecord, match="record 0 timestamp"):
            log.append_arrow(pa.table({"key": [b"k"], "value": [b"v"], "timestamp": pa.array([1], pa.int64())}))
        with pytest.raises(InvalidRecord, match="negative timestamp"):
            log.append_arrow(pa.table({"key": [b"k"], "value": [b"v"], "timestamp": pa.array([-1], pa.int64())}))
        with pytest.raises(InvalidRecord, match="at least one"):
            log.append_arrow(pa.table({"key": pa.array([], pa.binary()), "value": pa.array([], pa.binary())}))
        with pytest.raises(InvalidArgument, match="'value' column"):
            log.append_arrow(pa.table({"key": [b"k"]}))
        with pytest.raises(InvalidArgument, match="offset"):
            log.append_arrow(pa.table({"key": [b"k"], "value": [b"v"], "offset": [7]}))
        with pytest.raises(InvalidArgument, match="must be binary"):
            log.append_arrow(pa.table({"key": [b"k"], "value": [1]}))
        with pytest.raises(InvalidArgument, match="timestamp"):
            log.append_arrow(pa.table({"key": [b"k"], "value": [b"v"], "timestamp": ["soon"]}))
        with pytest.raises(InvalidArgument, match="headers"):
            log.append_arrow(pa.table({"key": [b"k"], "value": [b"v"], "headers": [1]}))
        with pytest.raises(InvalidArgument, match="RecordBatch or Table"):
            log.append_arrow([Record(b"k", b"v")])  # type: ignore[arg-type, unused-ignore]
        assert log.log_end_offset == 0  # nothing of a refused batch was appended
        assert log.append_arrow(pa.table({"key": [b"k"], "value": [b"ok"]})) == AppendResult(0, 0)


def test_header_bytes_count_against_max_message_bytes(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t", config={"max.message.bytes": "180"})
        log = store.partition("t", 0)
        rows = pa.table({"key": [b"k", b"k"], "value": [b"v", b"v"],
                         "headers": _headers([[], [("name", b"x" * 150)]])})
        with pytest.raises(RecordTooLarge, match="record 1 is 185 bytes"):
            log.append_arrow(rows)  # 21 + 1 + 1 + (4 + 150 + 8) = 185
        assert Record(b"k", b"v", headers=[("name", b"x" * 150)]).size_bytes == 185


def test_async_arrow_appends_share_rounds_with_record_appends(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t")
        log = store.partition("t", 0)
        futures = []
        for i in range(40):
            if i % 2:
                futures.append(log.append_arrow_async(pa.table({"key": [b"a%d" % i] * 2, "value": [b"x", b"y"]})))
            else:
                futures.append(log.append_async([Record(b"r%d" % i, b"z")]))
        results = [f.result(timeout=30) for f in futures]
        assert [r.last_offset - r.base_offset for r in results] == [i % 2 for i in range(40)]
        got = read_all(log)
        assert [r.offset for r in got] == list(range(60))
        for i, res in enumerate(results):
            keys = [r.key for r in got[res.base_offset:res.last_offset + 1]]
            assert keys == ([b"a%d" % i] * 2 if i % 2 else [b"r%d" % i])


def test_a_null_header_value_is_kept_a_null_header_or_key_refused(mem_url: str, tmp_path: Path) -> None:
    """Kafka allows a header without a value (the Kafka server relies on it); a header that is itself null,
    or has a null key, is no record's, and every read of it would fail."""
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t")
        log = store.partition("t", 0)
        assert log.append_arrow(pa.table({"value": [b"v"], "headers": _headers([[("h", None)]])})) == AppendResult(0, 0)
        assert log.read_arrow(0).column("headers").to_pylist() == [[{"key": "h", "value": None}]]
        null_item = pa.array([[None, {"key": "h", "value": b"x"}]], HEADER_TYPE)
        items = pa.StructArray.from_arrays([pa.array([None], pa.string()), pa.array([b"x"])],
                                           fields=list(HEADER_TYPE.value_type))
        null_key = pa.ListArray.from_arrays(pa.array([0, 1], pa.int32()), items, type=HEADER_TYPE)
        for headers in (null_item, null_key):
            with pytest.raises(InvalidRecord, match="header"):
                log.append_arrow(pa.table({"value": [b"w"], "headers": headers}))
        assert log.log_end_offset == 1
