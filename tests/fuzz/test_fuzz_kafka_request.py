"""Fuzzing the Kafka server's request decoding: the frame parser and the produced record-batch decoder.

What the connection code relies on (``s3stream/apps/kafka/connection.py``): parsing a frame
(:func:`dispatch`'s steps: ``peek_api``, the version check, ``read_request``) raises only
:class:`MalformedFrame` (the connection is closed, nothing else), and decoding a produced batch
(``parse_produced`` then ``decode_batch``, as the produce handler runs them) raises only the typed errors
mapped to Kafka error codes (InvalidRecord, CorruptBatch, UnsupportedCompression, RecordTooLarge): never
an IndexError, struct.error, UnicodeDecodeError or MemoryError, never a hang, never a process abort.

Inputs: arbitrary bytes; valid requests of every advertised API version (drawn from kio's schemas with
hypothesis, encoded by kio) that must parse back equal, then damaged (``kit.mutations`` plus forged
array counts and lengths); valid record batches of every codec (built by aiokafka's builder), damaged with
and without their CRC32C patched (so the decoder behind the checksum is reached).

Bug found and fixed: a forged compact-array count (5 bytes) made kio's native reader reserve hundreds of
gigabytes and abort the whole process (``memory allocation of ... bytes failed``), even before SASL
authentication; ``s3stream/apps/kafka/wirecheck.py`` now checks every count and length against the frame
first (regression: :func:`test_a_forged_array_count_is_a_malformed_frame_not_an_abort`).
"""

from __future__ import annotations

import datetime
import io
import struct
import time
import uuid
from typing import Any

import crc32c
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.fetch.v16 import request as fetch16
from kio.serial import entity_writer
from kio.static.primitive import Records, i16, i32, i32Timedelta, i64

from s3stream.apps.kafka.handlers import all_apis
from s3stream.apps.kafka.records.batch import ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE, parse_produced
from s3stream.apps.kafka.records.decode import decode_batch, decoded_limit
from s3stream.apps.kafka.wire import (
    API_VERSIONS_KEY,
    MalformedFrame,
    peek_api,
    read_header_only,
    read_request,
    request_class,
)
from s3stream.apps.kafka.wirecheck import WireError, check_body
from s3stream.base.errors import S3StreamError

from .kit import FUZZ, fuzz, mutated, mutations, typed_or_value

st.register_type_strategy(Records, st.binary(max_size=80))  # kio has no strategy for a records field

SPECS = {s.api_key: s for s in all_apis()}
#: every (api key, version) the server advertises and kio has a schema for (Produce v0-2 have none: refused)
PAIRS = [(k, v) for k, s in SPECS.items() for v in range(s.min_version, s.max_version + 1)
         if request_class(k, v) is not None]
#: one frame may take this long to refuse, at most (a hang or a huge loop fails the test)
MAX_PARSE_S = 1.0
REQUEST_FUZZ = fuzz(12)  # per API key: ~27 keys


def parse(frame: bytes) -> Any:
    """What :func:`s3stream.apps.kafka.connection.dispatch` does with a frame before its handler runs."""
    key, version, _ = peek_api(frame)
    spec = SPECS.get(key)
    if key == API_VERSIONS_KEY and spec is not None and version > spec.max_version:
        return read_header_only(frame, flexible=version >= 3)
    if spec is None or not spec.min_version <= version <= spec.max_version:
        raise MalformedFrame(f"unsupported API {key} v{version}")
    cls = request_class(key, version)
    if cls is None:
        raise MalformedFrame(f"no schema for API {key} v{version}")
    return read_request(frame, cls)


def parsed_or_malformed(frame: bytes) -> Any:
    started = time.monotonic()
    got = typed_or_value(lambda: parse(frame), MalformedFrame)
    assert time.monotonic() - started < MAX_PARSE_S, f"parsing took too long: {frame.hex()}"
    return got


def encode(key: int, version: int, body: Any, client_id: str | None = "fuzz") -> bytes:
    """A request frame (without its size prefix) as a client sends it."""
    buf = io.BytesIO()
    header_cls = type(body).__header_schema__
    entity_writer(header_cls)(buf, header_cls(request_api_key=i16(key), request_api_version=i16(version),
                                              correlation_id=i32(7), client_id=client_id))
    entity_writer(type(body))(buf, body)
    return buf.getvalue()


#: forged counts and lengths: i32/i16 maxima and negatives, and unsigned varints far past any frame
_FORGED = [b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00", b"\xff\xfe", b"\x7f\xff", b"\xf4\xa9\x82\xea\x60",
           b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", b"\x80\x80\x80\x80\x80"]


@st.composite
def damaged(draw: st.DrawFn, frame: bytes) -> bytes:
    """``frame`` with general damage or a count/length field overwritten by a forged one."""
    if draw(st.booleans()):
        return mutated(frame, draw(mutations()))
    out = bytearray(frame)
    for _ in range(draw(st.integers(1, 2))):
        pos = draw(st.integers(8, max(8, len(out) - 1)))
        forged = draw(st.sampled_from(_FORGED))
        out[pos:pos + len(forged)] = forged
    return bytes(out)


# -- frames -------------------------------------------------------------------------------------------------


def test_every_advertised_api_version_has_a_schema_but_produce_v0_to_v2() -> None:
    missing = [(k, v) for k, s in SPECS.items() for v in range(s.min_version, s.max_version + 1) if (k, v) not in PAIRS]
    assert missing == [(0, 0), (0, 1), (0, 2)]
    assert len(PAIRS) > 150


@FUZZ
@given(st.binary(max_size=200))
def test_any_bytes_are_a_request_or_a_malformed_frame(data: bytes) -> None:
    parsed_or_malformed(data)


@FUZZ
@given(st.sampled_from(PAIRS), st.binary(max_size=200))
def test_any_body_behind_a_valid_header_is_a_request_or_a_malformed_frame(pair: tuple[int, int],
                                                                          body: bytes) -> None:
    key, version = pair
    flexible = getattr(request_class(key, version), "__flexible__", False)
    header = struct.pack(">hhih", key, version, 7, 4) + b"fuzz" + (b"\x00" if flexible else b"")
    parsed_or_malformed(header + body)


@pytest.mark.parametrize("key", sorted(SPECS))
@REQUEST_FUZZ
@given(data=st.data())
def test_valid_requests_parse_back_and_damaged_ones_are_malformed_frames(key: int, data: st.DataObject) -> None:
    versions = [v for k, v in PAIRS if k == key]
    version = data.draw(st.sampled_from(versions))
    body = data.draw(st.from_type(request_class(key, version)))  # type: ignore[arg-type]
    frame = encode(key, version, body)
    got = typed_or_value(lambda: parse(frame), MalformedFrame)
    if isinstance(got, MalformedFrame):  # kio writes durations its reader cannot make a timedelta of (> 2**56 ms)
        assert "timedelta milliseconds overflow" in str(got)
        return
    assert (got.api_key, got.api_version, got.correlation_id, got.client_id) == (key, version, 7, "fuzz")
    assert got.body == body
    for _ in range(4):
        parsed_or_malformed(data.draw(damaged(frame)))


def test_a_forged_array_count_is_a_malformed_frame_not_an_abort() -> None:
    # CreateTopics v6 (flexible): the topics array's count is the varint f4 a9 82 ea 60 (~26 billion); kio's
    # reader used to reserve 208 GB for it, and the failed allocation aborted the process
    frame = bytes.fromhex("001300060000000700016300f4a982ea600000")
    with pytest.raises(MalformedFrame, match="array of"):
        parse(frame)
    # the same anywhere in a valid request with nested arrays: Fetch v16's topics -> partitions
    part = fetch16.FetchPartition(partition=i32(0), fetch_offset=i64(5), partition_max_bytes=i32(1 << 20))
    body = fetch16.FetchRequest(max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=500)), min_bytes=i32(1),
                                topics=(fetch16.FetchTopic(topic_id=uuid.UUID(int=7), partitions=(part, part)),),
                                forgotten_topics_data=())
    good = encode(1, 16, body)
    assert parse(good).body == body
    for at in range(12, len(good)):
        for forged in _FORGED:
            bad = good[:at] + forged + good[at + len(forged):]
            parsed_or_malformed(bad)


def test_the_wire_check_accepts_exactly_what_fits() -> None:
    cls = request_class(19, 2)  # CreateTopics v2: classic encoding, int32 counts
    assert cls is not None
    empty = struct.pack(">iib", 0, 1000, 0)  # no topics, timeout, validate_only
    check_body(empty, 0, cls)
    with pytest.raises(WireError, match="array of 2147483647"):
        check_body(struct.pack(">iib", 0x7FFFFFFF, 1000, 0), 0, cls)
    with pytest.raises(WireError, match="negative length"):
        check_body(struct.pack(">iib", -2, 1000, 0), 0, cls)
    with pytest.raises(WireError, match="past the end"):
        check_body(empty[:-1], 0, cls)


# -- produced record batches ----------------------------------------------------------------------------------

#: what the produce handler maps to Kafka error codes (all S3StreamError subclasses)
BATCH_ERRORS = (S3StreamError,)
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
LIMIT = decoded_limit(1 << 16)


def build_batch(codec: int, records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]],
                *, producer_id: int = -1) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                                        base_sequence=0 if producer_id >= 0 else -1, batch_size=1 << 20)
    for i, (key, value, headers) in enumerate(records):
        assert builder.append(i, timestamp=1_700_000_000_000 + i, key=key, value=value, headers=headers)
    return bytes(builder.build())


def decode(data: bytes) -> Any:
    """What the produce handler runs on a partition's records: the header checks, then the records."""
    header = parse_produced(data, produce_version=9)
    return decode_batch(data, header, limit=LIMIT)


def with_crc(data: bytes) -> bytes:
    """``data`` with its CRC32C recomputed (when it is long enough to have one)."""
    if len(data) < HEADER_SIZE:
        return data
    out = bytearray(data)
    struct.pack_into(">I", out, CRC_OFFSET, crc32c.crc32c(bytes(out[ATTRIBUTES_OFFSET:])))
    return bytes(out)


_record = st.tuples(st.none() | st.binary(max_size=12), st.none() | st.binary(max_size=40),
                    st.lists(st.tuples(st.text(max_size=5), st.binary(max_size=5)), max_size=2))


def decoded_or_typed(data: bytes) -> Any:
    started = time.monotonic()
    got = typed_or_value(lambda: decode(data), *BATCH_ERRORS)
    assert time.monotonic() - started < MAX_PARSE_S, f"decoding took too long: {data.hex()}"
    return got


@FUZZ
@given(st.sampled_from(sorted(CODECS)), st.lists(_record, min_size=1, max_size=6))
def test_valid_batches_decode_to_their_records(codec: str, records: list[Any]) -> None:
    got = decode(build_batch(CODECS[codec], records))
    table = got.table.to_pydict()
    assert table["key"] == [k for k, _, _ in records] and table["value"] == [v for _, v, _ in records]


@FUZZ
@given(st.sampled_from(sorted(CODECS)), st.lists(_record, min_size=1, max_size=4), mutations(), st.booleans())
def test_damaged_batches_raise_only_typed_errors(codec: str, records: list[Any], ops: list[Any],
                                                 patch_crc: bool) -> None:
    good = build_batch(CODECS[codec], records)
    bad = mutated(good, ops)
    decoded_or_typed(with_crc(bad) if patch_crc else bad)


@FUZZ
@given(st.sampled_from(sorted(CODECS)), st.binary(max_size=300), st.integers(1, 5))
def test_any_records_section_behind_a_valid_header_raises_only_typed_errors(codec: str, body: bytes,
                                                                           count: int) -> None:
    good = bytearray(build_batch(CODECS[codec], [(b"k", b"v", [])] * count))
    bad = bytearray(good[:HEADER_SIZE] + body)
    struct.pack_into(">i", bad, 8, len(bad) - 12)  # the batch length covers what follows it
    decoded_or_typed(with_crc(bytes(bad)))

