"""ListOffsets (key 2, v1-11): the offset for a timestamp, or for the special ones Kafka defines.

* -2 earliest: the log start offset; -4 earliest-local (v8+): the same (every offset is in the bucket);
* -1 latest: the high watermark, as consumers see it in Fetch (no transactions: ``isolation_level``
  changes nothing);
* -3 max timestamp (v7+): the first record with the largest timestamp of the log;
* -5 latest-tiered (v9+) and -6 earliest-pending-upload (v11): no such tiers here, offset -1;
* any other value: the earliest offset whose timestamp is at least it (none: offset -1, timestamp -1).

Leader epoch 0 (Metadata's). Per partition errors: UNKNOWN_TOPIC_OR_PARTITION, the store's as mapped.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

import pyarrow.compute as pc
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from s3stream.apps.kafka.api import ApiSpec, RequestContext
from s3stream.apps.kafka.broker import Broker
from s3stream.apps.kafka.errors import error_code
from s3stream.apps.kafka.messages import build, nested
from s3stream.apps.kafka.records.batch import LEADER_EPOCH
from s3stream.apps.kafka.wire import response_class
from s3stream.base.errors import S3StreamError
from s3stream.partition.log import PartitionLog

__all__ = ["APIS"]

log = logging.getLogger(__name__)

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -1, -2, -3, -4, -5, -6

#: (error, timestamp, offset) of one partition
Answer = tuple[ErrorCode, int, int]


async def _handle(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    answers = await broker.run_blocking(_answers, broker, request)
    cls = response_class(2, ctx.api_version)
    topic_cls, part_cls = nested(cls, "ListOffsetsTopicResponse"), nested(cls, "ListOffsetsPartitionResponse")
    topics = []
    for t, parts in zip(request.topics, answers, strict=True):
        out = []
        for p, (error, timestamp, offset) in zip(t.partitions, parts, strict=True):
            ok = error == ErrorCode.none
            out.append(build(part_cls, partition_index=p.partition_index, error_code=error,
                             timestamp=i64(timestamp), offset=i64(offset),
                             leader_epoch=i32(LEADER_EPOCH if ok and offset >= 0 else -1)))
        topics.append(build(topic_cls, name=t.name, partitions=tuple(out)))
    return build(cls, topics=tuple(topics), throttle_time=datetime.timedelta(0))


def _answers(broker: Broker, request: Any) -> list[list[Answer]]:
    out = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            try:
                plog = broker.store.partition(t.name, int(p.partition_index))
                parts.append(_answer(plog, int(p.timestamp)))
            except S3StreamError as exc:
                parts.append((error_code(exc), -1, -1))
            except Exception:  # a bug fails this partition, never the connection
                log.exception("ListOffsets for %s/%s failed", t.name, p.partition_index)
                parts.append((ErrorCode.unknown_server_error, -1, -1))
        out.append(parts)
    return out


def _answer(plog: PartitionLog, timestamp: int) -> Answer:
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return ErrorCode.none, -1, plog.log_start_offset
    if timestamp == LATEST:
        return ErrorCode.none, -1, plog.high_watermark
    if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        return ErrorCode.none, -1, -1
    if timestamp == MAX_TIMESTAMP:
        return _max_timestamp(plog)
    offset = plog.offset_for_timestamp(timestamp)
    if offset is None:
        return ErrorCode.none, -1, -1
    return ErrorCode.none, _timestamp_at(plog, offset), offset


def _max_timestamp(plog: PartitionLog) -> Answer:
    """The first record carrying the log's largest timestamp (segments know their max; the index finds it)."""
    start = plog.log_start_offset
    live = [s for s in plog.segments() if s.last_offset >= start and s.record_count > 0]
    if not live:
        return ErrorCode.none, -1, -1
    top = max(s.max_timestamp for s in live)
    offset = plog.offset_for_timestamp(top)
    if offset is None:
        return ErrorCode.none, -1, -1
    return ErrorCode.none, top, offset


def _timestamp_at(plog: PartitionLog, offset: int) -> int:
    table = plog.read_arrow(offset, max_records=1)
    if not table.num_rows:
        return -1
    return int(pc.max(table.column("timestamp")).as_py())


APIS = [ApiSpec(2, "ListOffsets", 1, 11, _handle)]
