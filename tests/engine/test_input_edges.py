"""Bad input at the API edge (issue 24, item 7): every wrong argument or record field is refused with a
typed error before anything is stored, a closed store serves nothing, and ``max_bytes=0`` still returns
a record (Kafka's "at least one")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from s3stream import InvalidRecord, OffsetOutOfRange, Record
from s3stream.base.errors import Closed, InvalidArgument, InvalidRequest, MalformedRecord

from .helpers import T0, open_mem, read_all


@pytest.mark.parametrize(("fields", "match"), [
    ({"headers": [("h", 7)]}, r"headers\[0\] \('h'\) value must be bytes, not int"),
    ({"headers": (("h", 7),)}, r"value must be bytes, not int"),        # a tuple skipped the old conversion
    ({"headers": [("h", 10**12)]}, r"value must be bytes, not int"),    # bytes(10**12) would allocate 1 TB
    ({"headers": [("h", "text")]}, r"value must be bytes, not str"),
    ({"headers": [("h", None)]}, r"value must be bytes, not NoneType"),
    ({"headers": [(b"h", b"v")]}, r"key must be a str, not bytes"),     # was stored as the key "b'h'"
    ({"headers": [("h",)]}, r"must be a \(str, bytes\) pair"),
    ({"headers": "hv"}, r"sequence of \(str, bytes\) pairs, not str"),
    ({"headers": 5}, r"sequence of \(str, bytes\) pairs, not int"),
    ({"timestamp": True}, r"timestamp must be an int, not a bool"),    # bool is an int subclass
    ({"timestamp": 1.5}, r"timestamp must be an int, not float"),
    ({"timestamp": "1700000000000"}, r"timestamp must be an int, not str"),
    ({"timestamp": 1 << 63}, r"timestamp 9223372036854775808 is out of range"),  # past int64: Arrow overflow
    ({"key": "text"}, r"Record\.key must be bytes or None, not str"),
])
def test_malformed_record_fields_are_refused_when_built(fields: dict[str, Any], match: str) -> None:
    kwargs: dict[str, Any] = {"key": b"k", "value": b"v", **fields}
    with pytest.raises(MalformedRecord, match=match) as info:
        Record(**kwargs)
    # the record errors callers already catch
    assert {InvalidRecord, InvalidArgument, TypeError, ValueError} <= set(type(info.value).__mro__)


def test_well_formed_fields_are_normalised() -> None:
    rec = Record(b"k", b"v", np.int64(T0), [("a", bytearray(b"x")), ["b", memoryview(b"y")]])  # type: ignore[arg-type,list-item]
    assert rec.timestamp == T0 and type(rec.timestamp) is int
    assert rec.headers == (("a", b"x"), ("b", b"y")) and all(type(v) is bytes for _, v in rec.headers)
    assert Record(b"k", b"v", headers=None).headers == ()  # type: ignore[arg-type]
    assert Record(b"k", b"v", headers=[]).headers == ()
    pairs = (("h", b"1"),)
    assert Record(b"k", b"v", headers=pairs).headers is pairs  # the common shape is kept as is


def test_header_values_round_trip_exactly(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t")
        log = store.partition("t", 0)
        log.append([Record(b"k", b"v", T0, [("h", b"\x00\x01"), ("h", b"")])])
        (got,) = log.read(0)
        assert got.headers == (("h", b"\x00\x01"), ("h", b""))


@pytest.mark.parametrize(("call", "match"), [
    (lambda log: log.read("a"), r"offset must be an int, not str 'a'"),
    (lambda log: log.read(None), r"offset must be an int, not NoneType"),
    (lambda log: log.read(True), r"offset must be an int, not a bool"),
    (lambda log: log.read(0.0), r"offset must be an int, not float"),
    (lambda log: log.read(0, max_records="3"), r"max_records must be an int"),
    (lambda log: log.read(0, max_records=True), r"max_records must be an int, not a bool"),
    (lambda log: log.read(0, max_bytes=-1), r"max_bytes -1 is out of range \[0, \]"),
    (lambda log: log.read(0, max_bytes=1.5), r"max_bytes must be an int"),
    (lambda log: log.read_arrow("a"), r"offset must be an int"),
    (lambda log: log.offset_for_timestamp("x"), r"timestamp must be an int, not str"),
    (lambda log: log.offset_for_timestamp(None), r"timestamp must be an int, not NoneType"),
    (lambda log: log.offset_for_timestamp(False), r"timestamp must be an int, not a bool"),
    (lambda log: log.offset_for_timestamp(1 << 64), r"timestamp 18446744073709551616 is out of range"),
    (lambda log: log.delete_records(None), r"before_offset must be an int, not NoneType"),
    (lambda log: log.delete_records(True), r"before_offset must be an int, not a bool"),
    (lambda log: log.delete_records("1"), r"before_offset must be an int, not str"),
    (lambda log: log.append(None), r"append takes an iterable of Records \(a list\), not NoneType"),
    (lambda log: log.append(Record(b"k", b"v")), r"append takes an iterable of Records \(a list\), not Record"),
])
def test_bad_arguments_are_typed_and_change_nothing(mem_url: str, tmp_path: Path, call: Any, match: str) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t")
        log = store.partition("t", 0)
        log.append([Record(b"k%d" % i, b"v", T0 + i) for i in range(3)])
        with pytest.raises(InvalidArgument, match=match) as info:
            call(log)
        err: object = info.value
        assert isinstance(err, InvalidRequest) and isinstance(err, TypeError | ValueError)
        assert (log.log_start_offset, log.log_end_offset) == (0, 3)
        assert [r.key for r in read_all(log)] == [b"k0", b"k1", b"k2"]


def test_numpy_integers_are_accepted_as_offsets(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t")
        log = store.partition("t", 0)
        log.append([Record(b"k%d" % i, b"v", T0 + i) for i in range(3)])
        assert [r.offset for r in log.read(np.int64(1), max_records=np.int32(1))] == [1]  # type: ignore[arg-type]
        assert log.offset_for_timestamp(np.int64(T0 + 2)) == 2  # type: ignore[arg-type]
        assert log.delete_records(np.int64(1)) == 1  # type: ignore[arg-type]


@pytest.mark.parametrize("tier", ["sealed", "wal-object", "memory"])
def test_max_bytes_zero_returns_one_record(mem_url: str, tmp_path: Path, tier: str) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t")
        log = store.partition("t", 0)
        log.append([Record(b"k%d" % i, b"v" * 100, T0 + i) for i in range(5)])
        if tier == "sealed":
            log.roll()
        elif tier == "wal-object":
            store.flush()
        for start in (0, 3):
            assert [r.offset for r in log.read(start, max_bytes=0)] == [start]
            assert [r.offset for r in log.read(start, max_bytes=1)] == [start]
            assert log.read_arrow(start, max_bytes=0).num_rows == 1
        assert log.read(5, max_bytes=0) == []  # the log end: nothing, as before
    if tier != "memory":
        with open_mem(mem_url, tmp_path, wal="reader") as reader:  # a process that does not write it
            assert [r.offset for r in reader.partition("t", 0).read(2, max_bytes=0)] == [2]


def test_a_closed_store_serves_nothing(mem_url: str, tmp_path: Path) -> None:
    store = open_mem(mem_url, tmp_path)
    store.create_topic("t")
    log = store.partition("t", 0)
    log.append([Record(b"k", b"v", T0)])
    log.roll()
    log.append([Record(b"k", b"tail", T0)])
    store.close()
    calls: list[Any] = [
        lambda: log.read(0), lambda: log.read_arrow(1), lambda: log.offset_for_timestamp(T0),
        lambda: log.delete_records(1), lambda: log.append([Record(b"k", b"late", T0)]),
    ]
    for call in calls:
        with pytest.raises(Closed):
            call()
    with open_mem(mem_url, tmp_path) as again:  # nothing was changed by the refused calls
        log2 = again.partition("t", 0)
        assert (log2.log_start_offset, log2.log_end_offset) == (0, 2)
        assert [r.value for r in read_all(log2)] == [b"v", b"tail"]


def test_offsets_still_out_of_range_where_they_were(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t")
        log = store.partition("t", 0)
        log.append([Record(b"k", b"v", T0)])
        for bad in (-1, 2, 1 << 70):
            with pytest.raises(OffsetOutOfRange):
                log.read(bad)
        with pytest.raises(OffsetOutOfRange):
            log.delete_records(1 << 70)
        assert log.offset_for_timestamp(-(1 << 63)) == 0
        assert log.offset_for_timestamp((1 << 63) - 1) is None
