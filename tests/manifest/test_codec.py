"""The manifest codec: round trip, golden bytes, and CorruptData for every malformed input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s3stream.base.errors import CorruptData
from s3stream.manifest.codec import decode_manifest, encode_manifest
from s3stream.manifest.model import Epoch, Manifest, RemovedObject, SegmentRef, WalCursor

from .helpers import manifests

GOLDEN = Path(__file__).parent / "golden" / "manifest_v1.json"
SRC = "logs/t/0/manifest/00000000000000000007.json"


def golden_manifest() -> Manifest:
    """The manifest pinned by ``golden/manifest_v1.json`` (format 1)."""
    return Manifest(
        topic="orders", topic_id="01JAAAAAAAAAAAAAAAAAAAAAAA", partition=3, seq=7, parent_seq=6,
        commit_id="01JBBBBBBBBBBBBBBBBBBBBBBB", committed_at_ms=1_767_225_600_000,
        writer=Epoch(4, "node-a"), cleaner=Epoch(2, "cleaner-1"), log_start_offset=105, next_offset=300,
        segments=(
            SegmentRef("logs/01JAAAAAAAAAAAAAAAAAAAAAAA/3/segments/00000000000000000100-01jccccccccccccccccccccccc"
                       ".parquet", 100, 199, 4096, 5000, 90, 1_767_225_500_000, 1_767_225_400_000,
                       1_767_225_550_000, 0xDEADBEEF, added_seq=5, cleaned=True),
            SegmentRef("logs/01JAAAAAAAAAAAAAAAAAAAAAAA/3/segments/00000000000000000200-01jddddddddddddddddddddddd"
                       ".parquet", 200, 299, 8192, 9000, 100, -1, -1, 1_767_225_560_000, 7, added_seq=6),
        ),
        wal=WalCursor("node-a", 42),
        removed=(RemovedObject("logs/01JAAAAAAAAAAAAAAAAAAAAAAA/3/segments/old.parquet",
                               1_767_225_590_000, 6),),
        cleaner_checkpoint=150, attributes={"uncleanable": "false", "é": "ü"},
    )


def test_golden_bytes_are_stable() -> None:
    data = GOLDEN.read_bytes().rstrip(b"\n")
    assert encode_manifest(golden_manifest()) == data
    assert decode_manifest(data, source="golden") == golden_manifest()


def test_encoding_is_compact_sorted_and_has_format() -> None:
    data = encode_manifest(golden_manifest())
    assert b" " not in data and b"\n" not in data
    obj = json.loads(data)
    assert obj["format"] == 1
    assert list(obj) == sorted(obj)


@settings(max_examples=150, deadline=None)
@given(manifests())
def test_round_trip(m: Manifest) -> None:
    data = encode_manifest(m)
    assert decode_manifest(data, source=SRC) == m
    assert encode_manifest(decode_manifest(data, source=SRC)) == data


def _golden_obj() -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(encode_manifest(golden_manifest()))
    return obj


def _encode(obj: object) -> bytes:
    return json.dumps(obj).encode()


def test_newer_format_is_refused_with_a_clear_message() -> None:
    obj = _golden_obj()
    obj["format"] = 2
    obj["something_new"] = [1, 2]
    with pytest.raises(CorruptData, match="manifest format 2 is newer than this s3stream supports") as info:
        decode_manifest(_encode(obj), source=SRC)
    assert info.value.source == SRC


@pytest.mark.parametrize("data", [
    b"", b"{", b"[]", b"null", b"42", b"\xff\xfe", b'{"format": 1}', b"{" * 100_000,
    b'{"format": 1, "format": 1}', b'{"format": NaN}', b'{"format": "1"}', b'{"format": true}',
])
def test_malformed_bytes_raise_corrupt_data(data: bytes) -> None:
    with pytest.raises(CorruptData) as info:
        decode_manifest(data, source=SRC)
    assert info.value.source == SRC


def _mutations() -> list[tuple[str, Any]]:
    g = _golden_obj()
    seg0 = g["segments"][0]
    return [
        ("drop seq", lambda o: o.pop("seq")),
        ("seq bool", lambda o: o.__setitem__("seq", True)),
        ("seq float", lambda o: o.__setitem__("seq", 7.0)),
        ("seq huge", lambda o: o.__setitem__("seq", 2**64)),
        ("unknown field", lambda o: o.__setitem__("extra", 1)),
        ("segments not a list", lambda o: o.__setitem__("segments", {})),
        ("segment not an object", lambda o: o["segments"].__setitem__(0, 5)),
        ("segment missing key", lambda o: o["segments"][0].pop("key")),
        ("segment unknown field", lambda o: o["segments"][0].__setitem__("x", 1)),
        ("segment crc too big", lambda o: o["segments"][0].__setitem__("crc32c", 2**32)),
        ("segment negative base", lambda o: o["segments"][0].__setitem__("base_offset", -1)),
        ("cleaned not bool", lambda o: o["segments"][0].__setitem__("cleaned", 1)),
        ("gap", lambda o: o["segments"][1].__setitem__("base_offset", seg0["last_offset"] + 2)),
        ("next_offset mismatch", lambda o: o.__setitem__("next_offset", 301)),
        ("writer epoch zero", lambda o: o["writer"].__setitem__("epoch", 0)),
        ("writer not object", lambda o: o.__setitem__("writer", "node-a")),
        ("wal missing field", lambda o: o["wal"].pop("from_seq")),
        ("removed entry bad", lambda o: o["removed"][0].__setitem__("removed_seq", "6")),
        ("attributes non-string", lambda o: o["attributes"].__setitem__("a", 1)),
        ("attributes list", lambda o: o.__setitem__("attributes", [])),
        ("topic_id empty", lambda o: o.__setitem__("topic_id", "")),
        ("partition negative", lambda o: o.__setitem__("partition", -1)),
        ("parent_seq not below seq", lambda o: o.__setitem__("parent_seq", 7)),
    ]


@pytest.mark.parametrize(("name", "mutate"), _mutations(), ids=[n for n, _ in _mutations()])
def test_invalid_fields_raise_corrupt_data(name: str, mutate: Any) -> None:
    obj = _golden_obj()
    mutate(obj)
    with pytest.raises(CorruptData) as info:
        decode_manifest(_encode(obj), source=SRC)
    assert info.value.source == SRC


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_truncation_and_byte_flips_never_escape_as_other_errors(data: st.DataObject) -> None:
    good = encode_manifest(golden_manifest())
    cut = data.draw(st.integers(0, len(good) - 1))
    with pytest.raises(CorruptData):
        decode_manifest(good[:cut], source=SRC)
    pos = data.draw(st.integers(0, len(good) - 1))
    flipped = good[:pos] + bytes([good[pos] ^ data.draw(st.integers(1, 255))]) + good[pos + 1:]
    try:
        decoded = decode_manifest(flipped, source=SRC)
    except CorruptData:
        return
    # A flip that still parses (e.g. inside a string) must yield a valid, different-or-equal value.
    assert isinstance(decoded, Manifest)
