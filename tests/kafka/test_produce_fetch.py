"""Produce and Fetch with real clients (kafka-python, aiokafka, confluent-kafka, kcat) and raw requests.

Each client produces with and without keys, with headers, with every codec and every acks setting, and
consumes back exactly what it sent; consumers start mid-batch (from the producers' cached batches and from
batches encoded from sealed segments), wake quickly from a long poll, and reset after DeleteRecords.
Raw requests check what clients never send: damaged batches, unknown ids, sessions, every Fetch version.
"""

from __future__ import annotations

import asyncio
import datetime
import io
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import aiokafka
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpPartition
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32, i64

from s3stream.apps.kafka.records.datapath import DataPath
from s3stream.apps.kafka.wire import request_class, response_class
from s3stream.partition.log import PartitionLog
from tests.kafka.conftest import RunningKafka

#: (key, value, headers) of one record
Sent = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]
CODECS = ["gzip", "snappy", "lz4", "zstd"]


def records_for(tag: str, n: int = 4, *, null_header: bool = True) -> list[Sent]:
    """Compressible values (so clients really compress), a null key, a tombstone, headers on some, one of them
    null (kafka-python's producer refuses null header values: ``null_header=False``)."""
    out: list[Sent] = []
    for i in range(n):
        key = None if i == 1 else f"{tag}-key-{i}".encode()
        value = None if i == 2 else f"{tag} value {i} ".encode() * 8
        headers: list[tuple[str, bytes | None]] = []
        if i % 2 == 0:
            headers = [("trace", f"{tag}-{i}".encode()), ("empty", b"")]
        elif i == 3 and null_header:
            headers = [("null", None)]
        out.append((key, value, headers))
    return out


def plog(server: RunningKafka, topic: str, partition: int = 0) -> PartitionLog:
    assert server.store is not None
    return server.store.partition(topic, partition)


def create(server: RunningKafka, topic: str, config: dict[str, str] | None = None) -> None:
    assert server.store is not None
    server.store.create_topic(topic, partitions=1, config=config)


def wait_for_end(server: RunningKafka, topic: str, end: int) -> None:
    """Wait until the log holds ``end`` records: an acks=0 producer is gone before its records land, and the
    next producer's connection must not overtake them (Kafka orders nothing across connections)."""
    deadline = time.monotonic() + 10
    while plog(server, topic).log_end_offset < end:
        assert time.monotonic() < deadline, f"{topic} stayed at {plog(server, topic).log_end_offset} < {end}"
        time.sleep(0.01)


def metric(server: RunningKafka, name: str, labels: dict[str, str] | None = None) -> float:
    assert server.store is not None
    value = server.store.metrics_registry.get_sample_value(name, labels or {})
    return 0.0 if value is None else float(value)


# -- raw requests -------------------------------------------------------------------------------------------


def frame(key: int, version: int, body: Any, correlation: int = 7) -> bytes:
    buf = io.BytesIO()
    header_cls = type(body).__header_schema__
    entity_writer(header_cls)(buf, header_cls(request_api_key=i16(key), request_api_version=i16(version),
                                              correlation_id=i32(correlation), client_id="raw"))
    entity_writer(type(body))(buf, body)
    payload = buf.getvalue()
    return struct.pack(">i", len(payload)) + payload


def read_response(sock: socket.socket, key: int, version: int) -> tuple[int, Any]:
    size = struct.unpack(">i", _read(sock, 4))[0]
    data = _read(sock, size)
    cls = response_class(key, version)
    header, offset = entity_reader(cls.__header_schema__)(data, 0)
    body, _ = entity_reader(cls)(data, offset)
    return int(header.correlation_id), body


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "connection closed"
        data += chunk
    return data


def raw_request(bootstrap: str, key: int, version: int, body: Any, timeout: float = 10) -> Any:
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(frame(key, version, body))
        return read_response(sock, key, version)[1]


def nested(cls: type[Any], name: str) -> Any:
    return getattr(sys.modules[cls.__module__], name)


def produce_request(version: int, topic: str | uuid.UUID, records: bytes | None, acks: int = -1) -> Any:
    cls = request_class(0, version)
    assert cls is not None
    part = nested(cls, "PartitionProduceData")(index=i32(0), records=records)
    ident = {"topic_id": topic} if version >= 13 else {"name": topic}
    data = nested(cls, "TopicProduceData")(**ident, partition_data=(part,))
    return cls(transactional_id=None, acks=i16(acks), timeout=datetime.timedelta(seconds=5), topic_data=(data,))


def fetch_request(version: int, topic: str | uuid.UUID, offset: int, *, max_wait_ms: int = 0, min_bytes: int = 1,
                  session_id: int = 0, max_bytes: int = 1 << 20) -> Any:
    cls = request_class(1, version)
    assert cls is not None
    part = nested(cls, "FetchPartition")(partition=i32(0), fetch_offset=i64(offset),
                                         partition_max_bytes=i32(max_bytes))
    ident = {"topic_id": topic} if version >= 13 else {"topic": topic}
    fields: dict[str, Any] = {"max_wait": datetime.timedelta(milliseconds=max_wait_ms), "min_bytes": i32(min_bytes),
                              "topics": (nested(cls, "FetchTopic")(**ident, partitions=(part,)),)}
    if "session_id" in cls.__dataclass_fields__:
        fields["session_id"] = i32(session_id)
        fields["session_epoch"] = i32(-1 if session_id == 0 else 1)
        fields["forgotten_topics_data"] = ()
    return cls(**fields)


def batch(rows: list[Sent], codec: int = 0, timestamp: int | None = None) -> bytes:
    builder = KpBuilder(2, codec, 0, -1, -1, -1, batch_size=1 << 22)
    ts = timestamp if timestamp is not None else int(time.time() * 1000)
    for i, (key, value, headers) in enumerate(rows):
        builder.append(i, timestamp=ts, key=key, value=value, headers=headers)
    return bytes(builder.build())


def fetched(records: bytes) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record in a fetch response's records, batch by batch."""
    out: list[tuple[int, bytes | None]] = []
    pos = 0
    while pos < len(records):
        size = struct.unpack_from(">i", records, pos + 8)[0] + 12
        b = KpBatch(records[pos:pos + size])
        assert b.validate_crc()
        out.extend((r.offset, r.value) for r in b)
        pos += size
    return out


def produce_raw(server: RunningKafka, topic: str, rows: list[Sent], version: int = 9) -> Any:
    resp = raw_request(server.bootstrap, 0, version, produce_request(version, topic, batch(rows)))
    return resp.responses[0].partition_responses[0]


# -- consumers -----------------------------------------------------------------------------------------------


def consume_kafka_python(server: RunningKafka, topic: str, n: int, offset: int = 0, **config: Any
                         ) -> list[tuple[int, Sent]]:
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=None, fetch_max_wait_ms=100,
                             enable_auto_commit=False, **config)
    try:
        tp = KpPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, offset)
        out: list[tuple[int, Sent]] = []
        deadline = time.monotonic() + 20
        while len(out) < n and time.monotonic() < deadline:
            for msgs in consumer.poll(timeout_ms=200).values():
                out.extend((m.offset, (m.key, m.value, list(m.headers))) for m in msgs)
        return out
    finally:
        consumer.close()


def consume_confluent(server: RunningKafka, topic: str, n: int, offset: int = 0, **config: Any
                      ) -> list[tuple[int, Sent]]:
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": f"g-{uuid.uuid4()}",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100, **config})
    try:
        consumer.assign([CkPartition(topic, 0, offset)])
        out: list[tuple[int, Sent]] = []
        deadline = time.monotonic() + 20
        while len(out) < n and time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is None or m.error():
                continue
            headers: Any = m.headers() or []
            out.append((int(m.offset() or 0), (m.key(), m.value(), list(headers))))
        return out
    finally:
        consumer.close()


def consume_aiokafka(server: RunningKafka, topic: str, n: int, offset: int = 0) -> list[tuple[int, Sent]]:
    async def run() -> list[tuple[int, Sent]]:
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=server.bootstrap, group_id=None,
                                             enable_auto_commit=False, fetch_max_wait_ms=100)
        await consumer.start()
        try:
            tp = aiokafka.TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, offset)
            out: list[tuple[int, Sent]] = []
            async with asyncio.timeout(20):
                while len(out) < n:
                    m = await consumer.getone()
                    out.append((m.offset, (m.key, m.value, list(m.headers))))
            return out
        finally:
            await consumer.stop()

    return asyncio.run(run())


def consume_kcat(server: RunningKafka, topic: str, n: int, offset: int = 0) -> list[tuple[int, Sent]]:
    """kcat's view, through a format that shows nulls: offset, key length, value length, headers."""
    out = subprocess.run(["kcat", "-b", server.bootstrap, "-C", "-t", topic, "-p", "0", "-o", str(offset),
                          "-c", str(n), "-e", "-f", "%o|%K|%k|%S|%s|%h\\n"],
                         check=True, capture_output=True, timeout=30).stdout
    got: list[tuple[int, Sent]] = []
    for line in out.splitlines():
        off, klen, rest = line.split(b"|", 2)
        key = None if klen == b"-1" else rest[:int(klen)]
        rest = rest[max(int(klen), 0) + 1:]
        vlen, rest = rest.split(b"|", 1)
        value = None if vlen == b"-1" else rest[:int(vlen)]
        rest = rest[max(int(vlen), 0) + 1:]
        headers = []
        if rest:
            for item in rest.split(b","):
                hk, _, hv = item.partition(b"=")
                headers.append((hk.decode(), hv))
        got.append((int(off), (key, value, headers)))
    return got


CONSUMERS: dict[str, Callable[..., list[tuple[int, Sent]]]] = {
    "kafka-python": consume_kafka_python, "aiokafka": consume_aiokafka, "confluent-kafka": consume_confluent,
    "kcat": consume_kcat}


def without_offsets(got: list[tuple[int, Sent]]) -> list[Sent]:
    return [s for _, s in got]


def header_pairs(sent: list[Sent]) -> list[Sent]:
    """What a consumer sees: headers as (str, bytes) pairs (empty values as b"")."""
    return [(k, v, [(hk, hv) for hk, hv in h]) for k, v, h in sent]


# -- producers ------------------------------------------------------------------------------------------------


def test_kafka_python_every_codec_and_acks(kafka_server: RunningKafka) -> None:
    create(kafka_server, "kp")
    sent: list[Sent] = []
    for codec, acks, idempotent in [("gzip", 0, False), ("snappy", 1, False), ("lz4", "all", True),
                                    ("zstd", "all", False), (None, 1, False)]:
        producer = KafkaProducer(bootstrap_servers=kafka_server.bootstrap, compression_type=codec, acks=acks,
                                 enable_idempotence=idempotent, linger_ms=5)
        rows = records_for(f"kp-{codec}", null_header=False)
        futures = [producer.send("kp", key=k, value=v, headers=h) for k, v, h in rows]
        producer.flush(10)
        if acks != 0:
            offsets = [f.get(10).offset for f in futures]
            assert offsets == list(range(len(sent), len(sent) + len(rows)))
        producer.close(10)
        sent += rows
        wait_for_end(kafka_server, "kp", len(sent))
    got = consume_kafka_python(kafka_server, "kp", len(sent))
    assert without_offsets(got) == header_pairs(sent)
    assert [o for o, _ in got] == list(range(len(sent)))
    assert metric(kafka_server, "s3stream_kafka_produced_records_total") == len(sent)


def test_aiokafka_every_codec_and_acks(kafka_server: RunningKafka) -> None:
    create(kafka_server, "aio")
    sent: list[Sent] = []

    async def produce() -> None:
        for codec, acks in [("gzip", 0), ("snappy", 1), ("lz4", "all"), ("zstd", 1), (None, "all")]:
            producer = aiokafka.AIOKafkaProducer(bootstrap_servers=kafka_server.bootstrap, compression_type=codec,
                                                 acks=acks, linger_ms=5)
            await producer.start()
            try:
                rows = records_for(f"aio-{codec}")
                futures = [await producer.send("aio", key=k, value=v, headers=h) for k, v, h in rows]
                await producer.flush()
                if acks != 0:
                    assert [(await f).offset for f in futures] == list(range(len(sent), len(sent) + len(rows)))
            finally:
                await producer.stop()
            sent.extend(rows)
            wait_for_end(kafka_server, "aio", len(sent))

    asyncio.run(produce())
    got = consume_aiokafka(kafka_server, "aio", len(sent))
    assert without_offsets(got) == header_pairs(sent)


def test_confluent_every_codec_and_acks(kafka_server: RunningKafka) -> None:
    create(kafka_server, "ck")
    sent: list[Sent] = []
    for codec, acks, idempotent in [("gzip", "0", False), ("snappy", "1", False), ("lz4", "all", True),
                                    ("zstd", "all", False), ("none", "1", False)]:
        producer = Producer({"bootstrap.servers": kafka_server.bootstrap, "compression.type": codec, "acks": acks,
                             "enable.idempotence": idempotent, "linger.ms": 5})
        reports: list[Any] = []
        rows = records_for(f"ck-{codec}")
        for k, v, h in rows:
            producer.produce("ck", key=k, value=v, headers=list(h), on_delivery=lambda err, msg: reports.append(err))
        assert producer.flush(10) == 0
        assert reports == [None] * len(rows)
        sent += rows
        wait_for_end(kafka_server, "ck", len(sent))
    got = consume_confluent(kafka_server, "ck", len(sent))
    assert without_offsets(got) == header_pairs(sent)


def test_kcat_every_codec_and_acks(kafka_server: RunningKafka) -> None:
    create(kafka_server, "kc")
    sent: list[Sent] = []
    for codec, acks in [("gzip", "0"), ("snappy", "1"), ("lz4", "all"), ("zstd", "-1")]:
        lines = [f"{codec}-k{i}:{codec} value {i} {'x' * 50}".encode() for i in range(3)]
        log = subprocess.run(["kcat", "-b", kafka_server.bootstrap, "-P", "-t", "kc", "-p", "0", "-K:", "-z", codec,
                              "-X", f"acks={acks}", "-H", f"codec={codec}", "-d", "msg"],
                             input=b"\n".join(lines) + b"\n", check=True, capture_output=True, timeout=30).stderr
        assert b"does not support compression" not in log  # librdkafka 2.0 needs Produce v0 advertised
        assert f"MsgVersion 2, MsgId 0, BaseSeq -1, PID{{Invalid}}, {codec})".encode() in log
        sent += [(line.split(b":", 1)[0], line.split(b":", 1)[1], [("codec", codec.encode())]) for line in lines]
        wait_for_end(kafka_server, "kc", len(sent))
    got = consume_kcat(kafka_server, "kc", len(sent))
    assert without_offsets(got) == sent


# -- consumers: mid-batch, cold, long poll, out of range ------------------------------------------------------


def produce_one_batch(server: RunningKafka, topic: str, n: int) -> list[Sent]:
    """``n`` records in a single batch (one linger window), through confluent-kafka."""
    producer = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 200, "compression.type": "lz4",
                         "batch.num.messages": 10_000})
    rows = records_for(topic, n)
    for k, v, h in rows:
        producer.produce(topic, key=k, value=v, headers=list(h))
    assert producer.flush(10) == 0
    resp = raw_request(server.bootstrap, 1, 12, fetch_request(12, topic, 0))
    records = resp.responses[0].partitions[0].records
    assert fetched(records)[-1][0] == n - 1
    assert struct.unpack_from(">i", records, 8)[0] + 12 == len(records), "one batch"
    return rows


@pytest.mark.parametrize("client", list(CONSUMERS))
def test_fetch_from_the_middle_of_a_batch_hot_and_cold(kafka_server: RunningKafka, client: str) -> None:
    create(kafka_server, "mid")
    rows = header_pairs(produce_one_batch(kafka_server, "mid", 12))
    consume = CONSUMERS[client]
    tail_before = metric(kafka_server, "s3stream_kafka_fetch_batches_total", {"source": "tail"})
    got = consume(kafka_server, "mid", 5, offset=7)
    assert got == list(zip(range(7, 12), rows[7:], strict=True))  # the client skipped records 0..6
    assert metric(kafka_server, "s3stream_kafka_fetch_batches_total", {"source": "tail"}) > tail_before
    plog(kafka_server, "mid").roll()  # seal the segment, restart: the producers' batches are gone
    kafka_server.restart()
    for source in ("cold", "cold-cache"):  # encoded from the segment, then from the cache
        got = consume(kafka_server, "mid", 8, offset=4)
        assert got == list(zip(range(4, 12), rows[4:], strict=True))
        assert metric(kafka_server, "s3stream_kafka_fetch_batches_total", {"source": source}) >= 1


@pytest.mark.parametrize("client", list(CONSUMERS))
def test_compacted_offsets_with_gaps(kafka_server: RunningKafka, client: str) -> None:
    """Gaps inside a cleaned segment and at its end (tiny segments: the cleaner keeps them apart)."""
    create(kafka_server, "cmp", {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
                                 "segment.bytes": "60"})
    log = plog(kafka_server, "cmp")
    for keys in (["k0", "k1", "k2", "k3"], ["k1", "k3"]):
        produce_raw(kafka_server, "cmp", [(k.encode(), f"{k}@{i}".encode(), []) for i, k in enumerate(keys)])
        log.roll()
    produce_raw(kafka_server, "cmp", [(b"k9", b"tail", [])])
    assert kafka_server.store is not None
    assert kafka_server.store.run_cleaner().cleaned is not None
    assert [(s.base_offset, s.last_offset, s.record_count) for s in log.segments()][:2] == [(0, 3, 2), (4, 5, 2)]
    kafka_server.server.broker.component(DataPath).tail.drop((log.topic_id, 0))
    survivors = [(0, b"k0@0"), (2, b"k2@2"), (4, b"k1@0"), (5, b"k3@1"), (6, b"tail")]
    consume = CONSUMERS[client]
    for start, skip in ((0, 0), (1, 1), (3, 2)):  # from the start, inside a gap, inside the segment's last gap
        got = consume(kafka_server, "cmp", len(survivors) - skip, offset=start)
        assert [(o, v) for o, (_, v, _) in got] == survivors[skip:]


def test_long_poll_wakes_on_produce(kafka_server: RunningKafka) -> None:
    create(kafka_server, "lp")
    produce_raw(kafka_server, "lp", records_for("lp", 1))
    host, port = kafka_server.bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        started = time.monotonic()  # nothing arrives: the answer comes at max_wait_ms, empty (not null)
        sock.sendall(frame(1, 11, fetch_request(11, "lp", 1, max_wait_ms=300)))
        empty = read_response(sock, 1, 11)[1].responses[0].partitions[0]
        assert 0.25 < time.monotonic() - started < 2.0
        assert empty.records == b""
        assert empty.high_watermark == 1
        sock.sendall(frame(1, 11, fetch_request(11, "lp", 1, max_wait_ms=5000)))
        time.sleep(0.3)
        produced_at = time.monotonic()
        produce_raw(kafka_server, "lp", [(b"k", b"late", [])])
        part = read_response(sock, 1, 11)[1].responses[0].partitions[0]
        waited = time.monotonic() - produced_at
    assert fetched(part.records) == [(1, b"late")]
    assert waited < 1.0, f"the long poll took {waited:.2f}s to see the record"


def test_confluent_consumer_gets_a_late_record_quickly(kafka_server: RunningKafka) -> None:
    create(kafka_server, "lp2")
    consumer = Consumer({"bootstrap.servers": kafka_server.bootstrap, "group.id": "lp2", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 4000, "fetch.error.backoff.ms": 10})
    consumer.assign([CkPartition("lp2", 0, 0)])
    try:
        assert consumer.poll(1.0) is None  # caught up at the log end, long-polling
        sent_at: list[float] = []

        def produce_later() -> None:
            time.sleep(0.5)
            sent_at.append(time.monotonic())
            produce_raw(kafka_server, "lp2", [(None, b"hello", [])])

        thread = threading.Thread(target=produce_later)
        thread.start()
        deadline = time.monotonic() + 10
        msg = None
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(0.05)
        received_at = time.monotonic()
        thread.join()
        assert msg is not None and msg.value() == b"hello"
        assert received_at - sent_at[0] < 1.5  # far below fetch.wait.max.ms
    finally:
        consumer.close()


def test_offset_out_of_range_after_delete_records_resets(kafka_server: RunningKafka) -> None:
    create(kafka_server, "del")
    rows = header_pairs(records_for("del", 10))
    produce_raw(kafka_server, "del", rows)
    plog(kafka_server, "del").delete_records(6)
    part = raw_request(kafka_server.bootstrap, 1, 12, fetch_request(12, "del", 2)).responses[0].partitions[0]
    assert part.error_code == ErrorCode.offset_out_of_range
    assert (part.log_start_offset, part.high_watermark, part.records) == (6, 10, b"")
    got = consume_confluent(kafka_server, "del", 4, offset=2, **{"auto.offset.reset": "earliest"})
    assert got == list(zip(range(6, 10), rows[6:], strict=True))
    got = consume_kafka_python(kafka_server, "del", 4, offset=2, auto_offset_reset="earliest")
    assert got == list(zip(range(6, 10), rows[6:], strict=True))


@pytest.mark.seaweedfs
@pytest.mark.s3
@pytest.mark.parametrize("kafka_store_url", ["seaweedfs"], indirect=True)
def test_produce_and_consume_on_seaweedfs(kafka_server: RunningKafka) -> None:
    create(kafka_server, "sw")
    producer = Producer({"bootstrap.servers": kafka_server.bootstrap, "acks": "all", "compression.type": "zstd",
                         "enable.idempotence": True, "linger.ms": 5})
    rows = records_for("sw", 20)
    for k, v, h in rows:
        producer.produce("sw", key=k, value=v, headers=list(h))
    assert producer.flush(20) == 0
    del producer
    assert consume_confluent(kafka_server, "sw", 20) == list(enumerate(header_pairs(rows)))
    log = plog(kafka_server, "sw")
    log.roll()  # sealed into a segment object in the bucket; forget the producers' batches: encoded from it
    kafka_server.server.broker.component(DataPath).tail.drop((log.topic_id, 0))
    cold = metric(kafka_server, "s3stream_kafka_fetch_batches_total", {"source": "cold"})
    assert consume_kafka_python(kafka_server, "sw", 15, offset=5) == list(enumerate(header_pairs(rows)))[5:]
    assert metric(kafka_server, "s3stream_kafka_fetch_batches_total", {"source": "cold"}) > cold


# -- raw requests: errors and versions -------------------------------------------------------------------------


@pytest.mark.parametrize("version", [3, 7, 9, 13])
def test_produce_errors_per_partition(kafka_server: RunningKafka, version: int) -> None:
    create(kafka_server, "ok")
    create(kafka_server, "compacted", {"cleanup.policy": "compact"})
    create(kafka_server, "small", {"max.message.bytes": "2000"})
    create(kafka_server, "strict", {"message.timestamp.after.max.ms": "60000"})
    ids = {name: kafka_server.server.broker.topic_uuid(name) for name in ("ok", "compacted", "small", "strict")}

    def produce(topic: str, records: bytes | None) -> Any:
        ident: str | uuid.UUID = ids.get(topic, uuid.uuid4()) if version >= 13 else topic
        resp = raw_request(kafka_server.bootstrap, 0, version, produce_request(version, ident, records))
        return resp.responses[0].partition_responses[0]

    good = produce("ok", batch(records_for("ok")))
    assert (good.error_code, good.base_offset) == (ErrorCode.none, 0)
    if version >= 5:
        assert good.log_start_offset == 0
    damaged = bytearray(batch(records_for("ok")))
    damaged[70] ^= 0xFF
    assert produce("ok", bytes(damaged)).error_code == ErrorCode.corrupt_message
    assert produce("ok", batch(records_for("ok")) * 2).error_code == ErrorCode.invalid_record
    missing = produce("missing", batch(records_for("ok")))
    assert missing.error_code == (ErrorCode.unknown_topic_id if version >= 13 else ErrorCode.unknown_topic_or_partition)
    nulls = produce("compacted", batch(records_for("c", 4)))
    assert nulls.error_code == ErrorCode.invalid_record
    if version >= 8:
        assert [e.batch_index for e in nulls.record_errors] == [1]
    assert produce("small", batch([(b"k", b"v" * 5000, [])])).error_code == ErrorCode.message_too_large
    future = produce("strict", batch([(b"k", b"v", [])], timestamp=int(time.time() * 1000) + 3_600_000))
    assert future.error_code == ErrorCode.invalid_timestamp
    assert produce("ok", batch(records_for("ok"))).base_offset == 4  # nothing of the refused batches landed


def test_acks_zero_gets_no_response(kafka_server: RunningKafka) -> None:
    create(kafka_server, "a0")
    host, port = kafka_server.bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(frame(0, 9, produce_request(9, "a0", batch(records_for("a0")), acks=0), correlation=1))
        sock.sendall(frame(1, 12, fetch_request(12, "a0", 0, max_wait_ms=5000), correlation=2))
        correlation, resp = read_response(sock, 1, 12)
    assert correlation == 2
    assert len(fetched(resp.responses[0].partitions[0].records)) == 4


def test_every_fetch_version(kafka_server: RunningKafka) -> None:
    create(kafka_server, "fv")
    produce_raw(kafka_server, "fv", records_for("fv", 6))
    tid = kafka_server.server.broker.topic_uuid("fv")
    for version in range(4, 19):
        topic: str | uuid.UUID = tid if version >= 13 else "fv"
        part = raw_request(kafka_server.bootstrap, 1, version, fetch_request(version, topic, 3)).responses[0]
        p = part.partitions[0]
        assert (p.error_code, p.high_watermark) == (ErrorCode.none, 6), version
        assert [o for o, _ in fetched(p.records)] == list(range(6)), version  # the whole batch, from 0
        if version >= 13:
            assert part.topic_id == tid
    unknown = raw_request(kafka_server.bootstrap, 1, 16, fetch_request(16, uuid.uuid4(), 0)).responses[0]
    assert unknown.partitions[0].error_code == ErrorCode.unknown_topic_id
    assert unknown.partitions[0].records == b""
    missing = raw_request(kafka_server.bootstrap, 1, 12, fetch_request(12, "nope", 0)).responses[0]
    assert missing.partitions[0].error_code == ErrorCode.unknown_topic_or_partition
    ahead = raw_request(kafka_server.bootstrap, 1, 12, fetch_request(12, "fv", 7)).responses[0].partitions[0]
    assert (ahead.error_code, ahead.log_start_offset, ahead.high_watermark) == (ErrorCode.offset_out_of_range, 0, 6)
    session = raw_request(kafka_server.bootstrap, 1, 12, fetch_request(12, "fv", 0, session_id=5))
    assert session.error_code == ErrorCode.fetch_session_id_not_found


def test_fetch_budgets(kafka_server: RunningKafka) -> None:
    create(kafka_server, "budget")
    for i in range(3):
        produce_raw(kafka_server, "budget", [(None, bytes([i]) * 3000, [])])
    small = raw_request(kafka_server.bootstrap, 1, 12, fetch_request(12, "budget", 0, max_bytes=100))
    assert [o for o, _ in fetched(small.responses[0].partitions[0].records)] == [0]  # at least one batch
    two = raw_request(kafka_server.bootstrap, 1, 12, fetch_request(12, "budget", 0, max_bytes=6500))
    assert [o for o, _ in fetched(two.responses[0].partitions[0].records)] == [0, 1]


def test_log_append_time_topic(kafka_server: RunningKafka) -> None:
    create(kafka_server, "lat", {"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    part = produce_raw(kafka_server, "lat", [(b"k", b"v", []), (b"k2", b"v2", [])])
    assert part.error_code == ErrorCode.none
    append_ms = int(part.log_append_time.timestamp() * 1000)
    assert before - 1000 <= append_ms <= int(time.time() * 1000) + 1000
    consumer = KafkaConsumer(bootstrap_servers=kafka_server.bootstrap, group_id=None, fetch_max_wait_ms=100)
    try:
        tp = KpPartition("lat", 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        msgs: list[Any] = []
        deadline = time.monotonic() + 10
        while len(msgs) < 2 and time.monotonic() < deadline:
            for batch_msgs in consumer.poll(timeout_ms=200).values():
                msgs.extend(batch_msgs)
    finally:
        consumer.close()
    assert [(m.timestamp_type, m.timestamp) for m in msgs] == [(1, append_ms)] * 2
