"""``s3stream quickstart``: a one-minute tour that exercises the store end to end and shows the bucket.

By default it runs on a fresh embedded store in a temporary directory (removed afterwards unless
``keep``), so it works on any machine and leaves nothing behind. The object store is wrapped in a
:class:`~s3stream.objectstore.recording.RecordingObjectStore`, so the tour can show what S3 would bill.

The tour is a list of :class:`Step` values (:data:`DEFAULT_STEPS`) run in order over one
:class:`QuickstartContext`; later capabilities (retention, compaction, Spark) add theirs by passing
``steps=[*DEFAULT_STEPS, Step("compact", my_step)]`` or appending to the list. A step raises an
:class:`~s3stream.base.errors.S3StreamError` to fail the tour (verification failures are ``InternalError``:
the store broke a promise).

Default steps: create a 3-partition topic with ``segment.bytes=64 KiB``; produce N keyed records
(Kafka's partitioner) with a progress bar; consume everything back and verify count and order per
partition; produce and consume a few records through a Kafka client (confluent-kafka, else kafka-python;
skipped with a note when neither is installed) and the Kafka listener on an ephemeral 127.0.0.1 port; force
a roll; DeleteRecords plus a retention pass; a compacted topic cleaned by the cleaner; show the objects by
kind, one partition's manifest, and the requests made.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from s3stream.base.clock import SystemClock
from s3stream.base.errors import InternalError, InvalidRequest, TopicExists
from s3stream.base.records import RECORD_SCHEMA, Record
from s3stream.policy.partitioner import partition_for_key

if TYPE_CHECKING:
    from s3stream.objectstore.recording import RecordingObjectStore
    from s3stream.store import Store

__all__ = ["DEFAULT_STEPS", "QuickstartContext", "Step", "run_quickstart"]

TOPIC = "quickstart"
PARTITIONS = 3
SEGMENT_BYTES = 64 << 10
_APPEND_BATCH = 500
_READ_BATCH = 5000
_KEYS = 997  # distinct keys; records of one key stay in order on one partition
_KAFKA_RECORDS = 5
_KAFKA_TIMEOUT_S = 20.0


@dataclass(slots=True)
class QuickstartContext:
    """What the steps share: the open store, its request recorder, where to print, and results so far."""

    store: Store
    recorder: RecordingObjectStore
    console: Console
    records: int
    topic: str = TOPIC
    partitions: int = PARTITIONS
    #: values appended to each partition, in order (the consume step checks them)
    produced: dict[int, list[bytes]] = field(default_factory=dict)
    #: free-form results steps leave for later steps (and for tests)
    notes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Step:
    """One step of the tour: a title for the header, and what it does."""

    title: str
    run: Callable[[QuickstartContext], None]


# ------------------------------------------------------------------------------------------------ steps


def create_topic(ctx: QuickstartContext) -> None:
    """A 3-partition topic with small segments, so a few MB roll many times."""
    config = {"segment.bytes": str(SEGMENT_BYTES)}
    try:
        ctx.store.create_topic(ctx.topic, partitions=ctx.partitions, config=config)
    except TopicExists:  # a store given with --url may have one from an earlier tour
        ctx.topic = f"{TOPIC}-{ctx.store.clock.now_ms()}"
        ctx.store.create_topic(ctx.topic, partitions=ctx.partitions, config=config)
    ctx.console.print(f"created topic [bold]{ctx.topic}[/]: {ctx.partitions} partitions, "
                      f"segment.bytes={SEGMENT_BYTES:,}")


def _records(n: int) -> Iterator[tuple[int, Record]]:
    for i in range(n):
        key = b"user-%03d" % (i % _KEYS)
        value = b'{"event": %d, "user": "%s", "payload": "%s"}' % (i, key, b"x" * 48)
        yield i, Record(key=key, value=value)


def produce(ctx: QuickstartContext) -> None:
    """Produce N keyed records, batched per partition, placed by Kafka's murmur2 partitioner."""
    batches: dict[int, list[Record]] = {p: [] for p in range(ctx.partitions)}
    ctx.produced = {p: [] for p in range(ctx.partitions)}
    logs = [ctx.store.partition(ctx.topic, p) for p in range(ctx.partitions)]
    columns = (TextColumn("producing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=ctx.console, transient=True, disable=not ctx.console.is_terminal) as progress:
        task = progress.add_task("produce", total=ctx.records)
        for _, record in _records(ctx.records):
            assert record.key is not None
            assert record.value is not None
            p = partition_for_key(record.key, ctx.partitions)
            batches[p].append(record)
            ctx.produced[p].append(record.value)
            if len(batches[p]) >= _APPEND_BATCH:
                logs[p].append(batches[p])
                progress.advance(task, len(batches[p]))
                batches[p] = []
        for p, batch in batches.items():
            if batch:
                logs[p].append(batch)
                progress.advance(task, len(batch))
    counts = ", ".join(f"p{p}: {len(v)}" for p, v in ctx.produced.items())
    ctx.console.print(f"produced {ctx.records:,} records ({counts})")


def _read_all(ctx: QuickstartContext, partition: int) -> pa.Table:
    log = ctx.store.partition(ctx.topic, partition)
    pos, end = log.log_start_offset, log.log_end_offset
    tables: list[pa.Table] = []
    while pos < end:
        table = log.read_arrow(pos, max_records=_READ_BATCH, max_bytes=8 << 20)
        if table.num_rows == 0:
            break
        tables.append(table)
        pos = int(table.column("offset")[-1].as_py()) + 1
    return pa.concat_tables(tables) if tables else RECORD_SCHEMA.empty_table()


def consume_and_verify(ctx: QuickstartContext) -> None:
    """Read every partition back and check count, offsets (0..n-1) and values in produce order."""
    for p in range(ctx.partitions):
        expected = ctx.produced.get(p, [])
        table = _read_all(ctx, p)
        values = table.column("value").combine_chunks() if table.num_rows else pa.array([], pa.binary())
        offsets = table.column("offset").combine_chunks() if table.num_rows else pa.array([], pa.int64())
        if table.num_rows != len(expected):
            raise InternalError(f"quickstart: partition {p} returned {table.num_rows} records, "
                                f"{len(expected)} were produced")
        if not offsets.equals(pa.array(range(len(expected)), pa.int64())):
            raise InternalError(f"quickstart: partition {p} offsets are not 0..{len(expected) - 1}")
        if not values.equals(pa.array(expected, pa.binary())):
            raise InternalError(f"quickstart: partition {p} returned values out of produce order")
    ctx.console.print(f"consumed {ctx.records:,} records back: counts, offsets and order verified")


def _kafka_client() -> str | None:
    """The Kafka client library the Kafka step uses: confluent-kafka, else kafka-python, else None."""
    import importlib.util

    for module, name in (("confluent_kafka", "confluent-kafka"), ("kafka", "kafka-python")):
        if importlib.util.find_spec(module) is not None:
            return name
    return None


def _confluent_round_trip(ctx: QuickstartContext, bootstrap: str, topic: str,
                          records: list[tuple[bytes, bytes]]) -> list[tuple[bytes | None, bytes | None]]:
    from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

    failures: list[KafkaError] = []

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failures.append(err)

    common = {"bootstrap.servers": bootstrap, "log_level": 3}
    producer = Producer({**common, "linger.ms": 5, "message.timeout.ms": int(_KAFKA_TIMEOUT_S * 1000)})
    for key, value in records:
        producer.produce(topic, value=value, key=key, partition=0, on_delivery=delivered)
    if producer.flush(_KAFKA_TIMEOUT_S) or failures:
        raise InternalError(f"quickstart: the Kafka producer did not get every record acknowledged: {failures[:1]}")
    consumer = Consumer({**common, "group.id": "s3stream-quickstart", "enable.auto.commit": False})
    got: list[tuple[bytes | None, bytes | None]] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = ctx.store.clock.monotonic() + _KAFKA_TIMEOUT_S
        while len(got) < len(records) and ctx.store.clock.monotonic() < deadline:
            for msg in consumer.consume(len(records) - len(got), timeout=0.5):
                if msg.error() is not None:
                    raise InternalError(f"quickstart: the Kafka consumer failed: {msg.error()}")
                got.append((msg.key(), msg.value()))
    finally:
        consumer.close()
    return got


def _kafka_python_round_trip(ctx: QuickstartContext, bootstrap: str, topic: str,
                             records: list[tuple[bytes, bytes]]) -> list[tuple[bytes | None, bytes | None]]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # type: ignore[import-untyped]

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    try:
        futures = [producer.send(topic, key=key, value=value, partition=0) for key, value in records]
        producer.flush(_KAFKA_TIMEOUT_S)
        for future in futures:
            future.get(timeout=_KAFKA_TIMEOUT_S)
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    got: list[tuple[bytes | None, bytes | None]] = []
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek(partition, 0)
        deadline = ctx.store.clock.monotonic() + _KAFKA_TIMEOUT_S
        while len(got) < len(records) and ctx.store.clock.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                got += [(msg.key, msg.value) for msg in batch]
    finally:
        consumer.close()
    return got


def kafka_clients(ctx: QuickstartContext) -> None:
    """A few records through a real Kafka client: the Kafka listener on an ephemeral 127.0.0.1 port."""
    client = _kafka_client()
    if client is None:
        ctx.notes["kafka"] = None
        ctx.console.print("no Kafka client installed (pip install confluent-kafka or kafka-python): step skipped")
        return
    from s3stream.apps.kafka.config import BrokerConfig
    from s3stream.apps.kafka.server import KafkaServerThread

    topic = f"{ctx.topic}-kafka"
    ctx.store.create_topic(topic, partitions=1)
    records = [(b"user-%03d" % i, b'{"event": %d, "via": "kafka"}' % i) for i in range(_KAFKA_RECORDS)]
    round_trip = _confluent_round_trip if client == "confluent-kafka" else _kafka_python_round_trip
    # librdkafka's consumer looks up a group coordinator even without a group: one offsets partition is plenty
    with KafkaServerThread(ctx.store, BrokerConfig(port=0, offsets_topic_num_partitions=1)) as server:
        got = round_trip(ctx, server.bootstrap, topic, records)
        bootstrap = server.bootstrap
    if got != records:
        raise InternalError(f"quickstart: the Kafka consumer read {len(got)} records back, not the "
                            f"{len(records)} produced in order")
    ctx.notes["kafka"] = {"client": client, "bootstrap": bootstrap, "records": len(got)}
    ctx.console.print(f"{client} produced {len(records)} records to {topic} through the Kafka listener on "
                      f"{bootstrap} and consumed them back: same keys, values and order "
                      f"(the store holds them: log end offset {ctx.store.partition(topic, 0).log_end_offset})")


def roll(ctx: QuickstartContext) -> None:
    """Seal every partition's active segment now, so all data is in segment objects."""
    for p in range(ctx.partitions):
        ctx.store.partition(ctx.topic, p).roll()
    ctx.store.flush()
    segs = [len(ctx.store.partition(ctx.topic, p).segments()) for p in range(ctx.partitions)]
    ctx.console.print(f"rolled: segments per partition (incl. the empty active one) {segs}")


def retention(ctx: QuickstartContext) -> None:
    """DeleteRecords on partition 0, then one retention pass: whole segments below the new start go."""
    log = ctx.store.partition(ctx.topic, 0)
    before = len([s for s in log.segments() if s.sealed])
    target = log.log_end_offset // 2
    log.delete_records(target)
    report = ctx.store.run_retention()
    after = len([s for s in log.segments() if s.sealed])
    ctx.notes["retention"] = report
    ctx.console.print(f"delete_records({target}) on partition 0, then a retention pass: {report.segments_deleted} "
                      f"segments dropped ({before} -> {after} sealed), log start offset {log.log_start_offset}; "
                      "their objects are deleted by GC after file.delete.delay.ms")


def compact(ctx: QuickstartContext) -> None:
    """A compacted topic: many updates per key, then one cleaner pass keeps the latest value of each key."""
    topic = f"{ctx.topic}-compacted"
    config = {"cleanup.policy": "compact", "segment.bytes": str(SEGMENT_BYTES), "min.cleanable.dirty.ratio": "0.01"}
    ctx.store.create_topic(topic, partitions=1, config=config)
    log = ctx.store.partition(topic, 0)
    n = min(ctx.records, 10_000)
    latest: dict[bytes, bytes] = {}
    batch: list[Record] = []
    for _, record in _records(n):
        assert record.key is not None
        assert record.value is not None
        latest[record.key] = record.value
        batch.append(record)
        if len(batch) >= _APPEND_BATCH:
            log.append(batch)
            batch = []
    if batch:
        log.append(batch)
    log.roll()
    report = ctx.store.run_cleaner()
    cleaned = report.cleaned
    if cleaned is None or cleaned.aborted:
        raise InternalError("quickstart: the cleaner did not clean the compacted topic")
    survivors = {r.key: r.value for r in log.read(0, max_bytes=64 << 20)}
    if survivors != latest:
        raise InternalError("quickstart: after compaction the log does not hold exactly the latest value per key")
    ctx.notes["compaction"] = cleaned
    ctx.console.print(f"compacted {topic}: {cleaned.records_read:,} records -> {cleaned.records_kept:,} "
                      f"(one per key; offsets unchanged, log end still {log.log_end_offset:,})")


def _kind(key: str) -> str:
    parts = key.split("/")
    if parts[0] == "wal":
        return "WAL objects"
    if parts[0] == "topics":
        return "topic documents"
    if parts[0] == "catalog":
        return "topic index"
    if parts[0] == "logs" and len(parts) > 3:
        return {"segments": "segments", "manifest": "manifests"}.get(parts[3], "other")
    return "other"


def show_objects(ctx: QuickstartContext) -> None:
    """What landed in object storage, by kind (listed on the unrecorded store: it costs nothing here)."""
    kinds: dict[str, list[int]] = {}
    for prefix in ("topics/", "logs/", "wal/"):
        for entry in ctx.recorder.inner.list(prefix):
            stats = kinds.setdefault(_kind(entry.key), [0, 0])
            stats[0] += 1
            stats[1] += entry.size
    table = Table(title="objects in the bucket", title_justify="left")
    table.add_column("kind")
    table.add_column("objects", justify="right")
    table.add_column("bytes", justify="right")
    for kind in sorted(kinds):
        table.add_row(kind, f"{kinds[kind][0]:,}", f"{kinds[kind][1]:,}")
    ctx.console.print(table)
    ctx.notes["objects"] = {k: tuple(v) for k, v in kinds.items()}


def show_manifest(ctx: QuickstartContext) -> None:
    """Partition 0's manifest: the committed state a reader trusts."""
    m = ctx.store.partition(ctx.topic, 0).manifest()
    ctx.console.print(f"manifest of {ctx.topic}/0: seq {m.seq}, log start {m.log_start_offset}, next offset "
                      f"{m.next_offset}, {len(m.segments)} segments, "
                      f"{sum(s.object_size for s in m.segments):,} object bytes, writer "
                      f"{m.writer.owner if m.writer else '-'} (epoch {m.writer.epoch if m.writer else '-'})")
    table = Table(title="segments (first 3 and last)", title_justify="left")
    for col in ("base", "last", "records", "logical bytes", "object bytes", "key"):
        table.add_column(col, justify="left" if col == "key" else "right")
    shown = [*m.segments[:3], *m.segments[3:][-1:]]
    for s in shown:
        table.add_row(str(s.base_offset), str(s.last_offset), str(s.record_count), f"{s.size_bytes:,}",
                      f"{s.object_size:,}", s.key)
    ctx.console.print(table)
    ctx.notes["manifest_seq"] = m.seq
    ctx.notes["segments_p0"] = len(m.segments)


def show_requests(ctx: QuickstartContext) -> None:
    """Object-store requests made since the store opened, by kind (S3's cost model)."""
    counts = ctx.recorder.counts()
    table = Table(title="object store requests (since open)", title_justify="left")
    table.add_column("kind")
    table.add_column("requests", justify="right")
    for kind, n in counts.items():
        table.add_row(kind, f"{n:,}")
    ctx.console.print(table)
    ctx.console.print(f"{ctx.recorder.bytes_written:,} bytes written and {ctx.recorder.bytes_read:,} bytes read "
                      f"for {ctx.records:,} records")
    ctx.notes["requests"] = counts


DEFAULT_STEPS: list[Step] = [
    Step("create a topic", create_topic),
    Step("produce keyed records", produce),
    Step("consume and verify", consume_and_verify),
    Step("through the Kafka protocol", kafka_clients),
    Step("force a roll", roll),
    Step("retention: DeleteRecords and a retention pass", retention),
    Step("compaction: keep the latest value per key", compact),
    Step("objects in the bucket", show_objects),
    Step("a partition manifest", show_manifest),
    Step("requests made", show_requests),
]


# ------------------------------------------------------------------------------------------------ runner


@contextmanager
def _store_dir(url: str | None, keep: bool, console: Console) -> Iterator[str]:
    """``url``, or a fresh temporary file:// store removed afterwards (unless ``keep``)."""
    if url:
        yield url
        return
    tmp = tempfile.mkdtemp(prefix="s3stream-quickstart-")
    try:
        yield Path(tmp).as_uri()
    finally:
        if keep:
            console.print(f"kept the store at {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def run_quickstart(url: str | None = None, *, records: int = 20_000, console: Console | None = None,
                   steps: Sequence[Step] | None = None, keep: bool = False,
                   options: Mapping[str, object] | None = None) -> QuickstartContext:
    """Run the tour and return its context (``notes`` hold what the steps measured).

    Args:
        url: the store to use; None for a fresh temporary embedded store.
        records: how many records to produce (>= 1).
        console: where to print (stdout by default).
        steps: the steps to run, in order (default :data:`DEFAULT_STEPS`).
        keep: keep the temporary store directory (printed at the end).
        options: store settings for :func:`s3stream.open_store`.

    Raises:
        S3StreamError: a step failed (InternalError when a verification failed).
    """
    from s3stream.objectstore.recording import RecordingObjectStore
    from s3stream.objectstore.url import open_object_store
    from s3stream.store import open_store

    if records < 1:
        raise InvalidRequest(f"quickstart needs at least one record, got {records}")
    console = console or Console(highlight=False)
    clock = SystemClock()
    with _store_dir(url, keep, console) as store_url:
        recorder = RecordingObjectStore(open_object_store(store_url, clock=clock))
        settings: dict[str, Any] = dict(options or {})
        with open_store(store_url, clock=clock, object_store=recorder, **settings) as store:
            recorder.reset()  # count the tour's requests, not the open-time capability probe
            ctx = QuickstartContext(store=store, recorder=recorder, console=console, records=records)
            for i, step in enumerate(steps if steps is not None else DEFAULT_STEPS, 1):
                console.rule(f"[bold]{i}. {step.title}")
                step.run(ctx)
        console.rule("[bold green]quickstart finished")
        return ctx
