"""Produce (key 0, v3-13): check each partition's batch, append it, answer once acknowledged.

In the pool, every partition's batch is checked (one v2 batch, CRC32C, bounds: :mod:`..records.batch`),
decoded into Arrow columns (:mod:`..records.decode`) and its append *started* with ``append_arrow_async``.
The handler only queues that job (:class:`..records.order.OrderedJobs`, on the event loop, so in arrival
order; the queued jobs of pipelined requests run one after the other in one pool call) and returns, so
appends keep the order the client sent them in. The waits are the :class:`~..api.Later` reply: acks=1 is
acknowledged from the local WAL, acks=all (-1) per ``kafka.acks.all`` (the bucket by default), acks=0 gets no
response at all. Once fsynced in the local WAL the batch goes to the tail cache (the store's ``on_wal`` hook,
before an acks=all acknowledgement from the bucket); acknowledged, it wakes long-polling fetches
(:class:`~..records.datapath.DataPath`).

Errors are per partition (Kafka's): UNKNOWN_TOPIC_OR_PARTITION, CORRUPT_MESSAGE (CRC, bounds),
INVALID_RECORD (not one v2 batch; a null key on a compacted topic, with ``record_errors`` from v8),
INVALID_TIMESTAMP, MESSAGE_TOO_LARGE, UNSUPPORTED_COMPRESSION_TYPE, NOT_LEADER_OR_FOLLOWER (fenced), the
idempotence errors, and REQUEST_TIMED_OUT when an acks=all wait outlasts the request's ``timeout_ms``.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
import threading
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from s3stream.apps.kafka.api import ApiSpec, Later, RequestContext
from s3stream.apps.kafka.broker import Broker
from s3stream.apps.kafka.errors import error_code
from s3stream.apps.kafka.messages import build, nested
from s3stream.apps.kafka.records.batch import BatchHeader, InvalidTxnState, parse_produced
from s3stream.apps.kafka.records.datapath import DataPath, topic_config
from s3stream.apps.kafka.records.decode import decode_batch, decoded_limit
from s3stream.apps.kafka.records.order import OrderedJobs
from s3stream.apps.kafka.topics import resolve_topic_id
from s3stream.apps.kafka.wire import response_class
from s3stream.base.errors import RecordTooLarge, S3StreamError
from s3stream.base.producer import ProducerBatch
from s3stream.base.records import AppendResult
from s3stream.base.topic_config import TopicConfig
from s3stream.partition.log import PartitionLog

__all__ = ["APIS"]

log = logging.getLogger(__name__)

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@dataclass(slots=True)
class _Partition:
    index: int
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    record_errors: tuple[int, ...] = ()
    plog: PartitionLog | None = None
    table: pa.RecordBatch | None = None
    producer: ProducerBatch | None = None
    header: BatchHeader | None = None
    data: bytes | None = None
    future: Future[AppendResult] | None = None
    result: AppendResult | None = None
    log_start_offset: int = -1
    log_append: bool = False
    log_append_time: int = -1

    def fail(self, code: ErrorCode, message: str | None = None, record_errors: tuple[int, ...] = ()) -> None:
        self.error, self.message, self.record_errors = code, message, record_errors


@dataclass(slots=True)
class _Topic:
    name: str | None
    topic_id: uuid.UUID | None
    partitions: list[_Partition] = field(default_factory=list)


async def _handle(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    acks = int(request.acks)
    version = ctx.api_version
    if acks not in (0, 1, -1):
        return _response(version, [_Topic(*_topic_key(t), [_Partition(int(p.index), ErrorCode.invalid_required_acks)
                                                          for p in t.partition_data]) for t in request.topic_data])
    ack = "wal" if acks == 1 else broker.config.acks_all
    datapath = broker.component(DataPath)  # on the loop: components are built there
    started = broker.component(OrderedJobs).run(functools.partial(_start, broker, datapath, version, request, ack))
    timeout = request.timeout.total_seconds() if acks == -1 else 0.0
    finish = _finish(broker, started, timeout)
    if acks == 0:
        datapath.background(finish)
        return None
    return Later(_respond(version, finish))


def _topic_key(topic: Any) -> tuple[str | None, uuid.UUID | None]:
    return getattr(topic, "name", None), getattr(topic, "topic_id", None)


# -- in the pool: check, decode, start the appends ------------------------------------------------------


def _start(broker: Broker, datapath: DataPath, version: int, request: Any, ack: str) -> list[_Topic]:
    """Check and decode every batch, then submit each partition's append (after the requests before it)."""
    topics = _prepare(broker, version, request)
    for part in (p for t in topics for p in t.partitions):
        if part.table is None or part.plog is None:
            continue
        try:
            part.log_start_offset = part.plog.log_start_offset
            hook = None
            if not part.log_append and part.header is not None and part.data is not None:
                hook = functools.partial(datapath.in_wal, part.plog, part.header, part.data)
            part.future = part.plog.append_arrow_async(part.table, ack=ack, producer=part.producer, on_wal=hook)
        except S3StreamError as exc:
            part.fail(error_code(exc), str(exc))
        except Exception as exc:  # a bug must fail this partition, never the connection
            log.exception("produce to %s failed", part.plog)
            part.fail(ErrorCode.unknown_server_error, type(exc).__name__)
        finally:
            part.table = None
    return topics


def _prepare(broker: Broker, version: int, request: Any) -> list[_Topic]:
    topics: list[_Topic] = []
    for t in request.topic_data:
        name, topic_id = _topic_key(t)
        topic = _Topic(name, topic_id)
        topics.append(topic)
        if name is None and topic_id is not None:
            name = resolve_topic_id(broker, topic_id)
            if name is None:
                topic.partitions = [_Partition(int(p.index), ErrorCode.unknown_topic_id) for p in t.partition_data]
                continue
        for p in t.partition_data:
            part = _Partition(int(p.index))
            topic.partitions.append(part)
            try:
                _prepare_partition(broker, version, name or "", part, p.records)
            except InvalidTxnState as exc:
                part.fail(ErrorCode.invalid_txn_state, str(exc))
            except S3StreamError as exc:
                part.fail(error_code(exc), str(exc))
            except Exception as exc:  # a bug must fail this partition, never the connection
                log.exception("produce to %s/%d failed", name, part.index)
                part.fail(ErrorCode.unknown_server_error, type(exc).__name__)
    return topics


def _prepare_partition(broker: Broker, version: int, topic: str, part: _Partition, records: bytes | None) -> None:
    plog = broker.store.partition(topic, part.index)
    cfg = topic_config(broker, topic)
    header = parse_produced(records, produce_version=version)
    assert records is not None
    if len(records) > cfg.max_message_bytes:
        raise RecordTooLarge(f"the batch is {len(records)} bytes, larger than max.message.bytes="
                             f"{cfg.max_message_bytes}")
    decoded = decode_batch(records, header, limit=decoded_limit(cfg.max_message_bytes))
    table = decoded.table
    if cfg.compact and (keys := table.column("key")).null_count:
        nulls = tuple(int(i) for i in np.flatnonzero(keys.is_null().to_numpy(zero_copy_only=False)))
        part.fail(ErrorCode.invalid_record, "compacted topic cannot accept message without key", nulls)
        return
    log_append = cfg.message_timestamp_type == "LogAppendTime"
    if not log_append and (bad := _bad_timestamps(table.column("timestamp"), cfg, broker.clock.now_ms())):
        part.fail(ErrorCode.invalid_timestamp, "timestamp out of the acceptable range", bad)
        return
    producer = None
    if header.producer_id >= 0:
        producer = ProducerBatch(header.producer_id, header.producer_epoch, header.base_sequence, header.record_count)
    part.plog, part.header, part.data, part.log_append = plog, header, records, log_append
    part.table, part.producer = table, producer


def _bad_timestamps(stamps: Any, cfg: TopicConfig, now: int) -> tuple[int, ...]:
    """Indices of CreateTime timestamps outside ``message.timestamp.{before,after}.max.ms`` (or negative)."""
    ts = stamps.to_numpy()
    bad = (ts < 0) | (now - ts > cfg.message_timestamp_before_max_ms) | (ts - now > cfg.message_timestamp_after_max_ms)
    return tuple(int(i) for i in np.flatnonzero(bad)) if bad.any() else ()


# -- on the loop: wait for the acks ---------------------------------------------------------------------


async def _finish(broker: Broker, started: asyncio.Future[list[_Topic]], wait_s: float) -> list[_Topic]:
    """Wait for every started append (at most ``wait_s`` seconds when positive), then record the outcome."""
    topics = await asyncio.shield(started)  # a closed connection must not cancel a job others wait for
    parts = [p for t in topics for p in t.partitions if p.future is not None]
    if not parts:
        return topics
    futures = [p.future for p in parts if p.future is not None]
    await all_done(futures, wait_s if wait_s > 0 else None)
    datapath = broker.component(DataPath)
    appended = []
    for part in parts:
        fut = part.future
        assert fut is not None
        if not fut.done():  # an acks=all wait past timeout_ms: the append may still land (as in Kafka)
            part.fail(ErrorCode.request_timed_out, "the append was not acknowledged within timeout_ms")
            fut.add_done_callback(_consume)
            continue
        exc = fut.exception()
        if exc is not None:
            part.fail(error_code(exc), str(exc))
            if not isinstance(exc, S3StreamError):
                log.error("append to %s failed", part.plog, exc_info=exc)
            continue
        part.result = fut.result()
        assert part.plog is not None
        assert part.header is not None
        datapath.appended(part.plog, part.header)
        if part.log_append:
            appended.append(part)
    if appended:
        await broker.run_blocking(_read_append_times, appended)
    return topics


def all_done(futures: list[Future[Any]], timeout_s: float | None = None) -> asyncio.Future[None]:
    """An event-loop future done once every one of ``futures`` is, or after ``timeout_s``: one wake-up of the
    loop, not one each (and no task, as ``asyncio.wait_for`` would make)."""
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()
    if timeout_s is not None:
        timer = loop.call_later(timeout_s, _resolve, waiter)
        waiter.add_done_callback(lambda _w: timer.cancel())
    left = [len(futures)]
    lock = threading.Lock()

    def one_done(_fut: Future[Any]) -> None:  # on the thread that resolved it (or this one)
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            loop.call_soon_threadsafe(_resolve, waiter)

    for fut in futures:
        fut.add_done_callback(one_done)
    return waiter


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _consume(fut: Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


def _read_append_times(parts: list[_Partition]) -> None:
    """The time a LogAppendTime topic stamped on each batch (the store's clock at the append)."""
    for part in parts:
        assert part.plog is not None
        assert part.result is not None
        try:
            stamps = part.plog.read_arrow(part.result.base_offset, max_records=1).column("timestamp")
            part.log_append_time = int(pc.max(stamps).as_py())
        except S3StreamError:
            part.log_append_time = -1


async def _respond(version: int, finish: Any) -> Any:
    return _response(version, await finish)


def _response(version: int, topics: list[_Topic]) -> Any:
    cls = response_class(0, version)
    topic_cls, part_cls = nested(cls, "TopicProduceResponse"), nested(cls, "PartitionProduceResponse")
    error_cls = nested(cls, "BatchIndexAndErrorMessage") if version >= 8 else None
    responses = []
    for t in topics:
        parts = []
        for p in t.partitions:
            ok = p.error == ErrorCode.none and p.result is not None
            record_errors = () if error_cls is None else tuple(
                error_cls(batch_index=i32(i), batch_index_error_message=None) for i in p.record_errors)
            parts.append(build(
                part_cls, index=i32(p.index), error_code=p.error,
                base_offset=i64(p.result.base_offset if ok and p.result else -1),
                log_append_time=_datetime(p.log_append_time) if ok else None,
                log_start_offset=i64(p.log_start_offset if ok else -1),
                record_errors=record_errors, error_message=None if ok else p.message))
        responses.append(build(topic_cls, name=t.name, topic_id=t.topic_id, partition_responses=tuple(parts)))
    return build(cls, responses=tuple(responses), throttle_time=datetime.timedelta(0))


def _datetime(ms: int) -> datetime.datetime | None:
    return None if ms < 0 else _EPOCH + datetime.timedelta(milliseconds=ms)


#: v0-2 are advertised but never served (their old magic is gone), as Kafka 4 does (KAFKA-18659): librdkafka
#: before 2.10 compresses with gzip, snappy and lz4 only when the broker's Produce range includes v0
APIS = [ApiSpec(0, "Produce", 0, 13, _handle)]
