"""A compacted topic written by a real client, tombstones included, reads back compacted after the cleaner runs."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, TopicPartition

from tests.kafka.conftest import RunningKafka


def _consume_all(server: RunningKafka, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=3000)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        out: list[tuple[int, bytes | None, bytes | None]] = []
        for message in consumer:
            out.append((message.offset, message.key, message.value))
            if message.offset + 1 >= end:
                break
        return out
    finally:
        consumer.close()


def test_client_writes_updates_and_tombstones_and_reads_back_compacted(kafka_server: RunningKafka) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_server.bootstrap})
    config = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "segment.bytes": "2048",
              "delete.retention.ms": "86400000"}
    admin.create_topics([NewTopic("cmp", 1, 1, config=config)])["cmp"].result(10)
    producer = Producer({"bootstrap.servers": kafka_server.bootstrap, "enable.idempotence": True, "linger.ms": 0})
    written: list[tuple[bytes, bytes | None]] = []
    for round_ in range(4):  # every key updated each round; k3 and k7 deleted in the last one
        for k in range(10):
            key = b"k%d" % k
            value = None if round_ == 3 and k in (3, 7) else b"v%d-%d-" % (k, round_) + b"x" * 100
            written.append((key, value))
            producer.produce("cmp", key=key, value=value, partition=0)
        assert producer.flush(10) == 0
    assert kafka_server.store is not None
    plog = kafka_server.store.partition("cmp", 0)
    plog.roll()  # the last records become cleanable too
    before = _consume_all(kafka_server, "cmp")
    assert [(k, v) for _, k, v in before] == written
    report: Any = kafka_server.store.run_cleaner()
    assert report.cleaned is not None
    after = _consume_all(kafka_server, "cmp")
    latest = dict(written)
    # the newest record of every key survives, at its original offset; tombstones stay (delete.retention.ms)
    offsets = {key: offset for offset, (key, _) in enumerate(written)}
    assert after == sorted((offsets[k], k, v) for k, v in latest.items())
    assert len(after) < len(before)
    assert [v for _, k, v in after if k in (b"k3", b"k7")] == [None, None]
