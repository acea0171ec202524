"""Committed offsets and group metadata as records of the compacted internal topic ``__consumer_offsets``.

A group lives in partition ``abs(java String.hashCode(group)) % N`` as in Kafka; its records are keyed per
(group, topic, partition) for offsets and per group for metadata, so compaction keeps one record per key,
and a tombstone (null value) deletes. Appends are acknowledged once durable in the bucket (``ack="s3"``).
Per partition, appends are issued one batch at a time, in call order, with everything queued meanwhile
joining the next batch: the log order (and the order the caller's ``apply`` callbacks run) is the call order.
Loading reads every partition from its start, keeps the newest record per key and drops tombstoned keys.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from s3stream.apps.kafka.groups.codec import (
    GroupMetadataRecord,
    OffsetCommitRecord,
    decode_group_metadata,
    decode_key,
    decode_offset_commit,
)
from s3stream.base.errors import CorruptData, TopicExists
from s3stream.partition.log import PartitionLog
from s3stream.store import Store

__all__ = ["OFFSETS_TOPIC", "LoadedOffsets", "OffsetsLog", "java_string_hash", "partition_for"]

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
_READ_BYTES = 8 * 1024 * 1024
#: one append carries at most this many bytes of keys and values (several callers' records share it)
_BATCH_BYTES = 512 * 1024

T = TypeVar("T")
RunBlocking = Callable[..., Awaitable[Any]]
Row = tuple[bytes, bytes | None]


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, int32 overflow)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % partitions`` (``abs(Integer.MIN_VALUE)`` is 0)."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass(slots=True)
class LoadedOffsets:
    """What the log holds: the live offsets per group and the newest metadata record per group."""

    offsets: dict[str, dict[tuple[str, int], OffsetCommitRecord]] = field(default_factory=dict)
    groups: dict[str, GroupMetadataRecord] = field(default_factory=dict)
    records: int = 0


@dataclass(slots=True)
class _Pending:
    rows: list[Row]
    apply: Callable[[], None] | None
    done: asyncio.Future[None]


@dataclass(slots=True)
class _Writer:
    queue: list[_Pending] = field(default_factory=list)
    task: asyncio.Task[None] | None = None


class OffsetsLog:
    """The internal topic: created on first start, loaded at startup, appended to by the coordinator."""

    def __init__(self, store: Store, num_partitions: int, run_blocking: RunBlocking) -> None:
        self.store = store
        self.num_partitions = num_partitions
        self._run_blocking = run_blocking
        self._logs: list[PartitionLog] = []
        self._writers: dict[int, _Writer] = {}

    # -- startup (blocking) --------------------------------------------------------------------------

    def open(self) -> LoadedOffsets:
        """Create the topic if missing (compacted, ``num_partitions``), then load it. Blocking."""
        if OFFSETS_TOPIC not in self.store.list_topics():
            try:
                self.store.create_topic(OFFSETS_TOPIC, partitions=self.num_partitions,
                                        config={"cleanup.policy": "compact"})
                log.info("created %s with %d partitions", OFFSETS_TOPIC, self.num_partitions)
            except TopicExists:
                pass
        self.num_partitions = self.store.partitions(OFFSETS_TOPIC)  # an existing topic keeps its count
        self._logs = [self.store.partition(OFFSETS_TOPIC, p) for p in range(self.num_partitions)]
        loaded = LoadedOffsets()
        for plog in self._logs:
            self._load_partition(plog, loaded)
        return loaded

    def _load_partition(self, plog: PartitionLog, out: LoadedOffsets) -> None:
        offset, end = plog.log_start_offset, plog.log_end_offset
        while offset < end:
            table = plog.read_arrow(offset, max_bytes=_READ_BYTES)
            if table.num_rows == 0:
                break
            offsets = table.column("offset")
            offset = int(offsets[-1].as_py()) + 1
            out.records += table.num_rows
            if table.column("key").null_count:
                raise CorruptData(f"a record without a key in {OFFSETS_TOPIC} partition {plog.partition}",
                                  source=OFFSETS_TOPIC)
            # only the newest record of each key in this chunk matters (a compacted topic's dirty tail repeats keys)
            newest = table.group_by("key").aggregate([("offset", "max")]).column("offset_max")
            kept = table.filter(pc.is_in(offsets, value_set=newest)).select(["key", "value"])
            for key_bytes, value_bytes in zip(kept.column("key").to_pylist(), kept.column("value").to_pylist(),
                                              strict=True):
                _apply_record(out, key_bytes, value_bytes)

    # -- appends -------------------------------------------------------------------------------------

    def partition_of(self, group: str) -> int:
        return partition_for(group, self.num_partitions)

    def enqueue(self, group: str, rows: list[Row], apply: Callable[[], None] | None = None) -> asyncio.Future[None]:
        """Queue ``rows`` (key, value-or-None) for ``group``'s partition now, in call order; ``apply`` runs (in
        the same order) once they are durable. The future fails with the store's error (``apply`` not run)."""
        p = self.partition_of(group)
        writer = self._writers.setdefault(p, _Writer())
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        writer.queue.append(_Pending(rows, apply, done))
        if writer.task is None or writer.task.done():
            writer.task = asyncio.create_task(self._drain(p, writer), name=f"offsets-append-{p}")
        return done

    async def append(self, group: str, rows: list[Row], apply: Callable[[], None] | None = None) -> None:
        """:meth:`enqueue` and wait until durable."""
        await asyncio.shield(self.enqueue(group, rows, apply))

    async def _drain(self, p: int, writer: _Writer) -> None:
        while writer.queue:
            take, size = 0, 0
            for item in writer.queue:
                size += sum(len(k) + len(v or b"") for k, v in item.rows)
                if take and size > _BATCH_BYTES:
                    break
                take += 1
            items, writer.queue = writer.queue[:take], writer.queue[take:]
            rows = [row for item in items for row in item.rows]
            try:
                await self._append_rows(p, rows)
            except Exception as exc:  # noqa: BLE001 - every waiting caller gets it
                for item in items:
                    if not item.done.done():
                        item.done.set_exception(exc)
                continue
            for item in items:
                if item.apply is not None:
                    item.apply()
                if not item.done.done():
                    item.done.set_result(None)

    async def _append_rows(self, p: int, rows: list[Row]) -> None:
        batch = pa.RecordBatch.from_arrays([pa.array([k for k, _ in rows], pa.binary()),
                                            pa.array([v for _, v in rows], pa.binary())], names=["key", "value"])
        future = await self._run_blocking(self._logs[p].append_arrow_async, batch, ack="s3")
        await asyncio.wrap_future(future)

    async def close(self) -> None:
        """Wait for queued appends to finish (their callers get their results)."""
        tasks = [w.task for w in self._writers.values() if w.task is not None and not w.task.done()]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


def _apply_record(out: LoadedOffsets, key_bytes: bytes, value: bytes | None) -> None:
    key = decode_key(key_bytes)
    if key.topic is None:
        if value is None:
            out.groups.pop(key.group, None)
        else:
            out.groups[key.group] = decode_group_metadata(value)
        return
    tp = (key.topic, key.partition)
    if value is None:
        group = out.offsets.get(key.group)
        if group is not None:
            group.pop(tp, None)
            if not group:
                del out.offsets[key.group]
    else:
        out.offsets.setdefault(key.group, {})[tp] = decode_offset_commit(value)
