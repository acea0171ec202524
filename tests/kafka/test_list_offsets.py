"""ListOffsets (key 2): earliest, latest, by timestamp and max timestamp, through raw requests and real clients.

Each client looks offsets up by time (``offsets_for_times``; kcat's ``-o s@ts``) and consumes from there.
"""

from __future__ import annotations

import asyncio
import datetime
import subprocess
import sys
from typing import Any

import aiokafka
import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KpPartition
from kafka.record.default_records import DefaultRecordBatchBuilder
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32, i64

from s3stream.apps.kafka.wire import request_class
from tests.kafka.conftest import RunningKafka
from tests.kafka.test_produce_fetch import (
    consume_aiokafka,
    consume_confluent,
    consume_kafka_python,
    plog,
    produce_request,
    raw_request,
    wait_for_end,
)

T0 = 1_800_000_000_000
#: record i has timestamp T0 + 1000 * i, except record 6, the largest; two batches of five
STAMPS = [T0 + 1000 * i for i in range(10)]
STAMPS[6] = T0 + 100_000


@pytest.fixture
def timed(kafka_server: RunningKafka) -> RunningKafka:
    """Topic ``timed``: ten records in two batches (five each), record 6 with the largest timestamp."""
    assert kafka_server.store is not None
    kafka_server.store.create_topic("timed", partitions=1)
    for first in (0, 5):
        builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, batch_size=1 << 20)
        for i in range(first, first + 5):
            builder.append(i - first, timestamp=STAMPS[i], key=None, value=f"v{i}".encode(), headers=[])
        resp = raw_request(kafka_server.bootstrap, 0, 9, produce_request(9, "timed", bytes(builder.build())))
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.none
    wait_for_end(kafka_server, "timed", 10)
    return kafka_server


def list_offsets(server: RunningKafka, version: int, timestamps: list[int], topic: str = "timed",
                 partition: int = 0) -> list[Any]:
    cls = request_class(2, version)
    assert cls is not None
    mod = sys.modules[cls.__module__]
    parts = tuple(mod.ListOffsetsPartition(partition_index=i32(partition), timestamp=i64(ts)) for ts in timestamps)
    fields: dict[str, Any] = {"replica_id": i32(-1), "topics": (mod.ListOffsetsTopic(name=topic, partitions=parts),)}
    if "isolation_level" in cls.__dataclass_fields__:
        fields["isolation_level"] = i8(0)
    if "timeout" in cls.__dataclass_fields__:
        fields["timeout"] = datetime.timedelta(seconds=5)
    resp = raw_request(server.bootstrap, 2, version, cls(**fields))
    return list(resp.topics[0].partitions)


@pytest.mark.parametrize("version", [1, 4, 7, 11])
def test_special_and_timestamp_lookups(timed: RunningKafka, version: int) -> None:
    asks = [-2, -1, T0 + 2500, T0 + 1000, T0 - 5, T0 + 200_000]
    if version >= 7:
        asks.append(-3)
    got = [(p.error_code, p.offset, p.timestamp) for p in list_offsets(timed, version, asks)]
    expected = [(ErrorCode.none, 0, -1), (ErrorCode.none, 10, -1),
                (ErrorCode.none, 3, STAMPS[3]),  # the first record at or after the time
                (ErrorCode.none, 1, STAMPS[1]), (ErrorCode.none, 0, STAMPS[0]),
                (ErrorCode.none, -1, -1)]  # nothing that late
    if version >= 7:
        expected.append((ErrorCode.none, 6, STAMPS[6]))
    assert got == expected
    if version >= 4:
        assert [p.leader_epoch for p in list_offsets(timed, version, [-1, T0 + 200_000])] == [0, -1]


def test_after_delete_records_and_roll(timed: RunningKafka) -> None:
    log = plog(timed, "timed")
    log.roll()
    log.delete_records(4)
    got = [(p.offset, p.timestamp) for p in list_offsets(timed, 11, [-2, -4, -5, -1, -3, T0])]
    assert got == [(4, -1), (4, -1), (-1, -1), (10, -1), (6, STAMPS[6]), (4, STAMPS[4])]


def test_unknown_topic_and_partition(timed: RunningKafka) -> None:
    assert list_offsets(timed, 7, [-1], topic="nope")[0].error_code == ErrorCode.unknown_topic_or_partition
    assert list_offsets(timed, 7, [-1], partition=3)[0].error_code == ErrorCode.unknown_topic_or_partition


def test_kafka_python_offsets_for_times_then_consume(timed: RunningKafka) -> None:
    consumer = KafkaConsumer(bootstrap_servers=timed.bootstrap, group_id=None)
    try:
        tp = KpPartition("timed", 0)
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 10}
        found = consumer.offsets_for_times({tp: T0 + 7000})[tp]
        assert (found.offset, found.timestamp) == (6, STAMPS[6])  # 6 is the first at or after T0 + 7000
        assert consumer.offsets_for_times({tp: T0 + 500_000})[tp] is None
    finally:
        consumer.close()
    got = consume_kafka_python(timed, "timed", 4, offset=found.offset)
    assert [(o, v) for o, (_, v, _) in got] == [(i, f"v{i}".encode()) for i in range(6, 10)]


def test_confluent_offsets_for_times_then_consume(timed: RunningKafka) -> None:
    consumer = Consumer({"bootstrap.servers": timed.bootstrap, "group.id": "lo"})
    try:
        assert consumer.get_watermark_offsets(CkPartition("timed", 0), timeout=10) == (0, 10)
        found = consumer.offsets_for_times([CkPartition("timed", 0, T0 + 2001)], timeout=10)[0]
        assert found.offset == 3
    finally:
        consumer.close()
    got = consume_confluent(timed, "timed", 7, offset=found.offset)
    assert [o for o, _ in got] == list(range(3, 10))


def test_aiokafka_offsets_for_times_then_consume(timed: RunningKafka) -> None:
    async def lookup() -> tuple[Any, Any, Any]:
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=timed.bootstrap, group_id=None)
        await consumer.start()
        try:
            tp = aiokafka.TopicPartition("timed", 0)
            return (await consumer.offsets_for_times({tp: T0 + 4000}))[tp], \
                await consumer.beginning_offsets([tp]), await consumer.end_offsets([tp])
        finally:
            await consumer.stop()

    found, begin, end = asyncio.run(lookup())
    assert (found.offset, found.timestamp) == (4, STAMPS[4])
    assert (list(begin.values()), list(end.values())) == ([0], [10])
    assert [o for o, _ in consume_aiokafka(timed, "timed", 6, offset=found.offset)] == list(range(4, 10))


def test_kcat_consumes_from_a_timestamp(timed: RunningKafka) -> None:
    out = subprocess.run(["kcat", "-b", timed.bootstrap, "-C", "-t", "timed", "-p", "0", "-o", f"s@{T0 + 8000}",
                          "-e", "-f", "%o %T\\n"], check=True, capture_output=True, text=True, timeout=30).stdout
    assert out.split() == [x for i in (6, 7, 8, 9) for x in (str(i), str(STAMPS[i]))]
