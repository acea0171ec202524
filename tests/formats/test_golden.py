"""Golden bytes: committed files must keep decoding, and today's encoder must reproduce them.

WAL objects and WAL entries are compared byte for byte. Parquet bytes embed the writer's version string
(``created_by``) and depend on its encoder, so for segments the decoded content and the footer metadata
are the golden contract; byte equality is checked only when the pyarrow version that wrote the golden
file is the running one.

Regenerate (only for a deliberate format change, with a version bump):
``S3STREAM_REGENERATE_GOLDEN=1 python -m pytest tests/formats/test_golden.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3stream.format.segment import SegmentReader, encode_segment
from s3stream.format.walentry import AppendEntry, RollEntry, decode_entry, encode_entry
from s3stream.format.walobject import (
    WalChunkInput,
    decode_chunk,
    encode_fence_object,
    encode_wal_object,
    read_wal_index,
)

from .strategies import make_batch

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "formats"
REGENERATE = os.environ.get("S3STREAM_REGENERATE_GOLDEN") == "1"


def golden_batch(first_offset: int = 100) -> pa.RecordBatch:
    """Four records covering null key, tombstone, headers (with a null header value) and horizon_ms."""
    rows = [
        {"timestamp": 1_700_000_000_000, "key": b"user-1", "value": b"{\"n\":1}", "headers": None,
         "horizon_ms": None},
        {"timestamp": 1_700_000_000_500, "key": None, "value": b"no key", "headers": [],
         "horizon_ms": None},
        {"timestamp": 1_699_999_999_000, "key": b"user-2", "value": None,
         "headers": [{"key": "trace", "value": b"abc"}, {"key": "empty", "value": None}],
         "horizon_ms": 1_700_086_400_000},
        {"timestamp": 1_700_000_001_000, "key": b"user-1", "value": b"\x00\xff" * 10, "headers": None,
         "horizon_ms": None},
    ]
    return make_batch(rows, [first_offset, first_offset + 1, first_offset + 3, first_offset + 4])


def golden_wal_object() -> bytes:
    chunks = [WalChunkInput("t0001/0", golden_batch(100), (103,)),
              WalChunkInput("t0001/1", golden_batch(7), ()),
              WalChunkInput("t0002/0", golden_batch(0).slice(0, 0), (55,))]
    data, _ = encode_wal_object(node_id="node-a", seq=12, created_ms=1_700_000_002_000, chunks=chunks)
    return data


CASES = {
    "wal_object_v1.bin": golden_wal_object,
    "wal_fence_v1.bin": lambda: encode_fence_object(node_id="node-b", seq=3, created_ms=1_700_000_003_000),
    "wal_entry_append_v1.bin": lambda: encode_entry(AppendEntry("t0001/0", golden_batch())),
    "wal_entry_roll_v1.bin": lambda: encode_entry(RollEntry("t0001/0", 104)),
}


def golden_segment() -> bytes:
    data, _ = encode_segment(golden_batch(), base_offset=98, last_offset=110,
                             first_batch_max_timestamp=1_700_000_000_000, row_group_bytes=64)
    return data


def segment_description(data: bytes) -> dict[str, object]:
    """What the golden segment contract is: decoded rows, s3stream footer metadata, the row-group index."""
    reader = SegmentReader(lambda s, e: data[s:e], len(data), source="golden")
    meta = pq.ParquetFile(pa.BufferReader(data)).metadata
    kv = {k.decode(): v.decode() for k, v in (meta.metadata or {}).items()
          if k.startswith(b"s3stream.") and k != b"s3stream.footer_crc32c"}
    rows = reader.read_all().to_pylist()
    return {
        "rows": json.loads(json.dumps(rows, default=lambda b: b.hex())),
        "footer": kv,
        "row_groups": [[g.first_offset, g.last_offset, g.min_timestamp, g.max_timestamp, g.num_rows,
                        g.size_bytes, g.unkeyed, g.tombstones, g.crc32c] for g in reader.row_groups],
        "created_by": meta.created_by,
    }


def _golden(name: str, produce: bytes) -> bytes:
    path = GOLDEN / name
    if REGENERATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(produce)
    return path.read_bytes()


@pytest.mark.parametrize("name", sorted(CASES))
def test_encoder_reproduces_golden_bytes(name: str) -> None:
    fresh = CASES[name]()
    assert _golden(name, fresh) == fresh


def test_golden_wal_object_decodes() -> None:
    data = (GOLDEN / "wal_object_v1.bin").read_bytes()
    index = read_wal_index(lambda s, e: data[s:e], len(data), source="golden")
    assert (index.node_id, index.seq, index.created_ms, index.fence) == ("node-a", 12, 1_700_000_002_000, False)
    assert [(c.log_id, c.base_offset, c.last_offset, c.record_count, c.roll_offsets) for c in index.chunks] == [
        ("t0001/0", 100, 104, 4, (103,)), ("t0001/1", 7, 11, 4, ()), ("t0002/0", 55, 54, 0, (55,))]
    first = index.chunks[0]
    assert (first.first_timestamp, first.max_timestamp) == (1_700_000_000_000, 1_700_000_001_000)
    for chunk, first_offset in zip(index.chunks[:2], (100, 7), strict=True):
        batch = decode_chunk(data[chunk.byte_start:chunk.byte_end], chunk, source="golden")
        assert batch.equals(golden_batch(first_offset))


def test_golden_fence_and_entries_decode() -> None:
    fence = (GOLDEN / "wal_fence_v1.bin").read_bytes()
    index = read_wal_index(lambda s, e: fence[s:e], len(fence), source="golden")
    assert (index.node_id, index.seq, index.fence, index.chunks) == ("node-b", 3, True, ())
    append = decode_entry((GOLDEN / "wal_entry_append_v1.bin").read_bytes(), source="golden")
    assert isinstance(append, AppendEntry) and append.log_id == "t0001/0"
    assert append.batch.equals(golden_batch())
    roll = decode_entry((GOLDEN / "wal_entry_roll_v1.bin").read_bytes(), source="golden")
    assert roll == RollEntry("t0001/0", 104)


def test_golden_segment_decodes_to_the_recorded_content() -> None:
    fresh = golden_segment()
    data = _golden("segment_v2.parquet", fresh)
    description = json.dumps(segment_description(fresh), indent=1, sort_keys=True) + "\n"
    described = _golden("segment_v2.json", description.encode())
    expected = json.loads(described)
    got = segment_description(data)
    assert got["rows"] == expected["rows"]
    assert got["footer"] == expected["footer"]
    assert got["row_groups"] == expected["row_groups"]
    reader = SegmentReader(lambda s, e: data[s:e], len(data), source="golden")
    assert reader.read_all().equals(pa.Table.from_batches([golden_batch()]))
    assert (reader.base_offset, reader.last_offset, reader.footer.first_batch_max_timestamp) == (
        98, 110, 1_700_000_000_000)


def test_format_1_segment_still_decodes() -> None:
    """Written before the index had null counts and CRC32Cs (six entries per row group): read as unknown."""
    data = (GOLDEN / "segment_v1.parquet").read_bytes()
    expected = json.loads((GOLDEN / "segment_v1.json").read_bytes())
    got = segment_description(data)
    assert (got["rows"], got["footer"]) == (expected["rows"], expected["footer"])
    assert [g[:6] for g in got["row_groups"]] == expected["row_groups"]  # type: ignore[attr-defined]
    reader = SegmentReader(lambda s, e: data[s:e], len(data), source="golden")
    assert reader.footer.version == 1
    assert all(g.unkeyed is None and g.tombstones is None and g.crc32c is None for g in reader.row_groups)
    assert reader.read_all().equals(pa.Table.from_batches([golden_batch()]))
    assert reader.read_groups([0, 1], columns=["key", "value"]).num_rows == 4


def test_segment_encoder_reproduces_golden_content() -> None:
    expected = json.loads((GOLDEN / "segment_v2.json").read_bytes())
    got = segment_description(golden_segment())
    assert {k: got[k] for k in ("rows", "footer", "row_groups")} == {
        k: expected[k] for k in ("rows", "footer", "row_groups")}


def test_segment_encoder_reproduces_golden_bytes_on_the_same_pyarrow() -> None:
    golden = (GOLDEN / "segment_v2.parquet").read_bytes()
    created_by = pq.ParquetFile(pa.BufferReader(golden)).metadata.created_by
    if created_by != f"parquet-cpp-arrow version {pa.__version__}":
        pytest.skip(f"golden segment written by {created_by}; byte equality only holds for that writer")
    assert golden_segment() == golden
