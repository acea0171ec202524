"""The v2 record-batch codec of the Kafka server, cross-checked against kafka-python's and aiokafka's own.

Produced batches are built by the clients' encoders (every codec, headers, null keys and values) and must
decode to the same records; batches the server encodes from stored Arrow records (offset gaps, nulls,
headers with null values) must read back the same through both clients' decoders. Damaged input of every
kind is a typed error, never an exception from inside a codec.
"""

from __future__ import annotations

import random
import struct
from types import SimpleNamespace
from typing import Any

import crc32c
import numpy as np
import pyarrow as pa
import pytest
from aiokafka.codec import snappy_encode as aiokafka_snappy
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder
from kio.schema.errors import ErrorCode
from prometheus_client import CollectorRegistry

from s3stream.apps.kafka.config import BrokerConfig
from s3stream.apps.kafka.errors import CorruptBatch, UnsupportedCompression
from s3stream.apps.kafka.metrics import KafkaMetrics
from s3stream.apps.kafka.records.batch import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    HEADER_SIZE,
    InvalidTxnState,
    pack_header,
    parse_produced,
    patch_offset,
)
from s3stream.apps.kafka.records.cold_cache import ColdCache
from s3stream.apps.kafka.records.datapath import DataPath
from s3stream.apps.kafka.records.decode import decode_batch
from s3stream.apps.kafka.records.encode import encode_batches
from s3stream.apps.kafka.records.tail_cache import TailCache
from s3stream.base.errors import InvalidRecord, RecordTooLarge
from s3stream.base.records import HEADER_TYPE, RECORD_SCHEMA, LogExtent, SegmentInfo

CODECS = {"none": CODEC_NONE, "gzip": CODEC_GZIP, "snappy": CODEC_SNAPPY, "lz4": CODEC_LZ4, "zstd": CODEC_ZSTD}
Row = tuple[bytes | None, bytes | None, int, list[tuple[str, bytes | None]]]

ROWS: list[Row] = [
    (b"key-0", b"value-" * 20, 1_700_000_000_000, []),
    (None, b"no key " * 10, 1_700_000_000_005, [("trace", b"abc"), ("empty", b"")]),
    (b"tombstone", None, 1_700_000_000_003, [("nullable", None)]),
    (None, None, 1_700_000_000_010, []),
    (b"k\x00\xff", b"\x00" * 300, 1_699_999_999_999, [("\u00e9t\u00e9", b"\xff\x00")]),
]


def kafka_python_batch(rows: list[Row], codec: int, *, producer: tuple[int, int, int] = (-1, -1, -1)) -> bytes:
    builder = KpBuilder(2, codec, 0, *producer, batch_size=1 << 20)
    for i, (key, value, ts, headers) in enumerate(rows):
        builder.append(i, timestamp=ts, key=key, value=value, headers=headers)
    return bytes(builder.build())


def aiokafka_batch(rows: list[Row], codec: int) -> bytes:
    builder = AioBuilder(2, codec, 0, -1, -1, -1, 1 << 20)
    for i, (key, value, ts, headers) in enumerate(rows):
        builder.append(i, ts, key, value, headers)
    return bytes(builder.build())


def decoded_rows(data: bytes, *, version: int = 9) -> list[Row]:
    header = parse_produced(data, produce_version=version)
    table = decode_batch(data, header, limit=1 << 22).table
    cols = table.to_pydict()
    return [(k, v, ts, [(h["key"], h["value"]) for h in hs or []])
            for k, v, ts, hs in zip(cols["key"], cols["value"], cols["timestamp"], cols["headers"], strict=True)]


def with_crc(data: bytes | bytearray) -> bytes:
    """The batch with its CRC32C recomputed (to reach the checks behind the CRC)."""
    out = bytearray(data)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


# -- produced batches: decode ---------------------------------------------------------------------------


@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("encoder", [kafka_python_batch, aiokafka_batch])
def test_client_batches_decode_to_the_same_records(codec: str, encoder: Any) -> None:
    data = encoder(ROWS, CODECS[codec])
    header = parse_produced(data, produce_version=9)
    assert header.codec == CODECS[codec]  # compressible rows: the client really compressed them
    assert header.record_count == len(ROWS)
    assert decoded_rows(data) == ROWS


def test_raw_snappy_as_librdkafka_sends_it() -> None:
    plain = kafka_python_batch(ROWS, CODEC_NONE)
    body = aiokafka_snappy(plain[HEADER_SIZE:], xerial_compatible=False)
    head = pack_header(base_offset=0, records=body, attributes=CODEC_SNAPPY, last_offset_delta=len(ROWS) - 1,
                       first_timestamp=ROWS[0][2], max_timestamp=max(r[2] for r in ROWS), record_count=len(ROWS))
    data = bytes(head) + body
    assert KpBatch(data).validate_crc()
    assert decoded_rows(data) == ROWS


def test_producer_fields_are_read() -> None:
    header = parse_produced(kafka_python_batch(ROWS, CODEC_NONE, producer=(42, 3, 17)), produce_version=9)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 17)


def test_crc_mismatch_is_corrupt_message() -> None:
    data = bytearray(kafka_python_batch(ROWS, CODEC_NONE))
    data[HEADER_SIZE + 5] ^= 0x01
    with pytest.raises(CorruptBatch, match="CRC"):
        parse_produced(bytes(data), produce_version=9)


def test_structural_errors_are_typed() -> None:
    good = kafka_python_batch(ROWS, CODEC_NONE)
    with pytest.raises(InvalidRecord):
        parse_produced(None, produce_version=9)
    with pytest.raises(InvalidRecord):
        parse_produced(b"", produce_version=9)
    with pytest.raises(CorruptBatch):
        parse_produced(good[:40], produce_version=9)  # shorter than a header
    with pytest.raises(CorruptBatch):
        parse_produced(good[:-3], produce_version=9)  # truncated: the length says more
    with pytest.raises(InvalidRecord, match="only one record batch"):
        parse_produced(good + good, produce_version=9)
    magic1 = bytearray(good)
    magic1[16] = 1
    with pytest.raises(InvalidRecord, match="magic"):
        parse_produced(bytes(magic1), produce_version=9)
    zstd = kafka_python_batch(ROWS, CODEC_ZSTD)
    with pytest.raises(UnsupportedCompression):
        parse_produced(zstd, produce_version=6)
    assert parse_produced(zstd, produce_version=7).codec == CODEC_ZSTD
    for flag, error in ((0x20, InvalidRecord), (0x10, InvalidTxnState), (0x07, UnsupportedCompression)):
        flagged = bytearray(good)
        struct.pack_into(">h", flagged, 21, flag)
        with pytest.raises(error):
            parse_produced(with_crc(flagged), produce_version=9)
    wrong_count = bytearray(good)
    struct.pack_into(">i", wrong_count, 57, len(ROWS) + 1)
    with pytest.raises(InvalidRecord, match="count"):
        parse_produced(with_crc(wrong_count), produce_version=9)


def test_damaged_records_are_typed_errors_for_every_codec() -> None:
    """Random byte flips behind a recomputed CRC: only the server's typed errors, whatever the codec does."""
    rnd = random.Random(7)
    typed = (CorruptBatch, InvalidRecord, RecordTooLarge, UnsupportedCompression)
    outcomes = {"ok": 0, "refused": 0}
    for codec in CODECS.values():
        good = kafka_python_batch(ROWS, codec)
        for _ in range(150):
            data = bytearray(good)
            for _ in range(rnd.randint(1, 3)):
                data[rnd.randrange(23, len(data))] = rnd.randrange(256)
            try:
                header = parse_produced(with_crc(data), produce_version=9)
                decode_batch(with_crc(data), header, limit=1 << 16)
                outcomes["ok"] += 1
            except typed:
                outcomes["refused"] += 1
    assert outcomes["refused"] > 500


def test_decompression_is_bounded() -> None:
    rows: list[Row] = [(None, b"\x00" * 200_000, 1_700_000_000_000, [])]
    for codec in (CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD):
        data = kafka_python_batch(rows, codec)
        assert len(data) < 20_000
        header = parse_produced(data, produce_version=9)
        with pytest.raises(RecordTooLarge):
            decode_batch(data, header, limit=100_000)
        assert decode_batch(data, header, limit=300_000).table.num_rows == 1


def test_offset_deltas_must_be_0_to_n() -> None:
    builder = KpBuilder(2, CODEC_NONE, 0, -1, -1, -1, batch_size=1 << 20)
    builder.append(0, timestamp=1, key=None, value=b"a", headers=[])
    builder.append(5, timestamp=1, key=None, value=b"b", headers=[])
    data = bytearray(builder.build())
    struct.pack_into(">i", data, 23, 1)  # a last offset delta matching the count, the record deltas not
    data = bytearray(with_crc(data))
    with pytest.raises(InvalidRecord, match="offset deltas"):
        decode_batch(bytes(data), parse_produced(bytes(data), produce_version=9), limit=1 << 16)


# -- the base-offset patch ------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_patched_base_offset_keeps_the_crc(codec: str) -> None:
    data = patch_offset(kafka_python_batch(ROWS, CODECS[codec]), 1_000_000, leader_epoch=0)
    for batch in (KpBatch(bytes(data)), AioBatch(bytes(data))):
        assert batch.validate_crc()
        assert batch.base_offset == 1_000_000
        assert [r.offset for r in batch] == list(range(1_000_000, 1_000_000 + len(ROWS)))
    assert struct.unpack_from(">i", data, 12)[0] == 0


# -- stored records: encode ---------------------------------------------------------------------------


def stored_table(offsets: list[int], rows: list[Row]) -> pa.Table:
    headers = [[{"key": k, "value": v} for k, v in h] if h else None for _, _, _, h in rows]
    return pa.Table.from_arrays([
        pa.array(offsets, pa.int64()), pa.array([r[2] for r in rows], pa.int64()),
        pa.array([r[0] for r in rows], pa.binary()), pa.array([r[1] for r in rows], pa.binary()),
        pa.array(headers, HEADER_TYPE), pa.nulls(len(rows), pa.int64())], schema=RECORD_SCHEMA)


def read_back(batches: list[bytes], reader: Any) -> list[tuple[int, Row]]:
    out = []
    for data in batches:
        batch = reader(data)
        assert batch.validate_crc()
        for r in batch:
            out.append((r.offset, (r.key, r.value, r.timestamp, [(k, v) for k, v in r.headers])))
    return out


@pytest.mark.parametrize("reader", [KpBatch, AioBatch])
def test_encoded_batches_read_back_with_gaps_nulls_and_headers(reader: Any) -> None:
    offsets = [10, 11, 15, 16, 40]  # compaction gaps inside one batch are legal (offset deltas)
    encoded = encode_batches(stored_table(offsets, ROWS))
    assert encoded.bases == [10]
    assert read_back(encoded.batches, reader) == list(zip(offsets, ROWS, strict=True))
    batch = reader(encoded.batches[0])
    assert batch.base_offset == 10
    assert batch.last_offset_delta == 30  # the consumer's next fetch offset is 41
    assert batch.max_timestamp == max(r[2] for r in ROWS)


def test_encoded_batches_split_by_size_by_append_time_and_by_huge_gaps() -> None:
    n = 2000
    rows: list[Row] = [(None, bytes([i % 251]) * 100, 1_700_000_000_000 + i // 500, []) for i in range(n)]
    offsets = list(range(n))
    by_size = encode_batches(stored_table(offsets, rows), max_batch_bytes=50_000)
    assert len(by_size.batches) >= 4
    assert all(len(b) < 60_000 for b in by_size.batches)
    assert [o for o, _ in read_back(by_size.batches, KpBatch)] == offsets
    assert by_size.bases == [AioBatch(b).base_offset for b in by_size.batches]
    log_append = encode_batches(stored_table(offsets, rows), log_append_time=True)
    assert len(log_append.batches) == 4  # one per append time, each stamped LogAppendTime with it
    for data in log_append.batches:
        batch = KpBatch(data)
        assert batch.timestamp_type == 1
        assert {r.timestamp for r in batch} == {batch.max_timestamp}
    far = encode_batches(stored_table([5, 6, 5 + (1 << 31)], rows[:3]))
    assert len(far.batches) == 2
    assert [o for o, _ in read_back(far.batches, AioBatch)] == [5, 6, 5 + (1 << 31)]


def test_encode_of_a_large_random_table_matches_kafka_python() -> None:
    rnd = np.random.default_rng(3)
    n = 3000
    rows: list[Row] = []
    for i in range(n):
        key = None if i % 7 == 0 else rnd.bytes(int(rnd.integers(0, 40)))
        value = None if i % 13 == 0 else rnd.bytes(int(rnd.integers(0, 400)))
        headers = [(f"h{j}", None if j % 2 else rnd.bytes(j)) for j in range(i % 4)]
        rows.append((key, value, int(rnd.integers(0, 1 << 45)), headers))
    offsets = np.cumsum(rnd.integers(1, 5, n)).tolist()
    encoded = encode_batches(stored_table(offsets, rows))
    assert read_back(encoded.batches, KpBatch) == list(zip(offsets, rows, strict=True))


@pytest.mark.parametrize("value_bytes", [1, 100, 1024, 20_000])
def test_encode_of_records_whose_varints_are_all_one_width_reads_back(value_bytes: int) -> None:
    # every prefix field the same width in every row: the encoder skips its mask (a keyless, uniform stream)
    rows: list[Row] = [(None, bytes([i % 251]) * value_bytes, 1_700_000_000_000, []) for i in range(60)]
    encoded = encode_batches(stored_table(list(range(60)), rows), max_batch_bytes=1 << 30)
    assert len(encoded.batches) == 1
    assert read_back(encoded.batches, KpBatch) == list(enumerate(rows))


def test_encode_of_nothing_is_no_batch() -> None:
    assert encode_batches(stored_table([], [])).batches == []


# -- caches -------------------------------------------------------------------------------------------


def test_tail_cache_serves_contiguous_batches_and_stays_bounded() -> None:
    cache = TailCache(4000)
    key = ("topic-id", 0)
    for base in range(0, 50, 10):
        cache.put(key, base, base + 10, bytes(300))
    hit = cache.get(key, 25, 700)
    assert hit is not None
    assert (len(hit[0]), hit[1]) == (2, 40)  # from the batch holding 25, within the budget
    assert cache.get(key, 25, 1) is not None  # at least one batch
    assert cache.get(key, 50, 1000) is None
    cache.put(key, 5, 15, bytes(300))  # overlaps kept batches (a retried duplicate): ignored
    assert cache.get(key, 5, 10_000) == ([bytes(300)] * 5, 50)
    cache.put(key, 60, 70, bytes(300))  # after a gap: served on its own
    assert cache.get(key, 45, 10_000) == ([bytes(300)], 50)
    for base in range(100, 400, 10):
        cache.put(key, base, base + 10, bytes(300))
    assert cache.nbytes <= 4000
    assert cache.get(key, 0, 10_000) is None  # the oldest went first
    cache.drop(key)
    assert cache.nbytes == 0
    assert cache.get(key, 390, 10_000) is None


def test_cold_cache_serves_from_the_batch_holding_the_offset() -> None:
    cache = ColdCache(16_000)
    cache.put("seg-a", 100, 200, [b"a" * 1000, b"b" * 1000, b"c" * 1000], [100, 130, 170])
    assert cache.get("seg-a", 99, 10_000) is None
    assert cache.get("seg-a", 140, 10_000) == ([b"b" * 1000, b"c" * 1000], 200)
    assert cache.get("seg-a", 140, 1500) == ([b"b" * 1000], 170)
    assert cache.get("seg-b", 140, 10_000) is None
    for i in range(10):
        cache.put(f"seg-{i}", 0, 10, [bytes(2000)], [0])
    assert cache.nbytes <= 16_000
    assert cache.get("seg-a", 140, 10_000) is None  # least recently used went first
    cache.put("huge", 0, 10, [bytes(5000)], [0])  # over a quarter of the cache: not kept
    assert cache.get("huge", 0, 10_000) is None


# -- DataPath.read over a stand-in log ------------------------------------------------------------------


class FakeLog:
    """What DataPath.read uses of a PartitionLog: its extent, its segments and read_arrow."""

    def __init__(self, table: pa.Table, segments: list[SegmentInfo], start: int, end: int) -> None:
        self.table, self._segments = table, segments
        self.log_start_offset, self.log_end_offset = start, end
        self.topic, self.topic_id, self.partition, self.is_writer = "t", "tid", 0, True
        self.high_watermark = end
        self.reads = 0

    def watch(self, callback: Any) -> Any:
        return lambda: None

    def extent(self) -> LogExtent:
        sealed = tuple(s for s in self._segments if s.sealed)
        return LogExtent(self.log_start_offset, self.high_watermark, self.log_end_offset, sealed)

    def read_arrow(self, offset: int, *, max_bytes: int | None = None) -> pa.Table:
        self.reads += 1
        offsets = self.table.column("offset").to_numpy()
        return self.table.slice(int(np.searchsorted(offsets, offset)))


def datapath() -> DataPath:
    broker = SimpleNamespace(config=BrokerConfig(fetch_cache_bytes=1 << 20),
                             metrics=KafkaMetrics(CollectorRegistry()))
    return DataPath(broker)  # type: ignore[arg-type]


def test_datapath_reads_sealed_segments_through_the_cold_cache() -> None:
    offsets = [0, 2, 4, 5, 9, 10]  # segment 0..7 keeps 0, 2, 4, 5; 6 and 7 were compacted away
    rows: list[Row] = [(b"k", f"v{o}".encode(), 1_700_000_000_000, []) for o in offsets]
    seg = [SegmentInfo(0, 7, 100, 4, 0, True, "seg-a"), SegmentInfo(8, 10, 100, 2, 0, True, "seg-b")]
    log = FakeLog(stored_table(offsets, rows), seg, 0, 11)
    path = datapath()
    got = path.read(log, 1, 1 << 20, first=True, log_append_time=False)  # type: ignore[arg-type]
    assert [r.offset for r in KpBatch(bytes(got.batches[0]))] == [2, 4, 5]  # the segment's part only
    assert AioBatch(bytes(got.batches[0])).next_offset == 8  # covering 6..7: consumers go on at 8
    again = path.read(log, 4, 1 << 20, first=True, log_append_time=False)  # type: ignore[arg-type]
    assert (log.reads, again.batches) == (1, got.batches)  # from the cold cache, whole batch from 2
    assert path.read(log, 6, 1 << 20, first=True, log_append_time=False).batches == got.batches  # type: ignore[arg-type]
    fresh = datapath()  # nothing cached: a read inside the trailing gap serves the next segment
    gap = fresh.read(log, 6, 1 << 20, first=True, log_append_time=False)  # type: ignore[arg-type]
    assert [r.offset for r in KpBatch(bytes(gap.batches[0]))] == [9, 10]
    assert path.read(log, 11, 1 << 20, first=True, log_append_time=False).batches == []  # type: ignore[arg-type]
    out = path.read(log, 12, 1 << 20, first=True, log_append_time=False)  # type: ignore[arg-type]
    assert (out.error, out.log_start_offset, out.high_watermark) == (ErrorCode.offset_out_of_range, 0, 11)
    assert path.read(log, 1, 10, first=False, log_append_time=False).batches == []  # type: ignore[arg-type]


def test_datapath_serves_nothing_at_or_past_the_high_watermark() -> None:
    offsets = [0, 1, 2, 3]
    rows: list[Row] = [(None, f"v{o}".encode(), 1_700_000_000_000, []) for o in offsets]
    log = FakeLog(stored_table(offsets, rows), [], 0, 4)
    log.high_watermark = 2  # records 2 and 3 are still being fsynced
    path = datapath()
    got = path.read(log, 0, 1 << 20, first=True, log_append_time=False)  # type: ignore[arg-type]
    assert [r.offset for r in KpBatch(bytes(got.batches[0]))] == [0, 1]
    assert got.high_watermark == 2
    pending = path.read(log, 3, 1 << 20, first=True, log_append_time=False)  # type: ignore[arg-type]
    assert (pending.error, pending.batches) == (ErrorCode.none, [])  # between HW and log end: not an error
    path.tail.put(("tid", 0), 2, 4, b"past the high watermark")
    again = path.read(log, 1, 1 << 20, first=True, log_append_time=False)  # type: ignore[arg-type]
    assert (again.batches, log.reads) == (got.batches, 1)  # unsealed records were kept; [2, 4) waits
