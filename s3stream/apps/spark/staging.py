"""Staging a Spark write on an executor: DataFrame batches become segment objects with 0-based offsets.

A write task turns its Arrow batches into records of the target topic partitions (Kafka's sink columns:
``value`` required; ``key``, ``partition``, ``timestamp``, ``headers`` and ``topic`` optional; strings
become UTF-8 bytes), validates them like ``PartitionLog.append`` does (keys on compacted topics,
``max.message.bytes``, timestamp bounds), and writes each partition's records as segment objects whose
stored offsets are ``0..n-1`` (a new object each ``segment.bytes``). The keys are ordinary segment keys
``logs/{topic_id}/{partition}/segments/0000...-{ulid}.parquet``: an object no manifest ever references
is an orphan that GC deletes after ``orphan_min_age_ms``.

Nothing is visible until the driver's commit publishes the objects (``PartitionLog.publish_segments``),
which assigns the real offsets in one manifest commit per partition. :class:`StagedObject` is what a task
reports: where the object is, its facts for the manifest, and ``(task, seq)``, the order the driver keeps.

Partitioning when the ``partition`` column is absent or null: Kafka's default partitioner, murmur2 of the
key (:func:`murmur2_partitions`, vectorized, equal to :func:`s3stream.policy.partitioner.murmur2`), and
round-robin for records without a key.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from s3stream.apps.spark.snapshot import LogReader, TopicInfo
from s3stream.base import layout
from s3stream.base.clock import Clock, SystemClock
from s3stream.base.errors import InvalidRecord, RecordTooLarge, S3StreamError, UnknownTopic
from s3stream.base.ids import IdSource
from s3stream.base.records import HEADER_TYPE, RECORD_SCHEMA
from s3stream.format.segment import encode_segment, row_sizes
from s3stream.objectstore.protocol import ObjectStore

__all__ = ["StagedObject", "Stager", "murmur2_partitions", "normalize_batch"]

_MASK = 0xFFFFFFFF
_SEED = 0x9747B28C
_M = 0x5BD1E995

_INPUT = pa.schema([
    pa.field("topic", pa.string()), pa.field("key", pa.binary()), pa.field("value", pa.binary()),
    pa.field("partition", pa.int32()), pa.field("timestamp", pa.int64()), pa.field("headers", HEADER_TYPE),
])


@dataclass(frozen=True, slots=True)
class StagedObject:
    """A staged segment object (stored offsets ``0..record_count-1``) and where it goes."""

    topic: str
    topic_id: str
    partition: int
    task: int
    seq: int
    key: str
    object_size: int
    record_count: int
    size_bytes: int
    max_timestamp: int
    first_timestamp: int
    crc32c: int


def murmur2_partitions(keys: pa.Array, partitions: int) -> npt.NDArray[np.int64]:
    """Kafka's ``toPositive(murmur2(key)) % partitions`` for every (non-null) key, column-wise."""
    keys = pc.fill_null(keys.cast(pa.binary()), b"")
    n = len(keys)
    offsets = np.frombuffer(keys.buffers()[1], dtype=np.int32, count=n + 1, offset=4 * keys.offset).astype(np.int64)
    data_buf = keys.buffers()[2]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None and data_buf.size else np.zeros(1, np.uint8)
    lengths = np.diff(offsets)
    h = (np.uint64(_SEED) ^ lengths.astype(np.uint64)) & np.uint64(_MASK)
    m, mask = np.uint64(_M), np.uint64(_MASK)
    words = lengths // 4
    for w in range(int(words.max()) if n else 0):
        active = words > w
        base = np.where(active, offsets[:-1] + 4 * w, 0)
        k = np.zeros(n, dtype=np.uint64)
        for i in range(4):  # the little-endian 32-bit word at 4 * w
            k |= data[base + i].astype(np.uint64) << np.uint64(8 * i)
        k = (k * m) & mask
        k ^= k >> np.uint64(24)
        k = (k * m) & mask
        h = np.where(active, ((h * m) & mask) ^ k, h)
    rest = lengths & 3
    tail = np.where(rest > 0, offsets[:-1] + (lengths & ~3), 0)
    for shift, need in ((16, 3), (8, 2), (0, 1)):
        tail_byte = data[np.where(rest >= need, tail + need - 1, 0)].astype(np.uint64)
        h = np.where(rest >= need, h ^ (tail_byte << np.uint64(shift)), h)
    h = np.where(rest >= 1, (h * m) & mask, h)
    h ^= h >> np.uint64(13)
    h = (h * m) & mask
    h ^= h >> np.uint64(15)
    return ((h & np.uint64(0x7FFFFFFF)) % np.uint64(partitions)).astype(np.int64)


def _column(batch: pa.RecordBatch, name: str, kind: pa.DataType, n: int) -> pa.Array:
    if name not in batch.schema.names:
        return pa.nulls(n, kind)
    col = batch.column(name)
    try:
        if pa.types.is_timestamp(col.type):
            return col.cast(pa.timestamp("ms", tz=col.type.tz), safe=False).cast(pa.int64())
        return col.cast(kind)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InvalidRecord(f"column {name!r} of type {col.type} cannot be written as {kind}: {exc}") from None


def normalize_batch(batch: pa.RecordBatch, topic: str | None) -> pa.Table:
    """A DataFrame batch as columns topic, key, value, partition, timestamp (ms), headers."""
    n = batch.num_rows
    if "value" not in batch.schema.names:
        raise InvalidRecord("a DataFrame written to s3stream needs a 'value' column (and optionally key, "
                            f"partition, timestamp, headers, topic); got {batch.schema.names}")
    if topic is not None:
        topics = pa.repeat(pa.scalar(topic, pa.string()), n)
    elif "topic" in batch.schema.names:
        topics = _column(batch, "topic", pa.string(), n)
        if topics.null_count:
            raise InvalidRecord("a row has a null 'topic' (give option topic or a topic on every row)")
    else:
        raise InvalidRecord("no target topic: give option 'topic' or a 'topic' column")
    cols = [topics, *(_column(batch, f.name, f.type, n) for f in list(_INPUT)[1:])]
    return pa.Table.from_arrays(cols, schema=_INPUT)


@dataclass(slots=True)
class _Buffer:
    parts: list[pa.Table] = field(default_factory=list)
    nbytes: int = 0


class Stager:
    """Stages one task's records (see the module docstring); not thread-safe (one per task)."""

    def __init__(self, store: ObjectStore, *, task: int, topic: str | None, topics: dict[str, TopicInfo] | None = None,
                 clock: Clock | None = None, ids: IdSource | None = None, row_group_bytes: int = 1 << 20) -> None:
        self._store = store
        self._task = task
        self._topic = topic
        self._topics: dict[str, TopicInfo] = dict(topics or {})
        self._clock = clock or SystemClock()
        self._ids = ids or IdSource()
        self._row_group_bytes = row_group_bytes
        self._buffers: dict[tuple[str, int], _Buffer] = {}
        self._round_robin = task
        self.staged: list[StagedObject] = []

    def _topic_info(self, name: str) -> TopicInfo:
        info = self._topics.get(name)
        if info is None:
            info = self._topics[name] = LogReader(self._store, clock=self._clock, ids=self._ids).topic(name)
        return info

    def add(self, batch: pa.RecordBatch) -> None:
        """Validate and buffer one DataFrame batch; stages a segment each time a partition fills one."""
        if batch.num_rows == 0:
            return
        table = normalize_batch(batch, self._topic)
        for name in pc.unique(table.column("topic")).to_pylist():
            rows = table.filter(pc.equal(table.column("topic"), name)) if self._topic is None else table
            self._add_topic(self._topic_info(str(name)), rows)

    def _add_topic(self, info: TopicInfo, rows: pa.Table) -> None:
        rows = self._checked(info, rows)
        parts = self._partitions(info, rows)
        for p in np.unique(parts).tolist():
            chunk = rows.filter(pa.array(parts == p))
            buf = self._buffers.setdefault((info.name, int(p)), _Buffer())
            buf.parts.append(chunk)
            buf.nbytes += int(row_sizes(chunk.select(["key", "value", "headers"])).sum())
            if buf.nbytes >= info.config.segment_bytes:
                self._flush(info, int(p))

    def _partitions(self, info: TopicInfo, rows: pa.Table) -> npt.NDArray[np.int64]:
        given = rows.column("partition").combine_chunks()
        n = rows.num_rows
        parts = np.asarray(pc.fill_null(given, -1).to_numpy(zero_copy_only=False), dtype=np.int64)
        if given.null_count:
            keys = rows.column("key").combine_chunks()
            hashed = murmur2_partitions(keys, info.partitions)
            keyed = np.asarray(pc.is_valid(keys).to_numpy(zero_copy_only=False), dtype=np.bool_)
            unkeyed = (parts < 0) & ~keyed
            robin = (self._round_robin + np.arange(int(unkeyed.sum()))) % info.partitions
            self._round_robin += int(unkeyed.sum())
            parts = np.where((parts < 0) & keyed, hashed, parts)
            parts[unkeyed] = robin
        bad = (parts < 0) | (parts >= info.partitions)
        if bad.any():
            raise UnknownTopic(f"topic {info.name!r} has no partition {int(parts[bad][0])} "
                               f"(it has {info.partitions}); {int(bad.sum())} of {n} rows name one")
        return parts

    def _checked(self, info: TopicInfo, rows: pa.Table) -> pa.Table:
        """Kafka's producer-side checks, column-wise; resolves timestamps (CreateTime / LogAppendTime)."""
        cfg = info.config
        now = self._clock.now_ms()
        if cfg.compact and rows.column("key").null_count:
            raise InvalidRecord(f"topic {info.name!r} is compacted: every record needs a key")
        sizes = row_sizes(rows.select(["key", "value", "headers"]))
        if len(sizes) and int(sizes.max()) > cfg.max_message_bytes:
            raise RecordTooLarge(f"a record of {int(sizes.max())} bytes exceeds max.message.bytes="
                                 f"{cfg.max_message_bytes} of topic {info.name!r}")
        now_col = pa.scalar(now, pa.int64())
        if cfg.message_timestamp_type == "LogAppendTime":
            ts = pa.repeat(now_col, rows.num_rows)
        else:
            ts = pc.fill_null(rows.column("timestamp"), now_col).combine_chunks()
            arr = np.asarray(ts.to_numpy(zero_copy_only=False), dtype=np.int64)
            if len(arr) and (arr.min() < 0 or now - arr.min() > cfg.message_timestamp_before_max_ms
                             or arr.max() - now > cfg.message_timestamp_after_max_ms):
                raise InvalidRecord(f"a record timestamp of topic {info.name!r} is negative or outside the "
                                    "accepted range (message.timestamp.before.max.ms / after.max.ms)")
        return rows.set_column(rows.schema.get_field_index("timestamp"), "timestamp", ts)

    def _flush(self, info: TopicInfo, partition: int) -> None:
        buf = self._buffers.pop((info.name, partition), None)
        if buf is None or not buf.parts:
            return
        rows = pa.concat_tables(buf.parts)
        n = rows.num_rows
        table = pa.Table.from_arrays(
            [pa.array(np.arange(n, dtype=np.int64)), rows.column("timestamp"), rows.column("key"),
             rows.column("value"), rows.column("headers"), pa.nulls(n, pa.int64())], schema=RECORD_SCHEMA)
        first_ts = int(table.column("timestamp")[0].as_py())
        data, summary = encode_segment(table, base_offset=0, last_offset=n - 1, first_batch_max_timestamp=first_ts,
                                       row_group_bytes=self._row_group_bytes)
        key = layout.segment_key(info.topic_id, partition, 0, self._ids.ulid(self._clock.now_ms()))
        self._store.put(key, data)
        self.staged.append(StagedObject(info.name, info.topic_id, partition, self._task, len(self.staged), key,
                                        summary.object_size, n, summary.size_bytes, summary.max_timestamp,
                                        first_ts, summary.crc32c))

    def finish(self) -> list[StagedObject]:
        """Stage every buffered record; the staged objects of this task, in order."""
        for name, partition in sorted(self._buffers):
            self._flush(self._topics[name], partition)
        return list(self.staged)

    def discard(self) -> None:
        """Delete what this task staged (best effort: GC removes the rest as orphans)."""
        for obj in self.staged:
            try:
                self._store.delete(obj.key)
            except S3StreamError:
                pass
        self.staged.clear()
        self._buffers.clear()
