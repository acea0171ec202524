"""Fetch (key 1, v4-18): record batches from an offset, long-polling until ``min_bytes`` or ``max_wait_ms``.

Each round reads every requested partition in one pool call (:meth:`DataPath.read`: the producers' own
batches for caught-up consumers, cached or freshly encoded batches otherwise), filling partitions in order
within the response's ``max_bytes``; only the first partition that returns data may exceed its budget
(at least one batch, as Kafka). With less than ``min_bytes`` and no error the fetch watches its partitions
and waits; an append to one of them wakes it (its fsync, or its acknowledgement), else the wait ends at
``max_wait_ms`` with one last read. Those re-reads skip the partitions that had nothing and saw no fsync
since (:meth:`DataPath.moves`): a wake-up by one partition does not look at every other. The whole fetch is
a :class:`~..api.Later` reply, so produce requests behind it on the connection are started meanwhile.

Topic ids from v13 (unknown: UNKNOWN_TOPIC_ID). Fetch sessions (KIP-227) are declined: every response
has ``session_id`` 0, which clients take as "full fetches only"; a request naming a session gets
FETCH_SESSION_ID_NOT_FOUND. ``high_watermark`` (and ``last_stable_offset``: no transactions) is the
partition's high watermark: records a crash of this process could still lose are not served yet. An offset
past the log end is OFFSET_OUT_OF_RANGE. Records are never null (empty bytes: librdkafka rejects null).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from s3stream.apps.kafka.api import ApiSpec, Later, RequestContext
from s3stream.apps.kafka.broker import Broker
from s3stream.apps.kafka.errors import error_code
from s3stream.apps.kafka.messages import build, nested
from s3stream.apps.kafka.records.batch import Batch, Spliced
from s3stream.apps.kafka.records.datapath import DataPath, PartitionRead, topic_config
from s3stream.apps.kafka.records.signals import Watch
from s3stream.apps.kafka.topics import resolve_topic_id
from s3stream.apps.kafka.wire import SplicedRecords, response_class
from s3stream.base.errors import S3StreamError
from s3stream.partition.log import PartitionLog

__all__ = ["APIS"]

log = logging.getLogger(__name__)

_MAX_WAIT_S = 60.0  # a client asking for longer still gets an answer within a minute


@dataclass(slots=True)
class _Partition:
    index: int
    offset: int
    max_bytes: int
    plog: PartitionLog | None = None
    read: PartitionRead = field(default_factory=PartitionRead)
    moves: int | None = None  # DataPath.moves() before the last read


@dataclass(slots=True)
class _Topic:
    name: str | None
    topic_id: uuid.UUID | None
    partitions: list[_Partition]
    error: ErrorCode = ErrorCode.none
    log_append_time: bool = False


async def _handle(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    return Later(_fetch(broker, ctx.api_version, request))


async def _fetch(broker: Broker, version: int, request: Any) -> Any:
    if version >= 7 and int(request.session_id) != 0:
        return _response(version, [], ErrorCode.fetch_session_id_not_found)
    topics = [_Topic(getattr(t, "topic", None), getattr(t, "topic_id", None),
                     [_Partition(int(p.partition), int(p.fetch_offset), int(p.partition_max_bytes))
                      for p in t.partitions]) for t in request.topics]
    datapath = broker.component(DataPath)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(request.max_wait.total_seconds(), _MAX_WAIT_S)
    min_bytes, max_bytes = int(request.min_bytes), int(getattr(request, "max_bytes", 2**31 - 1))

    def watch() -> Watch:  # registered before a read, so an append landing after that read still wakes us
        return datapath.signals.watch((t.name, p.index) for t in topics if t.name for p in t.partitions)

    watching = watch() if all(t.name for t in topics) else None
    timed_out = False
    try:
        total, failed = await broker.run_blocking(_read_all, broker, topics, max_bytes, resolve=True)
        while total < min_bytes and not failed and loop.time() < deadline:
            if watching is None:  # topic ids resolved by the first read: watch, then read again
                watching = watch()
            elif await watching.wait(deadline - loop.time()):
                watching.close()
                watching = watch()
            else:
                timed_out = True
                break
            total, failed = await broker.run_blocking(_read_all, broker, topics, max_bytes, resolve=False)
    finally:
        if watching is not None:
            watching.close()
    if timed_out:  # max_wait_ms is over: one last read catches appends made around this server
        await broker.run_blocking(_read_all, broker, topics, max_bytes, resolve=False)
    return _response(version, topics, ErrorCode.none)


def _read_all(broker: Broker, topics: list[_Topic], max_bytes: int, *, resolve: bool) -> tuple[int, bool]:
    """Read every partition in order within ``max_bytes``; (bytes read, whether a partition failed)."""
    if resolve:
        for t in topics:
            _resolve(broker, t)
    datapath = broker.component(DataPath)
    total, failed, first = 0, False, True
    for t in topics:
        for p in t.partitions:
            if t.error != ErrorCode.none:
                p.read = PartitionRead(error=t.error)
            elif p.plog is None:
                p.read = PartitionRead(error=ErrorCode.unknown_topic_or_partition)
            elif not resolve and _unchanged(datapath, p):
                pass  # nothing read last time and no fsync since: nothing new (the long poll's re-reads)
            else:
                budget = min(p.max_bytes, max_bytes - total)
                p.moves = datapath.moves(p.plog)
                try:
                    p.read = datapath.read(p.plog, p.offset, budget, first=first, log_append_time=t.log_append_time)
                except S3StreamError as exc:
                    p.read = PartitionRead(error=error_code(exc))
                except Exception:  # a bug fails this partition, never the connection
                    log.exception("fetch from %s failed", p.plog)
                    p.read = PartitionRead(error=ErrorCode.unknown_server_error)
            size = p.read.nbytes
            total += size
            first = first and size == 0
            failed = failed or p.read.error != ErrorCode.none
    return total, failed


def _unchanged(datapath: DataPath, p: _Partition) -> bool:
    r = p.read
    return (p.plog is not None and p.moves is not None and r.error == ErrorCode.none and not r.batches
            and datapath.moves(p.plog) == p.moves)


def _resolve(broker: Broker, topic: _Topic) -> None:
    if topic.name is None and topic.topic_id is not None:
        topic.name = resolve_topic_id(broker, topic.topic_id)
        if topic.name is None:
            topic.error = ErrorCode.unknown_topic_id
            return
    if topic.name is None:
        topic.error = ErrorCode.unknown_topic_or_partition
        return
    try:
        topic.log_append_time = topic_config(broker, topic.name).message_timestamp_type == "LogAppendTime"
    except S3StreamError as exc:
        topic.error = error_code(exc)
        return
    for p in topic.partitions:
        try:
            p.plog = broker.store.partition(topic.name, p.index)
        except S3StreamError:
            p.plog = None


def _response(version: int, topics: list[_Topic], error: ErrorCode) -> Any:
    cls = response_class(1, version)
    topic_cls, part_cls = nested(cls, "FetchableTopicResponse"), nested(cls, "PartitionData")
    responses = []
    for t in topics:
        parts = []
        for p in t.partitions:
            r = p.read
            parts.append(build(
                part_cls, partition_index=i32(p.index), error_code=r.error, high_watermark=i64(r.high_watermark),
                last_stable_offset=i64(r.high_watermark), log_start_offset=i64(r.log_start_offset),
                aborted_transactions=(), preferred_read_replica=i32(-1), records=SplicedRecords(_parts(r.batches))))
        responses.append(build(topic_cls, topic=t.name or "", topic_id=t.topic_id, partitions=tuple(parts)))
    return build(cls, throttle_time=datetime.timedelta(0), error_code=error, session_id=i32(0),
                 responses=tuple(responses))


def _parts(batches: list[Batch]) -> list[bytes | bytearray | memoryview]:
    """The buffers making up ``batches``, in order."""
    out: list[bytes | bytearray | memoryview] = []
    for b in batches:
        if type(b) is Spliced:
            out.extend(b.parts)
        else:
            out.append(b)  # type: ignore[arg-type]
    return out


APIS = [ApiSpec(1, "Fetch", 4, 18, _handle)]
