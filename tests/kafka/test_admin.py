"""Topic administration with real admin clients: confluent-kafka's AdminClient and kafka-python's KafkaAdminClient.

CreateTopics, CreatePartitions, DeleteRecords, DeleteTopics and DescribeCluster; one scenario on SeaweedFS too.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka import errors as kerrors
from kafka.admin import KafkaAdminClient
from kafka.structs import TopicPartition as KTopicPartition

from s3stream import Record
from s3stream.apps.kafka.topics import is_internal
from tests.kafka.conftest import RunningKafka

OFFSETS = "__consumer_offsets"


def _user(names: list[str]) -> list[str]:
    """The topics a test made: all but the internal ones the server creates at startup."""
    return [n for n in names if not is_internal(n)]


def _admin(server: RunningKafka) -> AdminClient:
    return AdminClient({"bootstrap.servers": server.bootstrap, "socket.timeout.ms": 5000})


@pytest.fixture
def kp_admin(kafka_server: RunningKafka) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=kafka_server.bootstrap, request_timeout_ms=10_000)
    try:
        yield client
    finally:
        client.close()


def _outcomes(futures: dict[Any, Any]) -> dict[Any, Any]:
    """Each future's result, or the Kafka error code it failed with."""
    out = {}
    for key, future in futures.items():
        try:
            out[key] = future.result(timeout=10)
        except KafkaException as exc:
            out[key] = exc.args[0].code()
    return out


def _append(server: RunningKafka, topic: str, partition: int, n: int) -> None:
    assert server.store is not None
    server.store.partition(topic, partition).append(
        [Record(key=b"k%d" % i, value=b"v%d" % i) for i in range(n)])


def test_confluent_create_topics(kafka_server: RunningKafka) -> None:
    store = kafka_server.store
    assert store is not None
    admin = _admin(kafka_server)
    checked = _outcomes(admin.create_topics([NewTopic("compacted", 3, 1, config={"cleanup.policy": "compact"})],
                                            validate_only=True))
    assert checked == {"compacted": None}
    assert _user(store.list_topics()) == []  # validate_only creates nothing

    results = _outcomes(admin.create_topics([
        NewTopic("compacted", 3, 1, config={"cleanup.policy": "compact", "retention.ms": "3600000"}),
        NewTopic("defaults", -1, -1),
        NewTopic("replicated", 2, 3),  # any replication factor is accepted: the bucket replicates
        NewTopic("bad-value", 1, 1, config={"retention.ms": "soon"}),
        NewTopic("bad-key", 1, 1, config={"retention.msec": "1"}),
        NewTopic("bad name", 1, 1),
    ]))
    assert results == {"compacted": None, "defaults": None, "replicated": None,
                       "bad-value": KafkaError.INVALID_CONFIG, "bad-key": KafkaError.INVALID_CONFIG,
                       "bad name": KafkaError.TOPIC_EXCEPTION}
    assert _user(store.list_topics()) == ["compacted", "defaults", "replicated"]
    assert store.partitions("compacted") == 3
    assert store.partitions("defaults") == 1  # num.partitions
    assert store.topic_overrides("compacted") == {"cleanup.policy": "compact", "retention.ms": "3600000"}

    again = _outcomes(admin.create_topics([NewTopic("compacted", 1, 1)]))
    assert again == {"compacted": KafkaError.TOPIC_ALREADY_EXISTS}
    checked = _outcomes(admin.create_topics([NewTopic("defaults", 1, 1)], validate_only=True))
    assert checked == {"defaults": KafkaError.TOPIC_ALREADY_EXISTS}


def test_kafka_python_create_topics(kafka_server: RunningKafka, kp_admin: KafkaAdminClient) -> None:
    store = kafka_server.store
    assert store is not None
    kp_admin.create_topics({"kp": {"num_partitions": 2, "configs": {"segment.ms": "60000"}}})
    assert store.partitions("kp") == 2
    assert store.topic_overrides("kp") == {"segment.ms": "60000"}
    with pytest.raises(kerrors.TopicAlreadyExistsError):
        kp_admin.create_topics({"kp": {"num_partitions": 1}})
    with pytest.raises(kerrors.InvalidConfigurationError, match=r"max\.compaction\.lag\.ms"):
        kp_admin.create_topics({"lag": {"configs": {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}}})
    with pytest.raises(kerrors.InvalidRequestError, match="manual replica assignments"):
        kp_admin.create_topics({"manual": {"assignments": {0: [0]}}})
    with pytest.raises(kerrors.InvalidReplicationFactorError):
        kp_admin.create_topics({"rf0": {"num_partitions": 1, "replication_factor": 0}})
    with pytest.raises(kerrors.InvalidPartitionsError):
        kp_admin.create_topics({"p0": {"num_partitions": 0}})
    kp_admin.create_topics({"checked": {"num_partitions": 4}}, validate_only=True)
    assert _user(store.list_topics()) == ["kp"]


def test_create_partitions(kafka_server: RunningKafka, kp_admin: KafkaAdminClient) -> None:
    store = kafka_server.store
    assert store is not None
    store.create_topic("grow", partitions=2)
    _append(kafka_server, "grow", 0, 3)
    admin = _admin(kafka_server)
    assert _outcomes(admin.create_partitions([NewPartitions("grow", 9)], validate_only=True)) == {"grow": None}
    assert store.partitions("grow") == 2
    results = _outcomes(admin.create_partitions([NewPartitions("grow", 4), NewPartitions("missing", 4)]))
    assert results == {"grow": None, "missing": KafkaError.UNKNOWN_TOPIC_OR_PART}
    assert store.partitions("grow") == 4
    assert store.partition("grow", 0).log_end_offset == 3  # existing partitions keep their data
    md = admin.list_topics(topic="grow", timeout=10)
    assert sorted(md.topics["grow"].partitions) == [0, 1, 2, 3]
    assert _outcomes(admin.create_partitions([NewPartitions("grow", 3)])) == {"grow": KafkaError.INVALID_PARTITIONS}

    kp_admin.create_partitions({"grow": 6})
    assert store.partitions("grow") == 6
    with pytest.raises(kerrors.InvalidPartitionsError):
        kp_admin.create_partitions({"grow": 6})
    with pytest.raises(kerrors.InvalidRequestError, match="manual partition assignments"):
        kp_admin.create_partitions({"grow": {"count": 7, "assignments": [[0]]}})


def test_delete_records(kafka_server: RunningKafka, kp_admin: KafkaAdminClient) -> None:
    store = kafka_server.store
    assert store is not None
    store.create_topic("trim", partitions=2)
    store.create_topic("compact-only", config={"cleanup.policy": "compact"})
    _append(kafka_server, "trim", 0, 10)
    _append(kafka_server, "trim", 1, 4)
    _append(kafka_server, "compact-only", 0, 2)
    admin = _admin(kafka_server)
    results = _outcomes(admin.delete_records([TopicPartition("trim", 0, 6), TopicPartition("trim", 1, -1)]))
    assert {(tp.partition, r.low_watermark) for tp, r in results.items()} == {(0, 6), (1, 4)}
    assert store.partition("trim", 0).log_start_offset == 6
    failed = _outcomes(admin.delete_records([TopicPartition("trim", 0, 11)]))
    assert list(failed.values()) == [KafkaError.OFFSET_OUT_OF_RANGE]
    failed = _outcomes(admin.delete_records([TopicPartition("compact-only", 0, 1)]))
    assert list(failed.values()) == [KafkaError.POLICY_VIOLATION]
    assert store.partition("compact-only", 0).log_start_offset == 0

    deleted = kp_admin.delete_records({KTopicPartition("trim", 0): 8})
    assert deleted[KTopicPartition("trim", 0)]["low_watermark"] == 8
    with pytest.raises(kerrors.PolicyViolationError):
        kp_admin.delete_records({KTopicPartition("compact-only", 0): 1})


def test_delete_topics_by_name_and_id(kafka_server: RunningKafka, kp_admin: KafkaAdminClient) -> None:
    store = kafka_server.store
    assert store is not None
    assert OFFSETS in store.list_topics()  # the group coordinator's, from startup
    for name in ("one", "two", "three"):
        store.create_topic(name)
    admin = _admin(kafka_server)
    results = _outcomes(admin.delete_topics(["one", "missing", OFFSETS]))
    assert results == {"one": None, "missing": KafkaError.UNKNOWN_TOPIC_OR_PART, OFFSETS: KafkaError.INVALID_REQUEST}
    two_id = uuid.UUID(next(t["topic_id"] for t in kp_admin.describe_topics(["two"])))
    kp_admin.delete_topics([two_id])  # DeleteTopics v6 by topic id
    with pytest.raises(kerrors.UnknownTopicIdError):
        kp_admin.delete_topics([two_id])
    with pytest.raises(kerrors.UnknownTopicOrPartitionError):
        kp_admin.delete_topics(["two"])
    assert store.list_topics() == [OFFSETS, "three"]
    assert set(admin.list_topics(timeout=10).topics) == {OFFSETS, "three"}


def test_describe_cluster(kafka_server: RunningKafka, kp_admin: KafkaAdminClient) -> None:
    host, port = kafka_server.bootstrap.rsplit(":", 1)
    admin = _admin(kafka_server)  # kept referenced: a collected client fails its futures with _DESTROY
    cluster = admin.describe_cluster(include_authorized_operations=True).result(timeout=10)
    assert cluster.cluster_id == kafka_server.server.broker.cluster_id
    assert cluster.controller.id == 0
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(0, host, int(port))]
    assert cluster.authorized_operations  # no ACLs: every cluster operation is allowed
    described = kp_admin.describe_cluster()
    assert described["cluster_id"] == cluster.cluster_id
    assert described["controller_id"] == 0
    assert [(b["broker_id"], b["host"], b["port"]) for b in described["brokers"]] == [(0, host, int(port))]


@pytest.mark.s3
@pytest.mark.seaweedfs
@pytest.mark.parametrize("kafka_store_url", ["file", "seaweedfs"], indirect=True)
def test_admin_lifecycle(kafka_server: RunningKafka) -> None:
    """Create (with configs), grow, trim, reconfigure and delete one topic, on a local dir and on SeaweedFS."""
    store = kafka_server.store
    assert store is not None
    admin = _admin(kafka_server)
    assert _outcomes(admin.create_topics([NewTopic("life", 1, 1, config={"retention.ms": "86400000"})])) == {
        "life": None}
    _append(kafka_server, "life", 0, 5)
    assert _outcomes(admin.create_partitions([NewPartitions("life", 3)])) == {"life": None}
    trimmed = _outcomes(admin.delete_records([TopicPartition("life", 0, 2)]))
    assert [r.low_watermark for r in trimmed.values()] == [2]
    kafka_server.restart()
    admin = _admin(kafka_server)
    store = kafka_server.store
    assert store is not None
    md = admin.list_topics(topic="life", timeout=10)
    assert len(md.topics["life"].partitions) == 3
    assert store.partition("life", 0).log_start_offset == 2
    assert store.topic_overrides("life") == {"retention.ms": "86400000"}
    assert _outcomes(admin.delete_topics(["life"])) == {"life": None}
    assert _user(store.list_topics()) == []
