"""Local WAL entries: round trips, validation, corruption of any byte, truncation."""

from __future__ import annotations

import struct

import crc32c
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from s3stream.base.errors import CorruptData, InternalError
from s3stream.format.walentry import WAL_ENTRY_VERSION, AppendEntry, RollEntry, decode_entry, encode_entry

from .strategies import batches, simple_batch

SOURCE = "local WAL of node-1, entry 17"
FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(log_id=st.text(min_size=1, max_size=30), batch=batches())
def test_append_round_trip(log_id: str, batch: pa.RecordBatch) -> None:
    got = decode_entry(encode_entry(AppendEntry(log_id, batch)), source=SOURCE)
    assert isinstance(got, AppendEntry)
    assert got.log_id == log_id
    assert got.batch.equals(batch)
    assert got.batch.schema.equals(batch.schema)


@FAST
@given(log_id=st.text(min_size=1, max_size=30), base=st.integers(0, 2**63 - 1))
def test_roll_round_trip(log_id: str, base: int) -> None:
    assert decode_entry(encode_entry(RollEntry(log_id, base)), source=SOURCE) == RollEntry(log_id, base)


def test_sliced_batch_round_trips() -> None:
    batch = simple_batch(list(range(10, 30)), value_size=5).slice(3, 7)
    got = decode_entry(encode_entry(AppendEntry("t-0", batch)), source=SOURCE)
    assert isinstance(got, AppendEntry) and got.batch.equals(batch)


@pytest.mark.parametrize("entry", [
    AppendEntry("orders-0", simple_batch([5, 6, 9], value_size=6)),
    RollEntry("orders-0", 10),
], ids=["append", "roll"])
def test_every_flipped_byte_is_detected(entry: AppendEntry | RollEntry) -> None:
    payload = encode_entry(entry)
    for i in range(len(payload)):
        for mask in (0x01, 0x80):
            corrupted = bytearray(payload)
            corrupted[i] ^= mask
            with pytest.raises(CorruptData, match=SOURCE):
                decode_entry(bytes(corrupted), source=SOURCE)


def test_truncated_or_extended_payloads_are_corrupt() -> None:
    payload = encode_entry(AppendEntry("orders-0", simple_batch([1, 2])))
    for bad in [payload[:n] for n in (0, 1, 7, 8, 11, len(payload) - 1)] + [payload + b"\0", payload[1:]]:
        with pytest.raises(CorruptData):
            decode_entry(bad, source=SOURCE)


def _entry(version: int, kind: int, log_id: bytes, body: bytes) -> bytes:
    head = struct.pack("<BBHI", version, kind, len(log_id), len(body)) + log_id + body
    return head + struct.pack("<I", crc32c.crc32c(head))


@pytest.mark.parametrize(("payload", "match"), [
    (_entry(WAL_ENTRY_VERSION + 1, 2, b"a", struct.pack("<q", 1)), "version"),
    (_entry(WAL_ENTRY_VERSION, 3, b"a", struct.pack("<q", 1)), "kind"),
    (_entry(WAL_ENTRY_VERSION, 2, b"a", struct.pack("<q", -1)), "base_offset"),
    (_entry(WAL_ENTRY_VERSION, 2, b"a", struct.pack("<i", 1)), "body"),
    (_entry(WAL_ENTRY_VERSION, 2, b"", struct.pack("<q", 1)), "empty log_id"),
    (_entry(WAL_ENTRY_VERSION, 2, b"\xff", struct.pack("<q", 1)), "UTF-8"),
    (_entry(WAL_ENTRY_VERSION, 1, b"a", b"\0" * 16), "decode"),
    (_entry(WAL_ENTRY_VERSION, 1, b"a", simple_batch([3, 2]).serialize().to_pybytes()), "increasing"),
    (_entry(WAL_ENTRY_VERSION, 1, b"a", simple_batch([1, 2]).serialize().to_pybytes()[:-8]), "decode"),
], ids=["version", "kind", "negative-base", "roll-body-length", "empty-log-id", "log-id-utf8", "garbage-batch",
        "decreasing-offsets", "truncated-batch"])
def test_invalid_entries_with_valid_crc(payload: bytes, match: str) -> None:
    with pytest.raises(CorruptData, match=match):
        decode_entry(payload, source=SOURCE)


def test_encode_validates() -> None:
    for entry in [AppendEntry("a", simple_batch([2, 1])), AppendEntry("a", simple_batch([-3])),
                  AppendEntry("a", simple_batch([1]).drop_columns(["key"])), AppendEntry("", simple_batch([1])),
                  AppendEntry("x" * 70_000, simple_batch([1])), RollEntry("a", -1)]:
        with pytest.raises(InternalError):
            encode_entry(entry)
