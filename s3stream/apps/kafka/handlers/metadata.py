"""Metadata (key 3): the one broker, the cluster id, and every requested topic led by this broker.

Each server reports itself as the only broker and the leader (epoch 0) of every partition, its only replica
and in-sync replica: the bucket, not broker replicas, holds the data. Missing topics are auto-created when
``auto.create.topics.enable`` is on and the client allows it (v4+), never internal or invalid names.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32

from s3stream.apps.kafka.api import ApiSpec, RequestContext
from s3stream.apps.kafka.broker import Broker
from s3stream.apps.kafka.messages import build, nested
from s3stream.apps.kafka.topics import (
    CLUSTER_OPERATIONS,
    OPERATIONS_NOT_REQUESTED,
    TOPIC_OPERATIONS,
    TopicView,
    describe_topics,
    resolve_topic_id,
)
from s3stream.apps.kafka.wire import response_class

__all__ = ["APIS"]

_NO_ID = uuid.UUID(int=0)


def _requested(broker: Broker, version: int, request: Any) -> tuple[list[str] | None, list[TopicView]]:
    """(names to describe or None for all, views of topic ids that match no live topic). Blocking."""
    topics = request.topics
    if topics is None or (version == 0 and not topics):  # v0: an empty list means every topic
        return None, []
    names: list[str] = []
    unknown_ids: list[TopicView] = []
    for t in topics:
        name = t.name
        tid = getattr(t, "topic_id", None)
        if name is None and tid is not None and tid != _NO_ID:
            name = resolve_topic_id(broker, tid)
            if name is None:
                unknown_ids.append(TopicView(None, ErrorCode.unknown_topic_id, topic_id=tid))
                continue
        if name is None:
            unknown_ids.append(TopicView(None, ErrorCode.invalid_request, topic_id=tid))
            continue
        names.append(name)
    return names, unknown_ids


def _lookup(broker: Broker, version: int, request: Any, allow_create: bool) -> list[TopicView]:
    names, unresolved = _requested(broker, version, request)
    return describe_topics(broker, names, allow_create=allow_create) + unresolved


async def _handle(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    cfg = broker.config
    allow_create = cfg.auto_create_topics_enable and bool(getattr(request, "allow_auto_topic_creation", True))
    views = await broker.run_blocking(_lookup, broker, ctx.api_version, request, allow_create)

    cls = response_class(3, ctx.api_version)
    node = BrokerId(cfg.node_id)
    host, port = cfg.advertised
    broker_entry = build(nested(cls, "MetadataResponseBroker"), node_id=node, host=host, port=i32(port), rack=None)
    partition_cls = nested(cls, "MetadataResponsePartition")
    topic_cls = nested(cls, "MetadataResponseTopic")
    topic_ops = i32(TOPIC_OPERATIONS if getattr(request, "include_topic_authorized_operations", False)
                    else OPERATIONS_NOT_REQUESTED)
    cluster_ops = i32(CLUSTER_OPERATIONS if getattr(request, "include_cluster_authorized_operations", False)
                      else OPERATIONS_NOT_REQUESTED)
    replicas = (node,)
    topics = []
    for view in views:
        parts = tuple(build(partition_cls, error_code=ErrorCode.none, partition_index=i32(i), leader_id=node,
                            leader_epoch=i32(0), replica_nodes=replicas, isr_nodes=replicas, offline_replicas=())
                      for i in range(view.partitions))
        topics.append(build(topic_cls, error_code=view.error,
                            name=None if view.name is None else TopicName(view.name),
                            topic_id=view.topic_id or _NO_ID, is_internal=view.internal, partitions=parts,
                            topic_authorized_operations=topic_ops))
    return build(cls, throttle_time=datetime.timedelta(0), brokers=(broker_entry,), cluster_id=broker.cluster_id,
                 controller_id=node, topics=tuple(topics), cluster_authorized_operations=cluster_ops,
                 error_code=ErrorCode.none)


APIS = [ApiSpec(3, "Metadata", 0, 13, _handle)]
