"""Topic administration: CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords, DescribeCluster.

Each request runs as one blocking call on the broker's pool (topic documents are manifest commits). Errors
are per topic (or per partition) with the store's message, mapped by :func:`~..errors.error_code`.
s3stream replicates through the bucket: ``replication_factor`` is accepted (-1 or any value >= 1) and
ignored, every topic reports one replica (this broker), and manual replica assignments are refused.
"""

from __future__ import annotations

import datetime
import uuid
from collections import Counter
from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i16, i32, i64

from s3stream.apps.kafka.api import ApiSpec, RequestContext
from s3stream.apps.kafka.broker import Broker
from s3stream.apps.kafka.errors import error_code
from s3stream.apps.kafka.messages import blocking, build, nested
from s3stream.apps.kafka.topics import (
    CLUSTER_OPERATIONS,
    OPERATIONS_NOT_REQUESTED,
    is_internal,
    resolve_topic_id,
)
from s3stream.apps.kafka.wire import response_class
from s3stream.base.errors import (
    InvalidConfig,
    InvalidPartitions,
    InvalidRequest,
    S3StreamError,
    TopicExists,
)
from s3stream.base.topic_config import effective_topic_config, topic_collision_name, validate_topic_name
from s3stream.manifest.catalog import MAX_PARTITIONS

__all__ = ["APIS", "InvalidReplicationFactor"]

_NO_TIME = datetime.timedelta(0)
_NO_ID = uuid.UUID(int=0)
#: DescribeConfigs/CreateTopics config sources
_DYNAMIC_TOPIC_CONFIG = i8(1)
_DEFAULT_CONFIG = i8(5)


class InvalidReplicationFactor(InvalidRequest):
    """A replication factor of 0 or below -1 (INVALID_REPLICATION_FACTOR)."""


def _outcome(exc: S3StreamError) -> tuple[ErrorCode, str]:
    if isinstance(exc, InvalidReplicationFactor):
        return ErrorCode.invalid_replication_factor, str(exc)
    return error_code(exc), str(exc)


def _duplicates(names: Iterable[Any]) -> set[Any]:
    return {name for name, n in Counter(names).items() if n > 1}


# -- CreateTopics (19) -----------------------------------------------------------------------------------


def _creatable(broker: Broker, topic: Any, validate_only: bool) -> tuple[int, dict[str, str]]:
    """Validate one CreatableTopic (and create it unless ``validate_only``): (partitions, overrides)."""
    name = validate_topic_name(topic.name)
    if topic.assignments:
        raise InvalidRequest("manual replica assignments are not supported: s3stream keeps every partition in "
                             "the bucket, led by this broker (give num_partitions instead)")
    partitions = broker.config.num_partitions if topic.num_partitions == -1 else int(topic.num_partitions)
    if partitions < 1 or partitions > MAX_PARTITIONS:
        raise InvalidPartitions(f"Number of partitions must be in [1, {MAX_PARTITIONS}] (or -1 for "
                                f"num.partitions), not {topic.num_partitions}")
    if topic.replication_factor != -1 and topic.replication_factor < 1:
        raise InvalidReplicationFactor("Replication factor must be larger than 0, or -1 to use the default "
                                       "(it is accepted and ignored: s3stream replicates through the bucket)")
    config: dict[str, str] = {}
    for entry in topic.configs:
        if entry.value is None:
            raise InvalidConfig(f"Null value not supported for topic configs: {entry.name}", key=entry.name)
        config[entry.name] = entry.value
    store = broker.store
    overrides = store.settings.new_topic_config(config)
    if validate_only:
        collision = topic_collision_name(name)
        for other in store.list_topics():
            if other == name:
                raise TopicExists(f"Topic '{name}' already exists.")
            if topic_collision_name(other) == collision:
                raise TopicExists(f"topic {name!r} collides with existing topic {other!r} "
                                  "('.' and '_' are interchangeable in metric names)")
    else:
        store.create_topic(name, partitions=partitions, config=config)
    return partitions, overrides


def _create_topics(broker: Broker, version: int, request: Any) -> Any:
    cls = response_class(19, version)
    result_cls = nested(cls, "CreatableTopicResult")
    config_cls = nested(cls, "CreatableTopicConfigs") if version >= 5 else None
    duplicates = _duplicates(t.name for t in request.topics)
    results = []
    for topic in request.topics:
        fields: dict[str, Any] = {"name": TopicName(topic.name), "topic_id": _NO_ID, "error_code": ErrorCode.none,
                                  "error_message": None, "topic_config_error_code": i16(0),
                                  "num_partitions": i32(-1), "replication_factor": i16(-1), "configs": None}
        try:
            if topic.name in duplicates:
                raise InvalidRequest(f"Create topics request from client has duplicate topic {topic.name!r}")
            partitions, overrides = _creatable(broker, topic, request.validate_only)
        except S3StreamError as exc:
            fields["error_code"], fields["error_message"] = _outcome(exc)
        else:
            fields.update(num_partitions=i32(partitions), replication_factor=i16(1))
            if not request.validate_only:
                fields["topic_id"] = broker.topic_uuid(topic.name)
            if config_cls is not None:
                fields["configs"] = tuple(
                    config_cls(name=key, value=value, read_only=False, is_sensitive=False,
                               config_source=_DYNAMIC_TOPIC_CONFIG if key in overrides else _DEFAULT_CONFIG)
                    for key, value in effective_topic_config(overrides).items())
        results.append(build(result_cls, **fields))
    return cls(throttle_time=_NO_TIME, topics=tuple(results))


# -- DeleteTopics (20) -----------------------------------------------------------------------------------


def _delete_one(broker: Broker, name: str) -> None:
    if is_internal(name):
        raise InvalidRequest(f"internal topic {name!r} cannot be deleted: the server keeps its state there")
    broker.store.delete_topic(name)


def _delete_topics(broker: Broker, version: int, request: Any) -> Any:
    cls = response_class(20, version)
    result_cls = nested(cls, "DeletableTopicResult")
    wanted: list[tuple[str | None, uuid.UUID | None]]
    if version >= 6:
        wanted = [(t.name, t.topic_id if t.topic_id not in (None, _NO_ID) else None) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    results = []
    for name, tid in wanted:
        error, message = ErrorCode.none, None
        if name is None and tid is not None:
            name = resolve_topic_id(broker, tid)
            if name is None:
                results.append(build(result_cls, name=None, topic_id=tid, error_code=ErrorCode.unknown_topic_id,
                                     error_message=f"unknown topic id {tid}"))
                continue
        try:
            if name is None:
                raise InvalidRequest("a topic to delete needs a name or a topic id")
            tid = broker.topic_uuid(name)
            _delete_one(broker, name)
        except S3StreamError as exc:
            error, message = _outcome(exc)
        results.append(build(result_cls, name=None if name is None else TopicName(name), topic_id=tid or _NO_ID,
                             error_code=error, error_message=message))
    return cls(throttle_time=_NO_TIME, responses=tuple(results))


# -- CreatePartitions (37) -------------------------------------------------------------------------------


def _grow(broker: Broker, topic: Any, validate_only: bool) -> None:
    if topic.assignments is not None:
        raise InvalidRequest("manual partition assignments are not supported: every partition is led by this "
                             "broker and kept in the bucket (give only the new count)")
    if validate_only:
        current = broker.store.partitions(topic.name)
        if topic.count <= current:
            raise InvalidPartitions(f"topic {topic.name!r} has {current} partitions: the new total {topic.count} "
                                    "must be larger (partitions are never removed)")
        if topic.count > MAX_PARTITIONS:
            raise InvalidPartitions(f"topic {topic.name!r}: {topic.count} partitions is more than the maximum "
                                    f"{MAX_PARTITIONS}")
        return
    broker.store.add_partitions(topic.name, int(topic.count))


def _create_partitions(broker: Broker, version: int, request: Any) -> Any:
    cls = response_class(37, version)
    result_cls = nested(cls, "CreatePartitionsTopicResult")
    duplicates = _duplicates(t.name for t in request.topics)
    results = []
    for topic in request.topics:
        error, message = ErrorCode.none, None
        try:
            if topic.name in duplicates:
                raise InvalidRequest(f"Create partitions request has duplicate topic {topic.name!r}")
            _grow(broker, topic, request.validate_only)
        except S3StreamError as exc:
            error, message = _outcome(exc)
        results.append(result_cls(name=topic.name, error_code=error, error_message=message))
    return cls(throttle_time=_NO_TIME, results=tuple(results))


# -- DeleteRecords (21) ----------------------------------------------------------------------------------


def _delete_records(broker: Broker, version: int, request: Any) -> Any:
    cls = response_class(21, version)
    partition_cls = nested(cls, "DeleteRecordsPartitionResult")
    topic_cls = nested(cls, "DeleteRecordsTopicResult")
    topics = []
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            error, low = ErrorCode.none, -1
            try:
                low = broker.store.partition(topic.name, int(p.partition_index)).delete_records(int(p.offset))
            except S3StreamError as exc:
                error = error_code(exc)
            parts.append(partition_cls(partition_index=p.partition_index, low_watermark=i64(low), error_code=error))
        topics.append(topic_cls(name=topic.name, partitions=tuple(parts)))
    return cls(throttle_time=_NO_TIME, topics=tuple(topics))


# -- DescribeCluster (60) --------------------------------------------------------------------------------


async def _describe_cluster(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    cls = response_class(60, ctx.api_version)
    cfg = broker.config
    host, port = cfg.advertised
    endpoint = int(getattr(request, "endpoint_type", 1))
    ops = CLUSTER_OPERATIONS if request.include_cluster_authorized_operations else OPERATIONS_NOT_REQUESTED
    fields: dict[str, Any] = {"throttle_time": _NO_TIME, "error_code": ErrorCode.none, "error_message": None,
                              "endpoint_type": i8(endpoint), "cluster_id": broker.cluster_id,
                              "controller_id": BrokerId(cfg.node_id), "brokers": (),
                              "cluster_authorized_operations": i32(ops)}
    if endpoint != 1:
        fields.update(error_code=ErrorCode.unsupported_endpoint_type, controller_id=BrokerId(-1),
                      error_message=f"endpoint type {endpoint} is not served: a Kafka server of s3stream is a "
                                    "broker (endpoint type 1) and has no separate controllers")
    else:
        node = build(nested(cls, "DescribeClusterBroker"), broker_id=BrokerId(cfg.node_id), host=host,
                     port=i32(port), rack=None, is_fenced=False)
        fields["brokers"] = (node,)
    return build(cls, **fields)


APIS = [
    ApiSpec(19, "CreateTopics", 2, 7, blocking(_create_topics)),
    ApiSpec(20, "DeleteTopics", 1, 6, blocking(_delete_topics)),
    ApiSpec(21, "DeleteRecords", 0, 2, blocking(_delete_records)),
    ApiSpec(37, "CreatePartitions", 0, 3, blocking(_create_partitions)),
    ApiSpec(60, "DescribeCluster", 0, 2, _describe_cluster),
]
