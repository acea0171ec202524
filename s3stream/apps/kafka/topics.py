"""Topics as the Kafka APIs see them: internal names, auto-creation, and the per-topic view Metadata reports.

Everything here is blocking (it reads topic documents): handlers call it through ``broker.run_blocking``.
One server leads every partition, so a topic's Kafka view is only its name, its 16-byte id and its count of
partitions; replication is the bucket's job (``replication_factor`` is accepted and ignored).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from s3stream.apps.kafka.broker import Broker
from s3stream.apps.kafka.errors import error_code
from s3stream.base.errors import InvalidTopic, S3StreamError, TopicExists, UnknownTopic
from s3stream.base.topic_config import validate_topic_name

__all__ = ["INTERNAL_TOPICS", "TopicView", "auto_create", "describe_topics", "is_internal", "resolve_topic_id"]

#: Kafka's internal topics: reported with ``is_internal`` and never auto-created by a Metadata request
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

#: ``topic_authorized_operations`` / ``cluster_authorized_operations`` when the client did not ask
OPERATIONS_NOT_REQUESTED = -(2**31)
# AclOperation codes (READ=3 ... ALTER_CONFIGS=11, IDEMPOTENT_WRITE=12): with no ACLs every client may do all
TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
CLUSTER_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))


def is_internal(name: str) -> bool:
    return name in INTERNAL_TOPICS


@dataclass(frozen=True, slots=True)
class TopicView:
    """One topic of a Metadata answer: an error, or its id and partition count."""

    name: str | None
    error: ErrorCode = ErrorCode.none
    topic_id: uuid.UUID | None = None
    partitions: int = 0

    @property
    def internal(self) -> bool:
        return self.name is not None and is_internal(self.name)


def _view(broker: Broker, name: str) -> TopicView:
    """The live topic ``name``; raises UnknownTopic."""
    partitions = broker.store.partitions(name)
    return TopicView(name, topic_id=broker.topic_uuid(name), partitions=partitions)


def auto_create(broker: Broker, name: str) -> TopicView:
    """Create ``name`` with ``num.partitions`` partitions unless it exists (a concurrent create is fine).

    The caller decided auto-creation is allowed; internal and invalid names are never created.
    """
    if is_internal(name):
        return TopicView(name, ErrorCode.unknown_topic_or_partition)
    try:
        validate_topic_name(name)
        broker.store.create_topic(name, partitions=broker.config.num_partitions)
    except TopicExists:
        pass  # created meanwhile by another client or server, or a colliding name (a_b vs a.b)
    except S3StreamError as exc:
        return TopicView(name, error_code(exc))
    try:
        return _view(broker, name)
    except UnknownTopic:  # TopicExists for a colliding name: Kafka refuses such a name as invalid
        return TopicView(name, ErrorCode.invalid_topic_exception)


def describe_topics(broker: Broker, names: Sequence[str] | None, *, allow_create: bool) -> list[TopicView]:
    """The views of ``names`` (None: every live topic), auto-creating missing ones when ``allow_create``."""
    if names is None:  # every topic: a request per topic on every all-topics Metadata was too many
        names = broker.store.list_topics(fresh=False)
        allow_create = False
    out = []
    for name in _unique(names):
        try:
            validate_topic_name(name)
        except InvalidTopic:
            out.append(TopicView(name, ErrorCode.invalid_topic_exception))
            continue
        try:
            out.append(_view(broker, name))
        except UnknownTopic:
            out.append(auto_create(broker, name) if allow_create
                       else TopicView(name, ErrorCode.unknown_topic_or_partition))
        except S3StreamError as exc:
            out.append(TopicView(name, error_code(exc)))
    return out


def resolve_topic_id(broker: Broker, topic_id: uuid.UUID) -> str | None:
    """The live topic whose 16-byte id is ``topic_id``, or None (a deleted and re-created name has a new id)."""
    try:
        name = broker.topic_name(topic_id)
        return name if broker.topic_uuid(name) == topic_id else None
    except UnknownTopic:
        return None


def _unique(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(names))
