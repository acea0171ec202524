"""Values the segment's codec cannot shrink are stored uncompressed; everything else keeps the codec."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3stream.segment import SegmentReader, encode_segment
from s3stream.segment.codec import MIN_SAMPLE_BYTES, SAMPLE_BYTES, column_codecs, values_compress

from .strategies import make_batch, simple_batch


def codecs_of(data: bytes) -> dict[str, str]:
    meta = pq.ParquetFile(pa.BufferReader(data)).metadata
    rg = meta.row_group(0)
    return {rg.column(i).path_in_schema: rg.column(i).compression for i in range(rg.num_columns)}


def text_batch(n: int, value_size: int) -> pa.RecordBatch:
    """Values that compress well (JSON-like text)."""
    rows = [{"timestamp": 1_700_000_000_000 + o, "key": f"k{o}".encode(),
             "value": (f'{{"id": {o}, "name": "user-{o % 7}", "tags": ["a", "b"]}}' * 40)[:value_size].encode(),
             "headers": None, "horizon_ms": None} for o in range(n)]
    return make_batch(rows, list(range(n)))


def round_trips(batch: pa.RecordBatch, data: bytes) -> None:
    reader = SegmentReader(lambda start, end: data[start:end], len(data), source="seg-under-test")
    got = reader.read(0, max_records=batch.num_rows, max_bytes=1 << 30)
    assert got.column("value").to_pylist() == batch.column("value").to_pylist()


def test_random_values_are_stored_uncompressed_other_columns_keep_the_codec() -> None:
    batch = simple_batch(range(400), value_size=1000)  # pseudo-random bytes: nothing to gain
    data, _ = encode_segment(batch, base_offset=0, last_offset=399)
    codecs = codecs_of(data)
    assert codecs["value"] == "UNCOMPRESSED"
    assert {c for p, c in codecs.items() if p != "value"} == {"ZSTD"}
    round_trips(batch, data)


def test_compressible_values_are_compressed() -> None:
    batch = text_batch(400, 1000)
    data, _ = encode_segment(batch, base_offset=0, last_offset=399)
    assert set(codecs_of(data).values()) == {"ZSTD"}
    assert len(data) < batch.nbytes / 4
    round_trips(batch, data)


def test_too_few_value_bytes_to_judge_keep_the_codec() -> None:
    batch = simple_batch(range(3), value_size=10)  # 30 random bytes: below MIN_SAMPLE_BYTES
    assert pa.Codec("zstd").compress(b"".join(batch.column("value").to_pylist())).size > 30
    data, _ = encode_segment(batch, base_offset=0, last_offset=2)
    assert codecs_of(data)["value"] == "ZSTD"


def test_the_sample_spans_chunks_and_stops_at_its_limit() -> None:
    random = pa.Table.from_batches([simple_batch(range(i * 10, i * 10 + 10), value_size=100, seed=i)
                                    for i in range(8)])  # 8 chunks of 1000 random bytes
    assert random.column("value").num_chunks == 8 and MIN_SAMPLE_BYTES < 8000
    assert not values_compress(random, "zstd")
    # the first SAMPLE_BYTES decide: compressible text first, random bytes after
    text = pa.Table.from_batches([text_batch(SAMPLE_BYTES // 1000 + 1, 1000)])
    mixed = pa.concat_tables([text, pa.Table.from_batches([simple_batch(range(1000, 2000), value_size=1000)])])
    assert values_compress(mixed, "zstd")


def test_tombstones_only_keep_the_codec() -> None:
    rows = [{"timestamp": 1, "key": f"k{o}".encode(), "value": None, "headers": None, "horizon_ms": None}
            for o in range(100)]
    assert values_compress(pa.Table.from_batches([make_batch(rows, list(range(100)))]), "zstd")


@pytest.mark.parametrize("codec", ["none", "NONE"])
def test_no_codec_needs_no_sample(codec: str) -> None:
    assert values_compress(pa.Table.from_batches([simple_batch(range(400), value_size=1000)]), codec)
    assert column_codecs(codec, compress_values=False) == codec


def test_the_codec_map_names_every_leaf_column() -> None:
    codecs = column_codecs("lz4", compress_values=False)
    assert isinstance(codecs, dict)
    assert codecs.pop("value") == "none"
    assert set(codecs.values()) == {"lz4"}
    assert set(codecs) == {"offset", "timestamp", "key", "headers.list.element.key", "headers.list.element.value",
                           "horizon_ms"}
