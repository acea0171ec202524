"""Idempotent producers through the Kafka server: InitProducerId, and retried batches never written twice.

Real clients (confluent-kafka with ``enable.idempotence=true``; kafka-python 3, idempotent by default) produce
through the server; raw ProduceRequests (kio messages carrying batches built by aiokafka's record builder with
a producer id from InitProducerId) replay a client's retry exactly, before and after a server restart.
"""

from __future__ import annotations

import datetime
import io
import socket
import struct
import sys
from typing import Any

import confluent_kafka
import kafka
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32, i64

from s3stream.apps.kafka.wire import request_class, response_class
from s3stream.manifest.producer_ids import BLOCK_SIZE
from s3stream.store import Store

from .conftest import RunningKafka

TOPIC = "idem"


class RawClient:
    """One connection sending kio-encoded requests (what a client's retry puts on the wire)."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def request(self, key: int, version: int, **fields: Any) -> Any:
        cls = request_class(key, version)
        assert cls is not None
        body = cls(**fields)
        header_cls = cls.__header_schema__
        self.correlation += 1
        buf = io.BytesIO()
        entity_writer(header_cls)(buf, header_cls(request_api_key=i16(key), request_api_version=i16(version),
                                                  correlation_id=i32(self.correlation), client_id="raw"))
        entity_writer(cls)(buf, body)
        payload = buf.getvalue()
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        (size,) = struct.unpack(">i", self._read(4))
        frame = self._read(size)
        rcls = response_class(key, version)
        header, offset = entity_reader(rcls.__header_schema__)(frame, 0)
        assert int(header.correlation_id) == self.correlation
        response, _ = entity_reader(rcls)(frame, offset)
        return response

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            assert chunk, "connection closed"
            data += chunk
        return data

    def init_producer_id(self, version: int = 4, *, transactional_id: str | None = None, producer_id: int = -1,
                         epoch: int = -1) -> Any:
        fields: dict[str, Any] = {"transactional_id": transactional_id,
                                  "transaction_timeout": datetime.timedelta(seconds=60)}
        if version >= 3:
            fields.update(producer_id=i64(producer_id), producer_epoch=i16(epoch))
        if version >= 6:
            fields.update(enable2_pc=False, keep_prepared_txn=False)
        return self.request(22, version, **fields)

    def produce(self, records: bytes, *, partition: int = 0) -> tuple[ErrorCode, int]:
        """One batch to ``TOPIC`` with acks=all (Produce v9): its error code and base offset."""
        cls = request_class(0, 9)
        mod = sys.modules[cls.__module__]
        data = mod.TopicProduceData(name=TOPIC, partition_data=(
            mod.PartitionProduceData(index=i32(partition), records=records),))
        response = self.request(0, 9, transactional_id=None, acks=i16(-1),
                                timeout=datetime.timedelta(seconds=10), topic_data=(data,))
        part = response.responses[0].partition_responses[0]
        return part.error_code, int(part.base_offset)


def _batch(pid: int, epoch: int, seq: int, values: list[bytes]) -> bytes:
    """A v2 record batch as an idempotent producer builds it (aiokafka's compiled builder)."""
    builder = DefaultRecordBatchBuilder(2, 0, 0, pid, epoch, seq, 1 << 20)
    for i, value in enumerate(values):
        builder.append(i, 1_700_000_000_000 + i, b"k", value, [])
    return bytes(builder.build())


def _values(store: Store, topic: str = TOPIC) -> list[bytes]:
    log = store.partition(topic, 0)
    return log.read_arrow(0, max_records=100_000).column("value").to_pylist()  # type: ignore[no-any-return]


def _producer_ids(store: Store, topic: str = TOPIC) -> set[int]:
    """The producer ids the partition remembers (sealed into its manifest by a roll)."""
    log = store.partition(topic, 0)
    log.roll()
    snap = log.manifest().producers
    return set() if snap is None else {e.producer_id for e in snap.entries}


def test_init_producer_id(kafka_server: RunningKafka) -> None:
    client = RawClient(kafka_server.bootstrap)
    try:
        first = client.init_producer_id(0)
        assert (first.error_code, int(first.producer_epoch)) == (ErrorCode.none, 0)
        ids = {int(first.producer_id)}
        for version in (2, 3, 4, 5, 6):
            got = client.init_producer_id(version)
            assert got.error_code == ErrorCode.none and int(got.producer_epoch) == 0
            ids.add(int(got.producer_id))
        assert len(ids) == 6  # each call a new id
        # v3+: an idempotent producer re-initialising with its id and epoch (KIP-360) gets a fresh id, as
        # Kafka's broker answers a null transactional id
        again = client.init_producer_id(4, producer_id=int(first.producer_id), epoch=0)
        assert again.error_code == ErrorCode.none and int(again.producer_id) not in ids
        assert int(again.producer_epoch) == 0
        half = client.init_producer_id(4, producer_id=int(first.producer_id))
        assert half.error_code == ErrorCode.invalid_request
        for version in (0, 4, 6):  # transactions are not supported: fatal at once for the client
            txn = client.init_producer_id(version, transactional_id="txn-1")
            assert txn.error_code == ErrorCode.transactional_id_authorization_failed
            assert int(txn.producer_id) == -1
        assert client.init_producer_id(4, transactional_id="").error_code == ErrorCode.invalid_request
    finally:
        client.close()
    kafka_server.restart()
    client = RawClient(kafka_server.bootstrap)
    try:  # a restarted server never reuses an id: it takes the next block
        assert int(client.init_producer_id(4).producer_id) >= BLOCK_SIZE
    finally:
        client.close()


def test_retried_produce_request_is_not_duplicated(kafka_server: RunningKafka) -> None:
    assert kafka_server.store is not None
    kafka_server.store.create_topic(TOPIC)
    client = RawClient(kafka_server.bootstrap)
    try:
        init = client.init_producer_id(4)
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        first = _batch(pid, epoch, 0, [b"a0", b"a1", b"a2"])
        second = _batch(pid, epoch, 3, [b"b0", b"b1"])
        assert client.produce(first) == (ErrorCode.none, 0)
        assert client.produce(first) == (ErrorCode.none, 0)  # the retry: the original offset, nothing written
        assert client.produce(second) == (ErrorCode.none, 3)
        assert client.produce(first) == (ErrorCode.none, 0)
    finally:
        client.close()

    kafka_server.restart()
    client = RawClient(kafka_server.bootstrap)
    try:
        assert client.produce(second) == (ErrorCode.none, 3)  # still deduplicated after the restart
        assert client.produce(first) == (ErrorCode.none, 0)
        assert client.produce(_batch(pid, epoch, 5, [b"c0"])) == (ErrorCode.none, 5)
        gap = client.produce(_batch(pid, epoch, 9, [b"gap"]))
        assert gap[0] == ErrorCode.out_of_order_sequence_number
        assert client.produce(_batch(pid, epoch + 1, 3, [b"x"]))[0] == ErrorCode.out_of_order_sequence_number
        assert client.produce(_batch(pid, epoch + 1, 0, [b"d0"])) == (ErrorCode.none, 6)  # a new epoch from 0
        assert client.produce(_batch(pid, epoch, 6, [b"zombie"]))[0] == ErrorCode.invalid_producer_epoch
    finally:
        client.close()
    assert kafka_server.store is not None
    assert _values(kafka_server.store) == [b"a0", b"a1", b"a2", b"b0", b"b1", b"c0", b"d0"]


def test_confluent_kafka_idempotent_producer(kafka_server: RunningKafka) -> None:
    assert kafka_server.store is not None
    kafka_server.store.create_topic(TOPIC)
    producer = confluent_kafka.Producer({
        "bootstrap.servers": kafka_server.bootstrap, "enable.idempotence": True, "linger.ms": 5,
        "max.in.flight.requests.per.connection": 5, "batch.num.messages": 20, "message.timeout.ms": 15000})
    offsets: list[int] = []
    errors: list[Any] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset())

    for i in range(300):
        producer.produce(TOPIC, key=b"k", value=b"m%d" % i, on_delivery=delivered)
        if i % 50 == 0:
            producer.poll(0)
    assert producer.flush(15) == 0
    assert errors == []
    assert sorted(offsets) == list(range(300))
    assert kafka_server.store is not None
    assert _values(kafka_server.store) == [b"m%d" % i for i in range(300)]
    assert len(_producer_ids(kafka_server.store)) == 1  # the batches carried the producer id it was given


def test_kafka_python_is_idempotent_by_default(kafka_server: RunningKafka) -> None:
    assert kafka_server.store is not None
    kafka_server.store.create_topic(TOPIC)
    producer = kafka.KafkaProducer(bootstrap_servers=kafka_server.bootstrap, linger_ms=5, request_timeout_ms=10000)
    try:
        assert producer.config["enable_idempotence"]
        futures = [producer.send(TOPIC, key=b"k", value=b"p%d" % i) for i in range(60)]
        producer.flush(15)
        assert sorted(f.get(timeout=10).offset for f in futures) == list(range(60))
    finally:
        producer.close(5)
    assert kafka_server.store is not None
    assert _values(kafka_server.store) == [b"p%d" % i for i in range(60)]
    assert len(_producer_ids(kafka_server.store)) == 1


def test_a_transactional_producer_fails_fast_not_after_its_timeout(kafka_server: Any) -> None:
    """Transactions are not supported: librdkafka's init_transactions fails at once with a fatal error."""
    producer = confluent_kafka.Producer({"bootstrap.servers": kafka_server.bootstrap, "transactional.id": "tx-1",
                                         "log_level": 0})
    with pytest.raises(confluent_kafka.KafkaException) as raised:
        producer.init_transactions(20)
    error = raised.value.args[0]
    assert error.fatal() and error.code() == confluent_kafka.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert "not supported" in error.str()
