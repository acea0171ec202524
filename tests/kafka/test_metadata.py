"""Metadata (key 3) with real clients: kcat, kafka-python, aiokafka, confluent-kafka; auto-creation; topic ids."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import subprocess
import uuid
from collections.abc import Iterable
from typing import Any

import aiokafka
import pytest
from confluent_kafka import Consumer, KafkaError, TopicCollection
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from s3stream.apps.kafka.topics import is_internal
from s3stream.apps.kafka.wire import request_class, response_class
from tests.kafka.conftest import RunningKafka

OFFSETS = "__consumer_offsets"


def _user(names: Iterable[str | None]) -> list[str | None]:
    """The topics a test made: all but the internal ones the server creates at startup."""
    return sorted(n for n in names if n is None or not is_internal(n))


def _admin(server: RunningKafka) -> AdminClient:
    return AdminClient({"bootstrap.servers": server.bootstrap, "socket.timeout.ms": 5000})


def _error(md: Any, topic: str) -> int | None:
    """The error code librdkafka reports for ``topic`` in a ClusterMetadata (None: no error)."""
    error = md.topics[topic].error
    return None if error is None else int(error.code())


def raw_request(bootstrap: str, key: int, version: int, body: Any) -> Any:
    """One request over a plain socket, parsed with kio (for fields and versions real clients never send)."""
    import io

    host, port = bootstrap.rsplit(":", 1)
    buf = io.BytesIO()
    header_cls = type(body).__header_schema__
    entity_writer(header_cls)(buf, header_cls(request_api_key=i16(key), request_api_version=i16(version),
                                              correlation_id=i32(7), client_id="raw"))
    entity_writer(type(body))(buf, body)
    payload = buf.getvalue()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", _read(sock, 4))[0]
        frame = _read(sock, size)
    cls = response_class(key, version)
    _, offset = entity_reader(cls.__header_schema__)(frame, 0)
    response, _ = entity_reader(cls)(frame, offset)
    return response


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "connection closed"
        data += chunk
    return data


def _metadata_request(version: int, names: list[str] | None = None, ids: list[uuid.UUID] | None = None,
                      allow_create: bool = True) -> Any:
    import sys

    cls = request_class(3, version)
    assert cls is not None
    topic_cls = sys.modules[cls.__module__].MetadataRequestTopic
    topics = [topic_cls(topic_id=None, name=n) for n in names or []]
    topics += [topic_cls(topic_id=t, name=None) for t in ids or []]
    return cls(topics=tuple(topics) if names is not None or ids is not None else None,
               allow_auto_topic_creation=allow_create, include_topic_authorized_operations=False)


def test_kcat_lists_brokers_topics_and_partitions(kafka_server: RunningKafka) -> None:
    assert kafka_server.store is not None
    kafka_server.store.create_topic("orders", partitions=3)
    out = subprocess.run(["kcat", "-b", kafka_server.bootstrap, "-L", "-J", "-m", "10"], check=True,
                         capture_output=True, text=True, timeout=30).stdout
    md = json.loads(out)
    host, port = kafka_server.bootstrap.rsplit(":", 1)
    assert md["controllerid"] == 0
    assert md["brokers"] == [{"id": 0, "name": f"{host}:{port}"}]
    topics = {t["topic"]: t for t in md["topics"]}
    assert set(topics) == {"orders", OFFSETS}  # the group coordinator's topic exists from startup
    topic = topics["orders"]
    assert topic["topic"] == "orders"
    assert [(p["partition"], p["leader"], p["replicas"], p["isrs"]) for p in topic["partitions"]] == [
        (i, 0, [{"id": 0}], [{"id": 0}]) for i in range(3)]


def test_kafka_python_and_aiokafka_see_topics_and_auto_create(kafka_server: RunningKafka) -> None:
    store = kafka_server.store
    assert store is not None
    store.create_topic("a", partitions=2)
    consumer = KafkaConsumer(bootstrap_servers=kafka_server.bootstrap, request_timeout_ms=10_000)
    try:
        assert _user(consumer.topics()) == ["a"]
        assert consumer.partitions_for_topic("a") == {0, 1}
        assert consumer.partitions_for_topic("absent") == set()  # an all-topics request creates nothing
    finally:
        consumer.close()
    producer = KafkaProducer(bootstrap_servers=kafka_server.bootstrap, request_timeout_ms=10_000)
    try:
        assert producer.partitions_for("made-by-kafka-python") == {0}  # auto-created, num.partitions=1
    finally:
        producer.close()
    assert "made-by-kafka-python" in store.list_topics()

    async def with_aiokafka() -> tuple[set[str], set[int]]:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=kafka_server.bootstrap)
        await producer.start()
        try:
            parts = await producer.partitions_for("made-by-aiokafka")  # Metadata v5, auto-created
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=kafka_server.bootstrap)
        await consumer.start()
        try:
            topics = await consumer.topics()
        finally:
            await consumer.stop()
        return topics, parts

    topics, parts = asyncio.run(with_aiokafka())
    assert parts == {0}
    assert _user(topics) == ["a", "made-by-aiokafka", "made-by-kafka-python"]


def test_confluent_list_and_describe_topics_with_ids_and_internal_flag(kafka_server: RunningKafka) -> None:
    store = kafka_server.store
    assert store is not None
    store.create_topic("events", partitions=4)
    admin = _admin(kafka_server)
    md = admin.list_topics(timeout=10)
    assert md.cluster_id == kafka_server.server.broker.cluster_id
    assert md.controller_id == 0
    assert {k: len(v.partitions) for k, v in md.topics.items()} == {"events": 4, OFFSETS: 4}  # FAST_BROKER
    assert all(p.leader == 0 and p.replicas == [0] and p.isrs == [0] for p in md.topics["events"].partitions.values())

    (desc,) = admin.describe_topics(TopicCollection(["events"]), include_authorized_operations=True).values()
    description = desc.result(timeout=10)
    assert description.topic_id is not None
    assert str(description.topic_id) != ""
    assert not description.is_internal
    assert len(description.partitions) == 4
    assert description.authorized_operations  # no ACLs: every topic operation is allowed

    client = KafkaAdminClient(bootstrap_servers=kafka_server.bootstrap, request_timeout_ms=10_000)
    try:
        described = {t["name"]: t for t in client.describe_topics()}  # all topics, Metadata v13
    finally:
        client.close()
    assert described[OFFSETS]["is_internal"] is True
    assert described["events"]["is_internal"] is False


def test_auto_create_honours_client_flag_internal_and_invalid_names(kafka_server: RunningKafka) -> None:
    store = kafka_server.store
    assert store is not None
    consumer = Consumer({"bootstrap.servers": kafka_server.bootstrap, "group.id": "g",
                         "allow.auto.create.topics": False})
    try:
        md = consumer.list_topics(topic="not-created", timeout=10)
        assert _error(md, "not-created") == KafkaError.UNKNOWN_TOPIC_OR_PART
    finally:
        consumer.close()
    refused = raw_request(kafka_server.bootstrap, 3, 12, _metadata_request(12, ["not-created"], allow_create=False))
    assert refused.topics[0].error_code == ErrorCode.unknown_topic_or_partition
    admin = _admin(kafka_server)
    md = admin.list_topics(topic="__transaction_state", timeout=10)
    assert _error(md, "__transaction_state") == KafkaError.UNKNOWN_TOPIC_OR_PART
    response = raw_request(kafka_server.bootstrap, 3, 12, _metadata_request(12, ["bad name!", "x" * 250, "ok.1"]))
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("bad name!", ErrorCode.invalid_topic_exception), ("x" * 250, ErrorCode.invalid_topic_exception),
        ("ok.1", ErrorCode.none)]
    assert _user(store.list_topics()) == ["ok.1"]


@pytest.mark.parametrize("kafka_options", [{"auto_create_topics_enable": False, "num_partitions": 3}])
def test_auto_create_off(kafka_server: RunningKafka) -> None:
    store = kafka_server.store
    assert store is not None
    admin = _admin(kafka_server)
    md = admin.list_topics(topic="missing", timeout=10)
    assert _error(md, "missing") == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert _user(store.list_topics()) == []
    store.create_topic("present", partitions=3)
    md = admin.list_topics(topic="present", timeout=10)
    assert md.topics["present"].error is None
    assert len(md.topics["present"].partitions) == 3


@pytest.mark.parametrize("kafka_options", [{"num_partitions": 3}])
def test_num_partitions_for_auto_created_topics(kafka_server: RunningKafka) -> None:
    md = _admin(kafka_server).list_topics(topic="auto3", timeout=10)
    assert len(md.topics["auto3"].partitions) == 3


def test_topic_ids_stable_across_restart_and_lookup_by_id(kafka_server: RunningKafka) -> None:
    store = kafka_server.store
    assert store is not None
    store.create_topic("stable", partitions=2)
    before = raw_request(kafka_server.bootstrap, 3, 12, _metadata_request(12, ["stable"])).topics[0].topic_id
    assert before != uuid.UUID(int=0)
    kafka_server.restart()
    after = raw_request(kafka_server.bootstrap, 3, 12, _metadata_request(12, ["stable"])).topics[0].topic_id
    assert after == before

    client = KafkaAdminClient(bootstrap_servers=kafka_server.bootstrap, request_timeout_ms=10_000)
    try:
        found, missing = client.describe_topics([before, uuid.uuid4()])  # by id: Metadata v12+
    finally:
        client.close()
    assert (found["name"], found["topic_id"], found["error_code"], len(found["partitions"])) == (
        "stable", str(before), 0, 2)
    assert (missing["name"], missing["error_code"]) == (None, ErrorCode.unknown_topic_id)

    assert kafka_server.store is not None
    kafka_server.store.delete_topic("stable")
    kafka_server.store.create_topic("stable", partitions=1)  # a re-created name is a new topic with a new id
    again = raw_request(kafka_server.bootstrap, 3, 12, _metadata_request(12, ids=[before], allow_create=False))
    assert again.topics[0].error_code == ErrorCode.unknown_topic_id
    fresh = raw_request(kafka_server.bootstrap, 3, 12, _metadata_request(12, ["stable"]))
    assert fresh.topics[0].topic_id not in (before, uuid.UUID(int=0))


def test_empty_topic_list_is_all_topics_in_v0_and_none_later(kafka_server: RunningKafka) -> None:
    assert kafka_server.store is not None
    kafka_server.store.create_topic("everything")
    v0 = request_class(3, 0)
    assert v0 is not None
    assert _user(t.name for t in raw_request(kafka_server.bootstrap, 3, 0, v0(topics=())).topics) == ["everything"]
    v9 = request_class(3, 9)
    assert v9 is not None
    ask = {"allow_auto_topic_creation": False, "include_cluster_authorized_operations": True,
           "include_topic_authorized_operations": True}
    assert raw_request(kafka_server.bootstrap, 3, 9, v9(topics=(), **ask)).topics == ()
    response = raw_request(kafka_server.bootstrap, 3, 9, v9(topics=None, **ask))
    assert _user(t.name for t in response.topics) == ["everything"]
    assert response.cluster_authorized_operations > 0
    (everything,) = (t for t in response.topics if t.name == "everything")
    assert everything.topic_authorized_operations > 0
    assert everything.partitions[0].leader_epoch == 0
