"""Executing a read task on an executor: ranged GETs of the planned byte ranges, Arrow batches out.

An executor opens only the ObjectStore of the task's URL (cached per process and URL, so the tasks of a
Python worker share connections) and reads the task's sources in offset order: segment row groups through
:class:`~s3stream.format.segment.SegmentReader`, WAL chunks through :func:`~s3stream.format.walobject.decode_chunk`.
Rows are filtered to the task's offset range and timestamp bounds and converted to the output schema
column-wise; nothing loops over records.

When an object planned on the driver is gone (retention, compaction or GC ran in between), the task
re-plans the rest of its range from a fresh manifest snapshot and goes on, never producing an offset
twice (it tracks the next offset it may emit). If the log start moved past that offset, records were
lost to this query: with ``failOnDataLoss`` the task fails with :class:`~s3stream.base.errors.OffsetOutOfRange`,
without it the task logs a warning and skips to the log start.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pyarrow as pa

from s3stream.apps.spark.planning import Bounds, ChunkSource, ReadTask, plan_partition
from s3stream.apps.spark.schema import output_batches
from s3stream.apps.spark.segio import chunk_table, segment_tables, time_filter
from s3stream.apps.spark.snapshot import LogReader
from s3stream.base.errors import ObjectNotFound, OffsetOutOfRange
from s3stream.objectstore.protocol import ObjectStore
from s3stream.objectstore.url import open_object_store

__all__ = ["object_store_for", "read_task", "task_tables"]

log = logging.getLogger(__name__)

_STORES: dict[str, ObjectStore] = {}
_STORES_LOCK = threading.Lock()
_REPLANS = 3


def object_store_for(url: str) -> ObjectStore:
    """One ObjectStore per URL and process (executors run many tasks; connections are reused)."""
    with _STORES_LOCK:
        store = _STORES.get(url)
        if store is None:
            store = open_object_store(url)
            _STORES[url] = store
        return store


def _source_tables(store: ObjectStore, task: ReadTask, pos: int) -> Iterator[pa.Table]:
    for src in task.sources:
        if isinstance(src, ChunkSource):
            c = src.chunk
            if c.last_offset >= pos and c.base_offset < task.end_offset:
                yield chunk_table(store, src.key, c, max(pos, task.start_offset), task.end_offset)
        elif src.last_offset >= pos and src.base_offset < task.end_offset:
            yield from segment_tables(store, src, max(pos, task.start_offset, src.base_offset),
                                      min(task.end_offset, src.last_offset + 1),
                                      min_ts=task.min_timestamp, max_ts=task.max_timestamp)


def _replan(store: ObjectStore, task: ReadTask, pos: int) -> list[ReadTask]:
    """The rest ``[pos, end)`` of ``task`` from a fresh snapshot (data loss per ``fail_on_data_loss``)."""
    reader = LogReader(store)
    topic = reader.topic(task.topic)
    if topic.topic_id != task.topic_id:
        raise OffsetOutOfRange(f"topic {task.topic!r} was deleted (and re-created) while it was being read")
    snap = reader.fresh_snapshot(topic, task.partition)
    if snap.log_start_offset > pos:
        message = (f"{task.topic}/{task.partition}: offsets [{pos}, {snap.log_start_offset}) were removed "
                   f"(retention or compaction) before they were read")
        if task.fail_on_data_loss:
            raise OffsetOutOfRange(message + "; set failOnDataLoss=false to skip them", offset=pos,
                                   log_start_offset=snap.log_start_offset, log_end_offset=snap.log_end_offset)
        log.warning("%s; skipping them (failOnDataLoss=false)", message)
    bounds = Bounds(min_timestamp=task.min_timestamp, max_timestamp=task.max_timestamp)
    return plan_partition(snap, pos, task.end_offset, url=task.url, bounds=bounds,
                          include_headers=task.include_headers, fail_on_data_loss=task.fail_on_data_loss)


def task_tables(task: ReadTask, store: ObjectStore | None = None) -> Iterator[pa.Table]:
    """The task's records (``RECORD_SCHEMA`` columns) in offset order, each offset at most once."""
    store = store or object_store_for(task.url)
    pending = [task]
    pos = task.start_offset
    replans = 0
    while pending:
        current = pending.pop(0)
        try:
            for table in _source_tables(store, current, pos):
                table = time_filter(table, current.min_timestamp, current.max_timestamp)
                if table.num_rows:
                    pos = int(table.column("offset")[-1].as_py()) + 1
                    yield table
            pos = max(pos, current.end_offset)
        except ObjectNotFound:
            replans += 1
            if replans > _REPLANS:
                raise
            pending = _replan(store, task, pos)


def read_task(task: ReadTask, store: ObjectStore | None = None) -> Iterator[pa.RecordBatch]:
    """The task's rows as output batches (the schema of :mod:`s3stream.apps.spark.schema`)."""
    for table in task_tables(task, store):
        yield from output_batches(table, topic=task.topic, partition=task.partition,
                                  timestamp_type=task.timestamp_type, include_headers=task.include_headers)
