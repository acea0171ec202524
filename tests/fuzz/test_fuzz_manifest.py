"""Fuzzing the manifest codec and the topic document decoder (``s3stream.manifest``): on any bytes, any JSON
and any edit of a valid document they return a document that encodes and decodes back to itself, or raise
CorruptData naming the source; never KeyError, TypeError, UnicodeError or RecursionError."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from s3stream.base.errors import CorruptData
from s3stream.manifest.codec import decode_manifest, encode_manifest
from s3stream.manifest.model import Epoch, Manifest, RemovedObject, SegmentRef, WalCursor
from s3stream.manifest.topicdoc import TopicDoc, decode_topic_doc, encode_topic_doc
from tests.manifest.helpers import manifests

from .kit import FUZZ, edited_json, fuzz, json_values, mutated, mutations, typed_or_value

SOURCE = "logs/01J0000000000000000000000/3/manifest/00000000000000000007.json"
TOPIC_SOURCE = "topics/orders/meta/00000000000000000002.json"

_KEY = "logs/01J0000000000000000000000/3/segments/{:020d}-01jccccccccccccccccccccccc.parquet"
_MANIFEST = Manifest(
    topic="orders", topic_id="01J0000000000000000000000", partition=3, seq=7, parent_seq=6, commit_id="c-7",
    committed_at_ms=1_767_225_600_000, writer=Epoch(4, "n-a"), cleaner=Epoch(2, "cleaner-1"),
    log_start_offset=105, next_offset=300,
    segments=(SegmentRef(_KEY.format(100), 100, 199, 4096, 5000, 90, 1_767_225_500_000, 1_767_225_400_000,
                         1_767_225_550_000, 0xDEADBEEF, added_seq=5, cleaned=True),
              SegmentRef(_KEY.format(200), 200, 299, 8192, 9000, 100, -1, -1, 1_767_225_560_000, 7, added_seq=6,
                         offset_delta=200)),
    wal=WalCursor("n-a", 42), removed=(RemovedObject(_KEY.format(0), 1_767_225_590_000, 6),),
    cleaner_checkpoint=150, attributes={"uncleanable": "false", "é": "ü"})
_TOPIC = TopicDoc("orders", "01J0000000000000000000000", 3, {"cleanup.policy": "compact", "retention.ms": "-1"},
                  created_ms=5, seq=2, parent_seq=1, commit_id="c-2", committed_at_ms=9)
_VALID = encode_manifest(_MANIFEST)
_VALID_TOPIC = encode_topic_doc(_TOPIC)


def _manifest(data: bytes) -> Manifest | BaseException:
    got = typed_or_value(lambda: decode_manifest(data, source=SOURCE), CorruptData)
    if isinstance(got, CorruptData):
        assert got.source == SOURCE
    else:  # what decodes is what the next commit re-encodes: it must survive the round trip unchanged
        assert isinstance(got, Manifest)
        assert decode_manifest(encode_manifest(got), source=SOURCE) == got
    return got


def _topic(data: bytes) -> TopicDoc | BaseException:
    got = typed_or_value(lambda: decode_topic_doc(data, source=TOPIC_SOURCE), CorruptData)
    if isinstance(got, CorruptData):
        assert got.source == TOPIC_SOURCE
    else:
        assert isinstance(got, TopicDoc)
        assert decode_topic_doc(encode_topic_doc(got), source=TOPIC_SOURCE) == got
    return got


def _dumps(doc: Any) -> bytes:
    return json.dumps(doc).encode()  # ensure_ascii: a lone surrogate becomes a \\ud800 escape, as a forger writes it


@FUZZ
@given(st.binary(max_size=300))
def test_arbitrary_bytes(data: bytes) -> None:
    _manifest(data)
    _topic(data)


@FUZZ
@given(json_values)
def test_arbitrary_json(doc: Any) -> None:
    _manifest(_dumps(doc))
    _topic(_dumps(doc))
    _manifest(_dumps({**json.loads(_VALID), "format": 1, "extra": doc}))  # an unknown field, whatever it holds


@FUZZ
@given(st.data())
def test_edited_manifests_are_corrupt_or_round_trip(data: st.DataObject) -> None:
    _manifest(_dumps(data.draw(edited_json(json.loads(_VALID)))))


@FUZZ
@given(st.data())
def test_edited_topic_documents_are_corrupt_or_round_trip(data: st.DataObject) -> None:
    _topic(_dumps(data.draw(edited_json(json.loads(_VALID_TOPIC)))))


@FUZZ
@given(mutations())
def test_damaged_bytes_are_corrupt_or_round_trip(ops: list[tuple[str, int, int, int]]) -> None:
    """JSON has no checksum: a flip inside a string may still parse, and must then be a valid document."""
    _manifest(mutated(_VALID, ops))
    _topic(mutated(_VALID_TOPIC, ops))


@FUZZ
@given(st.integers(1, 5000), st.sampled_from(["[", "{\"a\":", "[{\"x\":"]))
def test_deep_nesting_is_corrupt(depth: int, opener: str) -> None:
    doc = (opener * depth).encode()
    assert isinstance(_manifest(doc), CorruptData)
    assert isinstance(_topic(doc), CorruptData)


@fuzz(60)  # tests/manifest/test_codec.py has more
@given(manifests())
def test_valid_manifests_round_trip(m: Manifest) -> None:
    data = encode_manifest(m)
    assert _manifest(data) == m


@FUZZ
@given(st.sampled_from(["topic", "topic_id", "commit_id", "segment key", "removed key", "attribute key",
                        "attribute value", "writer owner", "wal node"]),
       st.sampled_from(["\ud800", "a\udfffb", "\udc80\ud800"]))
def test_lone_surrogates_are_corrupt_not_unencodable(where: str, text: str) -> None:
    """JSON's ``\\ud800`` escape decodes to a lone surrogate, which no UTF-8 byte string can hold: the
    decoder accepted it, and the next commit of that document (or the segment key reaching an object
    store) failed with UnicodeEncodeError."""
    doc = json.loads(_VALID)
    if where == "segment key":
        doc["segments"][0]["key"] = text
    elif where == "removed key":
        doc["removed"][0]["key"] = text
    elif where == "attribute key":
        doc["attributes"][text] = "v"
    elif where == "attribute value":
        doc["attributes"]["k"] = text
    elif where == "writer owner":
        doc["writer"]["owner"] = text
    elif where == "wal node":
        doc["wal"]["node_id"] = text
    else:
        doc[where] = text
    assert isinstance(_manifest(_dumps(doc)), CorruptData)
    topic = json.loads(_VALID_TOPIC)
    topic["name" if where == "topic" else "commit_id" if where == "commit_id" else "topic_id"] = text
    assert isinstance(_topic(_dumps(topic)), CorruptData)
