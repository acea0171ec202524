"""The manifest value: derived properties, lookup, immutability and every invariant."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from s3stream.base.errors import CorruptData
from s3stream.manifest.model import Epoch, FrozenMap, Manifest, RemovedObject, WalCursor, check_invariants

from .helpers import PARTITION, TOPIC, TOPIC_ID, manifest_with, seg


def test_empty_manifest_is_seq_zero_and_valid() -> None:
    m = Manifest.empty(TOPIC, TOPIC_ID, PARTITION)
    assert (m.seq, m.parent_seq, m.next_offset, m.log_start_offset, m.segments) == (0, None, 0, 0, ())
    assert m.attributes == {}
    check_invariants(m)


def test_segment_properties() -> None:
    s = seg(10, 19, max_ts=-1, created_ms=555)
    assert s.end_offset == 20
    assert s.largest_timestamp == 555  # ROLL-5: no record timestamps -> the mtime
    assert dataclasses.replace(s, max_timestamp=42).largest_timestamp == 42


def test_segment_index_for_bisects() -> None:
    m = manifest_with((0, 9), (10, 10), (11, 99))
    assert [m.segment_index_for(o) for o in (0, 9, 10, 11, 50, 99)] == [0, 0, 1, 2, 2, 2]
    assert m.segment_index_for(100) is None
    assert m.segment_index_for(-1) is None
    assert Manifest.empty(TOPIC, TOPIC_ID, PARTITION).segment_index_for(0) is None
    assert manifest_with((5, 9)).segment_index_for(4) is None


def test_sealed_bytes_sums_logical_sizes() -> None:
    assert manifest_with((0, 9), (10, 19)).sealed_bytes == 200


def test_manifest_is_immutable_hashable_and_picklable() -> None:
    attrs = {"uncleanable": "true"}
    m = dataclasses.replace(manifest_with((0, 9)), attributes=attrs)
    attrs["other"] = "x"  # the caller's dict does not alias the manifest
    assert dict(m.attributes) == {"uncleanable": "true"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.seq = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        m.attributes["x"] = "y"  # type: ignore[index]
    assert pickle.loads(pickle.dumps(m)) == m
    assert hash(pickle.loads(pickle.dumps(m))) == hash(m)
    assert FrozenMap({"a": "1"}) == {"a": "1"}


def test_lists_are_normalised_to_tuples() -> None:
    m = Manifest(topic=TOPIC, topic_id=TOPIC_ID, partition=0, segments=[seg(0, 1)],  # type: ignore[arg-type]
                 next_offset=2)
    assert isinstance(m.segments, tuple)


@pytest.mark.parametrize(("change", "message"), [
    ({"seq": -1}, "seq < 0"),
    ({"seq": 3, "parent_seq": 3}, "parent_seq"),
    ({"log_start_offset": -1}, "log_start_offset"),
    ({"next_offset": 7}, "next_offset 7 != end"),
    ({"writer": Epoch(0, "n1")}, "writer epoch"),
    ({"cleaner": Epoch(1, "")}, "cleaner epoch"),
    ({"wal": WalCursor("", 0)}, "wal cursor"),
    ({"cleaner_checkpoint": -5}, "cleaner_checkpoint"),
    ({"format": 0}, "format"),
])
def test_header_invariants(change: dict[str, object], message: str) -> None:
    m = dataclasses.replace(manifest_with((0, 9)), **change)  # type: ignore[arg-type]
    with pytest.raises(CorruptData, match=message):
        check_invariants(m, source="somewhere/manifest")


def test_segment_invariants() -> None:
    good = manifest_with((0, 9), (10, 19))
    check_invariants(good)
    a, b = good.segments
    cases = {
        "gap or overlap": (a, seg(11, 19)),
        "bad range": (a, dataclasses.replace(b, last_offset=5)),
        "duplicate segment key": (a, dataclasses.replace(b, key=a.key)),
        "record_count exceeds": (a, dataclasses.replace(b, record_count=11)),
        "negative": (a, dataclasses.replace(b, size_bytes=-1)),
        "crc32c": (a, dataclasses.replace(b, crc32c=2**32)),
        "timestamp": (a, dataclasses.replace(b, max_timestamp=-2)),
    }
    for message, segs in cases.items():
        with pytest.raises(CorruptData, match=message):
            check_invariants(dataclasses.replace(good, segments=segs, next_offset=segs[-1].end_offset))
    with pytest.raises(CorruptData, match="gap or overlap"):  # unsorted
        check_invariants(dataclasses.replace(good, segments=(b, a)))


def test_removed_invariants() -> None:
    m = manifest_with((0, 9))
    with pytest.raises(CorruptData, match="still referenced"):
        check_invariants(dataclasses.replace(m, removed=(RemovedObject(m.segments[0].key, 0, 1),)))
    dup = (RemovedObject("k", 0, 1), RemovedObject("k", 0, 1))
    with pytest.raises(CorruptData, match="duplicate removed key"):
        check_invariants(dataclasses.replace(m, removed=dup))


def test_corrupt_data_names_the_source() -> None:
    with pytest.raises(CorruptData) as info:
        check_invariants(dataclasses.replace(manifest_with((0, 9)), next_offset=3), source="bucket/key")
    assert info.value.source == "bucket/key"
    assert "bucket/key" in str(info.value)
