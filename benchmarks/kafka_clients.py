"""The Kafka path of the Kafka benchmark: confluent-kafka (librdkafka) producing to and consuming from the server.

One producer instance (one Python thread calling ``produce()``, librdkafka's own threads sending) and one
consumer instance (``assign()`` from offset 0, no group membership; confluent-kafka requires a ``group.id`` but
nothing is committed), as an application would run them. The producer's own statistics
(``statistics.interval.ms``) give the batches it really sent: records and bytes per batch, and the broker round
trip it saw, which is the server's produce latency (with acks=all: until the records are in the bucket).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from benchmarks.core.measure import mb_per_s
from benchmarks.kafka_data import HEAD, Checksums, Values, e2e_summary, ticks

__all__ = ["KafkaBenchError", "Stats", "consume_all", "consumer_config", "e2e_kafka", "produce_all",
           "producer_config", "public_config"]

_MAX_PROBLEMS = 20


class KafkaBenchError(RuntimeError):
    """The run could not complete (a client timed out, the server refused): no figure can be given."""


def producer_config(bootstrap: str, *, linger_ms: int, batch_bytes: int) -> dict[str, Any]:
    """A realistic throughput producer: acks=all, a linger, large batches, no compression, no idempotence
    (librdkafka's default)."""
    return {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": linger_ms, "batch.size": batch_bytes,
            "batch.num.messages": 10_000, "compression.type": "none", "enable.idempotence": False,
            "queue.buffering.max.messages": 100_000, "queue.buffering.max.kbytes": 1_048_576,
            "message.timeout.ms": 120_000, "statistics.interval.ms": 500}


def consumer_config(bootstrap: str, group: str) -> dict[str, Any]:
    """A consumer with Kafka's default fetch sizes and wait, committing nothing."""
    return {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "enable.auto.offset.store": False, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 500,
            "fetch.min.bytes": 1, "max.partition.fetch.bytes": 1_048_576, "fetch.max.bytes": 52_428_800}


def public_config(config: dict[str, Any]) -> dict[str, Any]:
    """A client config as the result records it (no callbacks, no address)."""
    return {k: v for k, v in config.items() if not callable(v) and k != "bootstrap.servers"}


@dataclass(slots=True)
class Stats:
    """librdkafka's windowed statistics of one producer, merged over its intervals."""

    topic: str
    samples: list[dict[str, Any]] = field(default_factory=list)

    def callback(self, raw: str) -> None:
        self.samples.append(json.loads(raw))

    def _weighted(self, pick: Callable[[dict[str, Any]], list[dict[str, Any]]], key: str) -> float | None:
        total = weight = 0.0
        for sample in self.samples:
            for hist in pick(sample):
                n = float(hist.get("cnt") or 0)
                total += float(hist.get(key) or 0) * n
                weight += n
        return total / weight if weight else None

    def summary(self) -> dict[str, Any]:
        def topic(key: str) -> Callable[[dict[str, Any]], list[dict[str, Any]]]:
            return lambda s: [s.get("topics", {}).get(self.topic, {}).get(key, {})]

        def brokers(key: str) -> Callable[[dict[str, Any]], list[dict[str, Any]]]:
            return lambda s: [b.get(key, {}) for b in s.get("brokers", {}).values() if b.get("nodeid", -1) >= 0]

        def ms(value: float | None) -> float | None:
            return None if value is None else round(value / 1000.0, 3)

        last = self.samples[-1] if self.samples else {}
        produce_requests = sum(b.get("req", {}).get("Produce", 0) for b in last.get("brokers", {}).values())
        records = self._weighted(topic("batchcnt"), "avg")
        size = self._weighted(topic("batchsize"), "avg")
        return {"intervals": len(self.samples), "batch_records_mean": None if records is None else round(records, 1),
                "batch_bytes_mean": None if size is None else round(size),
                "produce_requests": produce_requests,
                "rtt_mean_ms": ms(self._weighted(brokers("rtt"), "avg")),
                "rtt_p99_max_ms": ms(max((float(h.get("p99") or 0) for s in self.samples for h in brokers("rtt")(s)
                                          if h.get("cnt")), default=None)),
                "queue_latency_mean_ms": ms(self._weighted(brokers("int_latency"), "avg"))}


#: records per partition whose values the produce phase builds at once (:meth:`Values.chunk`)
_CHUNK = 1024


def _produce(producer: Producer, topic: str, value: bytes, partition: int) -> None:
    while True:
        try:
            producer.produce(topic, value, partition=partition)
            return
        except BufferError:  # the local queue is full: serve delivery reports and retry
            producer.poll(0.01)


def produce_all(bootstrap: str, topic: str, values: Values, counts: list[int], *, linger_ms: int,
                batch_bytes: int, timeout_s: float) -> dict[str, Any]:
    """Produce ``counts[p]`` records to each partition, round-robin, and wait for every acknowledgement."""
    errors: list[str] = []
    stats = Stats(topic)

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is not None and len(errors) < _MAX_PROBLEMS:
            errors.append(f"Kafka produce: delivery failed: {err}")

    config = producer_config(bootstrap, linger_ms=linger_ms, batch_bytes=batch_bytes)
    producer = Producer({**config, "delivery.report.only.error": True, "on_delivery": on_delivery,
                         "stats_cb": stats.callback})
    partitions, longest, size = len(counts), max(counts), values.record_bytes
    started = time.perf_counter()
    for first in range(0, longest, _CHUNK):  # a chunk of each partition in turn, its values built at once
        for p in range(partitions):
            if first < counts[p]:
                chunk = bytes(values.chunk(p, first, min(_CHUNK, counts[p] - first)))
                for at in range(0, len(chunk), size):
                    _produce(producer, topic, chunk[at:at + size], p)
                producer.poll(0)
    left = producer.flush(timeout_s)
    seconds = time.perf_counter() - started
    producer.poll(0.6)  # one more statistics interval
    if left:
        raise KafkaBenchError(f"Kafka produce: {left} records unacknowledged {timeout_s:g} s after the last send")
    records = sum(counts)
    nbytes = records * values.record_bytes
    return {"records": records, "payload_bytes": nbytes, "seconds": round(seconds, 3),
            "mb_per_s": round(mb_per_s(nbytes, seconds), 3), "records_per_s": round(records / seconds, 1),
            "producer": stats.summary(), "config": public_config(config), "problems": errors}


def _consumer(bootstrap: str, group: str, topic: str, partitions: int) -> Consumer:
    consumer = Consumer(consumer_config(bootstrap, group))
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    return consumer


def _take(msg: Message, seen: Checksums, next_offset: list[int], problems: list[str], what: str) -> bytes | None:
    """Check one consumed message (error, partition, offset order) and add its value to ``seen``."""
    err = msg.error()
    if err is not None:
        if len(problems) < _MAX_PROBLEMS:
            problems.append(f"{what}: consumer error: {err}")
        return None
    p, offset, value = msg.partition(), msg.offset(), msg.value()
    if p is None or offset is None or not isinstance(value, bytes) or not 0 <= p < seen.partitions:
        if len(problems) < _MAX_PROBLEMS:
            problems.append(f"{what}: a message without partition, offset or value")
        return None
    if offset != next_offset[p] and len(problems) < _MAX_PROBLEMS:
        problems.append(f"{what}: partition {p}: offset {offset} where {next_offset[p]} was next")
    next_offset[p] = offset + 1
    seen.add(p, value)
    return value


def _take_all(msgs: list[Message], seen: Checksums, next_offset: list[int], problems: list[str], what: str) -> None:
    """:func:`_take` for a list of messages at a few C-level calls per message: runs of one partition are
    checked for consecutive offsets with numpy and their values CRC'd joined (a CRC32C chained over values is
    the CRC of their concatenation), as the Python API's reads are checked column-wise (``values_crc``)."""
    if any(msg.error() is not None for msg in msgs):
        for msg in msgs:
            _take(msg, seen, next_offset, problems, what)
        return
    parts = np.fromiter((msg.partition() for msg in msgs), dtype=np.int64, count=len(msgs))
    offsets = np.fromiter((msg.offset() for msg in msgs), dtype=np.int64, count=len(msgs))
    values = [msg.value() for msg in msgs]
    cuts = [0, *(np.flatnonzero(np.diff(parts)) + 1).tolist(), len(msgs)]
    for start, end in itertools.pairwise(cuts):
        p = int(parts[start])
        run = [v for v in values[start:end] if type(v) is bytes]
        if not 0 <= p < seen.partitions or len(run) != end - start:
            for msg in msgs[start:end]:
                _take(msg, seen, next_offset, problems, what)
            continue
        expected = np.arange(next_offset[p], next_offset[p] + end - start, dtype=np.int64)
        if not np.array_equal(offsets[start:end], expected) and len(problems) < _MAX_PROBLEMS:
            problems.append(f"{what}: partition {p}: offsets {int(offsets[start])}..{int(offsets[end - 1])} where "
                            f"{next_offset[p]}.. was next, consecutively")
        next_offset[p] = int(offsets[end - 1]) + 1
        seen.add_joined(p, b"".join(run), end - start)


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int, *, group: str, idle_timeout_s: float
                ) -> dict[str, Any]:
    """Read every partition from offset 0 until ``expected`` records came; the checksums and the time taken."""
    seen = Checksums(partitions)
    problems: list[str] = []
    next_offset = [0] * partitions
    started = time.perf_counter()
    consumer = _consumer(bootstrap, group, topic, partitions)
    try:
        last_progress = time.perf_counter()
        while seen.total < expected:
            msgs = consumer.consume(num_messages=10_000, timeout=0.5)
            if not msgs:
                if time.perf_counter() - last_progress > idle_timeout_s:
                    raise KafkaBenchError(f"Kafka consumer: stalled at {seen.total} of {expected} records "
                                          f"(nothing for {idle_timeout_s:g} s)")
                continue
            last_progress = time.perf_counter()
            _take_all(msgs, seen, next_offset, problems, "Kafka catch-up")
        seconds = time.perf_counter() - started
    finally:
        consumer.close()
    return {"seen": seen, "seconds": seconds, "problems": problems}


@dataclass(slots=True)
class _Tail:
    """The tailing consumer of the end-to-end phase, on its own thread."""

    consumer: Consumer
    seen: Checksums
    next_offset: list[int]
    latencies_ns: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    target: list[int] | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    failure: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                # wait for one message, then take what else is there without waiting: consume(n, timeout)
                # alone waits until n messages came or the timeout passed, holding records up to 50 ms the
                # Python API's reader (which returns what read_arrow has) would have seen at once
                first = self.consumer.poll(0.05)
                if first is None:
                    continue
                msgs = [first, *self.consumer.consume(num_messages=999, timeout=0)]
                now = time.perf_counter_ns()
                for msg in msgs:
                    value = _take(msg, self.seen, self.next_offset, self.problems, "Kafka end to end")
                    if value is not None and (stamp := HEAD.unpack_from(value)[0]):
                        self.latencies_ns.append(now - stamp)
                if self.target is not None and all(
                        s >= t for s, t in zip(self.seen.records, self.target, strict=True)):
                    return
        except BaseException as exc:  # noqa: BLE001 - re-raised by the phase after the thread ends
            self.failure = exc

    def wait_for(self, counts: list[int], timeout_s: float, what: str) -> None:
        deadline = time.perf_counter() + timeout_s
        while any(s < c for s, c in zip(self.seen.records, counts, strict=True)):
            if self.failure is not None:
                raise KafkaBenchError(f"{what}: the consumer failed: {self.failure!r}") from self.failure
            if time.perf_counter() > deadline:
                raise KafkaBenchError(f"{what}: the consumer saw {self.seen.records} of {counts} records within "
                                      f"{timeout_s:g} s")
            time.sleep(0.005)


def e2e_kafka(bootstrap: str, topic: str, values: Values, partitions: int, *, rate_per_s: float, seconds: float,
              linger_ms: int, batch_bytes: int, tick_s: float, timeout_s: float) -> dict[str, Any]:
    """Produce at ``rate_per_s`` records/s for ``seconds`` with a consumer tailing; every record's end-to-end
    latency (consume time - send time stamped in its value) and produce acknowledgement latency."""
    sent = Checksums(partitions)
    acks_s: list[float] = []
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            if len(errors) < _MAX_PROBLEMS:
                errors.append(f"Kafka end to end: delivery failed: {err}")
        elif (latency := msg.latency()) is not None:
            acks_s.append(latency)

    config = producer_config(bootstrap, linger_ms=linger_ms, batch_bytes=batch_bytes)
    producer = Producer({**{k: v for k, v in config.items() if k != "statistics.interval.ms"},
                         "on_delivery": on_delivery})
    tail = _Tail(_consumer(bootstrap, f"{topic}-tail", topic, partitions), Checksums(partitions), [0] * partitions)
    thread = threading.Thread(target=tail.run, name="bench-kafka-tail", daemon=True)
    thread.start()
    try:
        for p in range(partitions):  # warm-up: one unstamped record per partition, the consumer sees them
            value = values.value(p, 0)
            _produce(producer, topic, value, p)
            sent.add(p, value)
        producer.flush(timeout_s)
        tail.wait_for(list(sent.records), timeout_s, "Kafka end to end (warm-up)")
        acks_s.clear()
        k = 0
        started = time.perf_counter()
        for due in ticks(rate_per_s, seconds, tick_s):
            for _ in range(due):
                p, i = k % partitions, k // partitions + 1
                value = values.value(p, i, time.perf_counter_ns())
                _produce(producer, topic, value, p)
                sent.add(p, value)
                k += 1
            producer.poll(0)
        produced_s = time.perf_counter() - started
        if left := producer.flush(timeout_s):
            raise KafkaBenchError(f"Kafka end to end: {left} records unacknowledged after {timeout_s:g} s")
        tail.target = list(sent.records)
        tail.wait_for(tail.target, timeout_s, "Kafka end to end")
    finally:
        tail.stop.set()
        thread.join(timeout_s)
        tail.consumer.close()
    return e2e_summary(k, produced_s, values.record_bytes, tail.latencies_ns, acks_s, sent, tail.seen,
                       errors + tail.problems, "Kafka end to end")

