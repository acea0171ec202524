"""DescribeConfigs, AlterConfigs (legacy: replaces the override set) and IncrementalAlterConfigs with real clients."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from kafka.admin import ConfigResource as KConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

from s3stream.base.topic_config import TOPIC_CONFIGS
from tests.kafka.conftest import RunningKafka


def _admin(server: RunningKafka) -> AdminClient:
    return AdminClient({"bootstrap.servers": server.bootstrap, "socket.timeout.ms": 5000})


@pytest.fixture
def kp_admin(kafka_server: RunningKafka) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=kafka_server.bootstrap, request_timeout_ms=10_000)
    try:
        yield client
    finally:
        client.close()


def _result(futures: dict[Any, Any]) -> Any:
    """The one future's result, or the Kafka error (code, message) it failed with."""
    (future,) = futures.values()
    try:
        return future.result(timeout=10)
    except KafkaException as exc:
        return exc.args[0].code(), exc.args[0].str()


def _incremental(admin: AdminClient, topic: str, *entries: tuple[str, str | None, AlterConfigOpType],
                 validate_only: bool = False) -> Any:
    configs = [ConfigEntry(name, value, incremental_operation=op) for name, value, op in entries]
    return _result(admin.incremental_alter_configs([ConfigResource("topic", topic, incremental_configs=configs)],
                                                   validate_only=validate_only))


def _describe(admin: AdminClient, kind: str, name: str) -> dict[str, Any]:
    result = _result(admin.describe_configs([ConfigResource(kind, name)]))
    assert isinstance(result, dict), result
    return result


def test_describe_topic_configs(kafka_server: RunningKafka, kp_admin: KafkaAdminClient) -> None:
    store = kafka_server.store
    assert store is not None
    store.create_topic("described", config={"retention.ms": "3600000", "cleanup.policy": "compact,delete"})
    admin = _admin(kafka_server)
    entries = _describe(admin, "topic", "described")
    assert set(entries) == set(TOPIC_CONFIGS)  # every effective key, defaults included
    retention = entries["retention.ms"]
    assert (retention.value, retention.source, retention.is_default, retention.is_read_only) == (
        "3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value, False, False)
    assert [(s.name, s.value, s.source) for s in retention.synonyms.values()] == [
        ("retention.ms", "3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value),
        ("log.retention.ms", "604800000", ConfigSource.DEFAULT_CONFIG.value)]
    segment = entries["segment.bytes"]
    assert (segment.value, segment.source, segment.is_default) == ("1073741824", ConfigSource.DEFAULT_CONFIG.value,
                                                                   True)
    assert entries["cleanup.policy"].value == "compact,delete"
    assert _result(admin.describe_configs([ConfigResource("topic", "missing")]))[0] == (
        KafkaError.UNKNOWN_TOPIC_OR_PART)

    filtered = kp_admin.describe_configs(
        [KConfigResource(ConfigResourceType.TOPIC, "described", {"retention.ms": None, "preallocate": None})],
        config_filter="all")
    got = filtered["topic"]["described"]
    assert set(got) == {"retention.ms", "preallocate"}  # configuration_keys honoured
    assert (got["retention.ms"]["config_type"], got["preallocate"]["config_type"]) == ("LONG", "BOOLEAN")
    modified = kp_admin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, "described")])
    assert set(modified["topic"]["described"]) == {"retention.ms", "cleanup.policy"}


@pytest.mark.parametrize("kafka_options", [{"num_partitions": 3, "auto_create_topics_enable": False}])
def test_describe_broker_configs(kafka_server: RunningKafka, kp_admin: KafkaAdminClient) -> None:
    entries = _describe(_admin(kafka_server), "broker", "0")
    for key in ("auto.create.topics.enable", "num.partitions", "log.retention.ms", "log.cleanup.policy",
                "message.max.bytes", "default.replication.factor", "advertised.listeners", "broker.id"):
        assert entries[key].is_read_only, key
    assert (entries["num.partitions"].value, entries["num.partitions"].source) == (
        "3", ConfigSource.STATIC_BROKER_CONFIG.value)
    assert entries["auto.create.topics.enable"].value == "false"
    assert (entries["log.retention.ms"].value, entries["log.retention.ms"].source) == (
        "604800000", ConfigSource.DEFAULT_CONFIG.value)
    assert entries["advertised.listeners"].value == f"PLAINTEXT://{kafka_server.bootstrap}"
    described = kp_admin.describe_configs([KConfigResource(ConfigResourceType.BROKER, "0")], config_filter="all")
    assert described["broker"]["0"]["num.partitions"]["value"] == "3"


def test_incremental_alter_configs(kafka_server: RunningKafka) -> None:
    store = kafka_server.store
    assert store is not None
    store.create_topic("inc", config={"segment.ms": "60000"})
    admin = _admin(kafka_server)
    set_, delete = AlterConfigOpType.SET, AlterConfigOpType.DELETE
    append, subtract = AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT

    assert _incremental(admin, "inc", ("retention.ms", "1000", set_), validate_only=True) is None
    assert store.topic_overrides("inc") == {"segment.ms": "60000"}
    assert _incremental(admin, "inc", ("retention.ms", "1000", set_), ("segment.ms", None, delete),
                        ("cleanup.policy", "compact", append)) is None
    assert store.topic_overrides("inc") == {"retention.ms": "1000", "cleanup.policy": "delete,compact"}
    assert _incremental(admin, "inc", ("cleanup.policy", "delete", subtract)) is None
    assert store.topic_config("inc")["cleanup.policy"] == "compact"

    code, message = _incremental(admin, "inc", ("retention.ms", "-5", set_))
    assert code == KafkaError.INVALID_CONFIG
    assert "retention.ms" in message
    code, message = _incremental(admin, "inc", ("retention.ms", "10", append))
    assert (code, message) == (KafkaError.INVALID_CONFIG, "Config value append is not allowed for config key: "
                                                          "retention.ms")
    code, _ = _incremental(admin, "inc", ("no.such.key", "1", set_))
    assert code == KafkaError.INVALID_CONFIG
    assert _incremental(admin, "inc", ("retention.ms", "-1", set_), validate_only=True) is None
    assert _incremental(admin, "gone", ("retention.ms", "1", set_))[0] == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert store.topic_overrides("inc") == {"retention.ms": "1000", "cleanup.policy": "compact"}

    broker = _result(admin.incremental_alter_configs([ConfigResource(
        "broker", "0", incremental_configs=[ConfigEntry("num.partitions", "3", incremental_operation=set_)])]))
    assert broker[0] == KafkaError.INVALID_REQUEST
    assert "read-only" in broker[1]


def test_legacy_alter_configs_replaces_the_override_set(kafka_server: RunningKafka,
                                                        kp_admin: KafkaAdminClient) -> None:
    store = kafka_server.store
    assert store is not None
    store.create_topic("legacy", config={"segment.ms": "60000", "retention.ms": "1000"})
    admin = _admin(kafka_server)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # confluent-kafka deprecates the legacy API
        futures = admin.alter_configs([ConfigResource("topic", "legacy", set_config={"retention.ms": "2000"})])
        assert _result(futures) is None
        assert store.topic_overrides("legacy") == {"retention.ms": "2000"}  # segment.ms went back to default
        futures = admin.alter_configs([ConfigResource("topic", "legacy", set_config={"retention.ms": "x"})],
                                      validate_only=True)
        assert _result(futures)[0] == KafkaError.INVALID_CONFIG
        futures = admin.alter_configs([ConfigResource("topic", "nope", set_config={"retention.ms": "5"})])
        assert _result(futures)[0] == KafkaError.UNKNOWN_TOPIC_OR_PART

    kp_admin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "legacy", {"cleanup.policy": "compact"})],
                           incremental=False)
    # kafka-python describes the dynamic overrides first and resends them, knowing the legacy API replaces all
    assert store.topic_overrides("legacy") == {"cleanup.policy": "compact", "retention.ms": "2000"}
    kp_admin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "legacy", {"retention.ms": "5"})],
                           validate_only=True, incremental=False)
    assert store.topic_overrides("legacy") == {"cleanup.policy": "compact", "retention.ms": "2000"}


def test_removed_overrides_fall_back_to_the_store_topic_defaults(kafka_store_url: str, tmp_path: Path) -> None:
    server = RunningKafka(kafka_store_url, tmp_path / "wal", {"default_topic_config": {"retention.ms": "7000"}},
                          {}).start()
    try:
        store = server.store
        assert store is not None
        admin = _admin(server)
        entries = _describe(admin, "broker", "0")
        assert (entries["log.retention.ms"].value, entries["log.retention.ms"].source) == (
            "7000", ConfigSource.STATIC_BROKER_CONFIG.value)
        store.create_topic("fallback", config={"retention.ms": "100"})
        assert _incremental(admin, "fallback", ("retention.ms", None, AlterConfigOpType.DELETE)) is None
        assert store.topic_config("fallback")["retention.ms"] == "7000"
    finally:
        server.stop()
