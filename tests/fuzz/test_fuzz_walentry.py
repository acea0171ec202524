"""Fuzzing the local WAL entry decoder (``s3stream.format.walentry``): on any bytes it returns a valid entry
or raises CorruptData naming the source, never IndexError, struct.error, UnicodeDecodeError or a pyarrow
error; damaged encodings are refused; what decodes keeps RECORD_SCHEMA's rules and round-trips."""

from __future__ import annotations

import struct

import crc32c
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from s3stream.base.errors import CorruptData
from s3stream.base.producer import ProducerAppend
from s3stream.base.records import RECORD_SCHEMA
from s3stream.format.walentry import AppendEntry, RollEntry, decode_entry, encode_entry
from tests.formats.strategies import batches, simple_batch

from .kit import FUZZ, fuzz, mutated, mutations, typed_or_value

SOURCE = "local WAL n-1/00000000000000000042.log, seq 7"
_HEAD = struct.Struct("<BBHI")  # version, kind, log_id_len, body_len (docs/formats.md)

_ENTRIES: list[AppendEntry | RollEntry] = [
    AppendEntry("orders/t-1/0", simple_batch([5, 6, 9], value_size=6)),
    AppendEntry("orders/t-1/0", simple_batch([3, 4, 5, 6], value_size=2),
                (ProducerAppend(7, 0, 0, 2, 3), ProducerAppend(8, 1, 10, 1, 6))),
    RollEntry("orders/t-1/0", 10),
]
_VALID = [encode_entry(e) for e in _ENTRIES]


def _decode(payload: bytes) -> AppendEntry | RollEntry | BaseException:
    return typed_or_value(lambda: decode_entry(payload, source=SOURCE), CorruptData)


def _assert_sound(entry: AppendEntry | RollEntry) -> None:
    """What a decoded entry promises its readers: the schema, offsets >= 0 strictly increasing, no null
    where RECORD_SCHEMA allows none, and bytes that encode and decode to the same entry."""
    if isinstance(entry, AppendEntry):
        batch = entry.batch
        assert batch.schema.equals(RECORD_SCHEMA)
        assert batch.column("offset").null_count == 0 and batch.column("timestamp").null_count == 0
        offsets = batch.column("offset").to_pylist()
        assert all(o >= 0 for o in offsets) and offsets == sorted(set(offsets))
        again = decode_entry(encode_entry(entry), source=SOURCE)
        assert isinstance(again, AppendEntry) and again.batch.equals(batch) and again.producers == entry.producers
    else:
        assert entry.base_offset >= 0
        assert decode_entry(encode_entry(entry), source=SOURCE) == entry


def _with_crc(body: bytes) -> bytes:
    """``body`` (an entry without its CRC) with a correct CRC32C appended: the checks behind it are reached."""
    return body + struct.pack("<I", crc32c.crc32c(body))


@FUZZ
@given(st.binary(max_size=300))
def test_arbitrary_bytes_are_corrupt_or_a_sound_entry(data: bytes) -> None:
    got = _decode(data)
    if isinstance(got, CorruptData):
        assert got.source == SOURCE
    else:
        _assert_sound(got)  # type: ignore[arg-type]


@FUZZ
@given(st.binary(max_size=200), st.sampled_from([1, 2, 3, 4, 5, 255]))
def test_arbitrary_bodies_behind_a_valid_crc_are_corrupt_or_sound(body: bytes, kind: int) -> None:
    log_id = b"orders/t-1/0"
    got = _decode(_with_crc(_HEAD.pack(1, kind, len(log_id), len(body)) + log_id + body))
    if not isinstance(got, CorruptData):
        _assert_sound(got)  # type: ignore[arg-type]


@FUZZ
@given(st.sampled_from(range(len(_VALID))), mutations())
def test_damaged_entries_are_refused(which: int, ops: list[tuple[str, int, int, int]]) -> None:
    good = _VALID[which]
    bad = mutated(good, ops)
    got = _decode(bad)
    if bad == good:
        assert not isinstance(got, BaseException)
        return
    assert isinstance(got, CorruptData), f"damaged entry decoded: {got!r}"
    assert got.source == SOURCE


@FUZZ
@given(which=st.sampled_from(range(len(_VALID))), ops=mutations(), id_len=st.integers(0, 0xFFFF),
       body_len=st.integers(0, 0xFFFFFFFF), change=st.sampled_from(["body", "id_len", "body_len", "both"]))
def test_damage_behind_a_patched_crc_is_corrupt_or_sound(which: int, ops: list[tuple[str, int, int, int]],
                                                        id_len: int, body_len: int, change: str) -> None:
    """The CRC is recomputed after the damage, so the length, version, UTF-8, Arrow and offset checks
    themselves are what must refuse it (lengths that lie included)."""
    good = _VALID[which][:-4]
    version, kind, real_id_len, real_body_len = _HEAD.unpack_from(good)
    rest = mutated(good[_HEAD.size:], ops) if change == "body" else good[_HEAD.size:]
    head = _HEAD.pack(version, kind, id_len if change in ("id_len", "both") else real_id_len,
                      body_len if change in ("body_len", "both") else real_body_len)
    got = _decode(_with_crc(head + rest))
    if not isinstance(got, CorruptData):
        _assert_sound(got)  # type: ignore[arg-type]


@fuzz(30)  # tests/formats/test_walentry.py has more
@given(log_id=st.text(min_size=1, max_size=20), batch=batches(max_size=12))
def test_valid_entries_round_trip(log_id: str, batch: pa.RecordBatch) -> None:
    for entry in (AppendEntry(log_id, batch), RollEntry(log_id, batch.num_rows)):
        got = decode_entry(encode_entry(entry), source=SOURCE)
        _assert_sound(got)
        assert got.log_id == log_id


def _loose_entry(column: str, values: pa.Array) -> bytes:
    """An append entry (valid CRC) whose batch has ``column`` replaced: RECORD_SCHEMA's types, but a null
    where the schema allows none (Arrow's IPC reader does not check nullability)."""
    base = simple_batch([1, 2, 3], timestamps=[10, 20, 30])
    arrays = [values if name == column else base.column(name) for name in RECORD_SCHEMA.names]
    schema = pa.schema([f.with_nullable(True) if f.name == column else f for f in RECORD_SCHEMA])
    body = pa.RecordBatch.from_arrays(arrays, schema=schema).serialize().to_pybytes()
    return _with_crc(_HEAD.pack(1, 1, 1, len(body)) + b"t" + body)


def test_nulls_in_non_nullable_columns_are_corrupt() -> None:
    """A null offset leaked ArrowInvalid from ``to_numpy``; a null timestamp was returned as a record."""
    for column, values in (("offset", pa.array([None, 2, 3], pa.int64())),
                           ("timestamp", pa.array([10, None, 30], pa.int64()))):
        got = _decode(_loose_entry(column, values))
        assert isinstance(got, CorruptData), f"null {column}: {got!r}"
