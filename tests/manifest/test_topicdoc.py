"""Topic documents: codec strictness and versioned commits under topics/{name}/meta/."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s3stream.base import layout
from s3stream.base.clock import ManualClock
from s3stream.base.errors import CorruptData, InternalError
from s3stream.base.ids import IdSource
from s3stream.manifest.topicdoc import TopicDoc, decode_topic_doc, encode_topic_doc, topic_store
from s3stream.objectstore.memory import MemoryObjectStore

SRC = "topics/orders/meta/00000000000000000001.json"
DOC = TopicDoc("orders", "01JTOPIC", 3, {"cleanup.policy": "compact"}, False, 1_000, seq=1,
               commit_id="c1", committed_at_ms=1_000)


def test_encoding_is_canonical() -> None:
    assert encode_topic_doc(DOC) == (
        b'{"commit_id":"c1","committed_at_ms":1000,"config":{"cleanup.policy":"compact"},"created_ms":1000,'
        b'"deleted":false,"format":1,"name":"orders","parent_seq":null,"partitions":3,"seq":1,'
        b'"topic_id":"01JTOPIC"}')


@settings(max_examples=60, deadline=None)
@given(st.builds(TopicDoc, name=st.text(min_size=1, max_size=20), topic_id=st.text(min_size=1, max_size=8),
                 partitions=st.integers(1, 10_000), config=st.dictionaries(st.text(), st.text(), max_size=4),
                 deleted=st.booleans(), created_ms=st.integers(0, 2**50), seq=st.integers(0, 50)))
def test_round_trip(doc: TopicDoc) -> None:
    assert decode_topic_doc(encode_topic_doc(doc), source=SRC) == doc


@pytest.mark.parametrize("change", [
    {"format": 9}, {"partitions": 0}, {"partitions": "3"}, {"deleted": 0}, {"config": {"a": 1}},
    {"name": ""}, {"extra": True}, {"parent_seq": 1},
])
def test_malformed_documents_raise_corrupt_data(change: dict[str, object]) -> None:
    obj = json.loads(encode_topic_doc(DOC))
    obj.update(change)
    with pytest.raises(CorruptData) as info:
        decode_topic_doc(json.dumps(obj).encode(), source=SRC)
    assert info.value.source == SRC


def test_newer_format_message() -> None:
    obj = json.loads(encode_topic_doc(DOC)) | {"format": 2}
    with pytest.raises(CorruptData, match="topic document format 2 is newer than this s3stream supports"):
        decode_topic_doc(json.dumps(obj).encode(), source=SRC)


def test_truncated_bytes() -> None:
    data = encode_topic_doc(DOC)
    for cut in range(len(data)):
        with pytest.raises(CorruptData):
            decode_topic_doc(data[:cut], source=SRC)


def test_topic_store_create_update_delete() -> None:
    store, clock = MemoryObjectStore(), ManualClock(42)
    ts = topic_store(store, "orders", clock, IdSource(1))
    assert ts.load_latest() is None

    def create(cur: TopicDoc | None) -> TopicDoc | None:
        return TopicDoc("orders", "tid-1", 2, {}, False, clock.now_ms()) if cur is None else None

    created = ts.commit(create)
    assert created is not None and (created.seq, created.parent_seq, created.committed_at_ms) == (1, None, 42)
    assert ts.commit(create) == created  # creating again changes nothing
    grown = ts.commit(lambda cur: dataclasses.replace(cur, partitions=4) if cur else None)
    deleted = ts.commit(lambda cur: dataclasses.replace(cur, deleted=True) if cur else None)
    assert grown is not None and grown.partitions == 4 and grown.seq == 2
    assert deleted is not None and deleted.deleted and deleted.seq == 3
    assert store.get(layout.topic_meta_key("orders", 3)) == encode_topic_doc(deleted)
    assert topic_store(store, "orders", clock, IdSource(2)).load_latest() == deleted


def test_topic_store_refuses_foreign_and_invalid_documents() -> None:
    store = MemoryObjectStore()
    store.put(layout.topic_meta_key("orders", 1), encode_topic_doc(dataclasses.replace(DOC, name="other")))
    with pytest.raises(CorruptData, match="other"):
        topic_store(store, "orders", ManualClock(0), IdSource(1)).load_latest()
    fresh = topic_store(MemoryObjectStore(), "orders", ManualClock(0), IdSource(1))
    with pytest.raises(InternalError):
        fresh.commit(lambda cur: TopicDoc("orders", "t", 0, {}, False, 0))
    with pytest.raises(InternalError):
        fresh.commit(lambda cur: TopicDoc("elsewhere", "t", 1, {}, False, 0))
