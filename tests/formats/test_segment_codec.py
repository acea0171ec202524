"""Each column of a segment gets the codec only where it pays: byte columns by a sample, integers never."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3stream.format.segment import SegmentReader, encode_segment
from s3stream.format.segment.codec import INTEGER_COLUMNS, MIN_SAMPLE_BYTES, SAMPLE_BYTES, column_codecs

from .strategies import make_batch, simple_batch

HEADER_KEY, HEADER_VALUE = "headers.list.element.key", "headers.list.element.value"


def codecs_of(data: bytes) -> dict[str, str]:
    meta = pq.ParquetFile(pa.BufferReader(data)).metadata
    rg = meta.row_group(0)
    return {rg.column(i).path_in_schema: rg.column(i).compression for i in range(rg.num_columns)}


def text_batch(n: int, value_size: int, *, headers: bool = False) -> pa.RecordBatch:
    """Keys and values that compress well (JSON-like text), optionally with text headers."""
    rows = [{"timestamp": 1_700_000_000_000 + o, "key": f"customer-{o % 50:08d}".encode(),
             "value": (f'{{"id": {o}, "name": "user-{o % 7}", "tags": ["a", "b"]}}' * 40)[:value_size].encode(),
             "headers": [{"key": "content-type", "value": b"application/json; charset=utf-8"}] if headers else None,
             "horizon_ms": None} for o in range(n)]
    return make_batch(rows, list(range(n)))


def round_trips(batch: pa.RecordBatch, data: bytes) -> None:
    reader = SegmentReader(lambda start, end: data[start:end], len(data), source="seg-under-test")
    got = reader.read(0, max_records=batch.num_rows, max_bytes=1 << 30)
    assert got.drop_columns(["horizon_ms"]).equals(pa.Table.from_batches([batch]).drop_columns(["horizon_ms"]))


def test_random_bytes_and_integers_are_stored_uncompressed() -> None:
    batch = simple_batch(range(400), value_size=1000)  # pseudo-random values, no headers
    data, _ = encode_segment(batch, base_offset=0, last_offset=399)
    codecs = codecs_of(data)
    assert codecs["value"] == "UNCOMPRESSED"
    assert {codecs[c] for c in INTEGER_COLUMNS} == {"UNCOMPRESSED"}
    assert codecs[HEADER_KEY] == codecs[HEADER_VALUE] == "UNCOMPRESSED"  # empty sample: nothing to shrink
    round_trips(batch, data)


def test_compressible_byte_columns_are_compressed() -> None:
    batch = text_batch(400, 1000, headers=True)
    data, _ = encode_segment(batch, base_offset=0, last_offset=399)
    codecs = codecs_of(data)
    assert {codecs[c] for c in ("key", "value", HEADER_KEY, HEADER_VALUE)} == {"ZSTD"}
    assert {codecs[c] for c in INTEGER_COLUMNS} == {"UNCOMPRESSED"}
    assert len(data) < batch.nbytes / 4
    round_trips(batch, data)


def test_each_byte_column_is_judged_on_its_own() -> None:
    text = text_batch(400, 1000)
    random = simple_batch(range(400), value_size=1000)
    mixed = text.set_column(text.schema.get_field_index("value"), "value", random.column("value"))
    codecs = column_codecs("zstd", pa.Table.from_batches([mixed]))
    assert isinstance(codecs, dict)
    assert (codecs["key"], codecs["value"]) == ("zstd", "none")


def test_too_few_bytes_to_judge_keep_the_codec_everywhere() -> None:
    batch = simple_batch(range(3), value_size=10)  # 30 random bytes: below MIN_SAMPLE_BYTES
    assert pa.Codec("zstd").compress(b"".join(batch.column("value").to_pylist())).size > 30
    data, _ = encode_segment(batch, base_offset=0, last_offset=2)
    assert set(codecs_of(data).values()) == {"ZSTD"}
    assert column_codecs("zstd", None) == "zstd"  # no row group at all (an empty segment)


def test_the_sample_spans_chunks_and_stops_at_its_limit() -> None:
    random = pa.Table.from_batches([simple_batch(range(i * 10, i * 10 + 10), value_size=100, seed=i)
                                    for i in range(8)])  # 8 chunks of 1000 random bytes
    assert random.column("value").num_chunks == 8 and MIN_SAMPLE_BYTES < 8000
    assert column_codecs("zstd", random)["value"] == "none"  # type: ignore[index]
    # the first SAMPLE_BYTES decide: compressible text first, random bytes after
    text = pa.Table.from_batches([text_batch(SAMPLE_BYTES // 1000 + 1, 1000)])
    mixed = pa.concat_tables([text, pa.Table.from_batches([simple_batch(range(1000, 2000), value_size=1000)])])
    assert column_codecs("zstd", mixed)["value"] == "zstd"  # type: ignore[index]


def test_headers_of_a_sliced_table_are_sampled_from_the_slice() -> None:
    with_headers = pa.Table.from_batches([text_batch(400, 1000, headers=True)])
    without = pa.Table.from_batches([text_batch(400, 1000)])
    both = pa.concat_tables([without, with_headers]).combine_chunks()
    assert column_codecs("zstd", both.slice(400))[HEADER_VALUE] == "zstd"  # type: ignore[index]
    assert column_codecs("zstd", both.slice(0, 400))[HEADER_VALUE] == "none"  # type: ignore[index]


def test_tombstones_with_text_keys_compress_the_keys() -> None:
    rows = [{"timestamp": 1, "key": f"customer-{o:08d}".encode(), "value": None, "headers": None,
             "horizon_ms": None} for o in range(1000)]
    codecs = column_codecs("zstd", pa.Table.from_batches([make_batch(rows, list(range(1000)))]))
    assert isinstance(codecs, dict)
    assert (codecs["key"], codecs["value"]) == ("zstd", "none")


@pytest.mark.parametrize("codec", ["none", "NONE"])
def test_no_codec_needs_no_sample(codec: str) -> None:
    assert column_codecs(codec, pa.Table.from_batches([simple_batch(range(400), value_size=1000)])) == codec


def test_the_codec_map_names_every_leaf_column() -> None:
    codecs = column_codecs("lz4", pa.Table.from_batches([text_batch(400, 1000)]))
    assert isinstance(codecs, dict)
    assert set(codecs) == {*INTEGER_COLUMNS, "key", "value", HEADER_KEY, HEADER_VALUE}
    assert set(codecs.values()) == {"lz4", "none"}
