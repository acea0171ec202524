"""Writing DataFrames to a topic: tasks stage segment objects, the driver's commit publishes them.

Protocol (``df.write.format("s3stream")`` and ``df.writeStream.format("s3stream")``, append only):

1. **write** (each Spark task, on an executor): :class:`~s3stream.apps.spark.staging.Stager` validates the
   task's rows and PUTs segment objects with 0-based offsets; the commit message lists them with their
   ``(task, seq)`` order. A task that fails deletes what it staged.
2. **commit** (driver side, once every task succeeded): :func:`publish` opens a Store (a producer
   process: it has a node and WAL namespace like any other) and, per written partition in a fixed order
   (topic, partition), calls ``PartitionLog.publish_segments``. That **claims the partition as its writer**
   (a process currently appending to it is fenced, exactly as when another producer takes over: what it
   flushed to object storage is sealed first; what it acknowledged with ``ack=wal`` but had not flushed is
   lost, as in any takeover), then adds the staged objects in task order at the
   next offsets in ONE manifest commit. Offsets are therefore consecutive per partition and in the
   DataFrame's order within each task. Partitions are committed one after another: a failure part-way
   leaves the earlier partitions published (like a non-transactional Kafka producer).
3. **abort** (some task failed, or the commit failed): delete every staged object that no manifest
   references (checked against the latest manifest, so nothing a partial commit published is touched).
   Whatever a crash leaves behind is an orphan for GC. A failed write thus shows no records.

Streaming: micro-batch ``batchId`` of query ``writerId`` (default: derived from ``checkpointLocation``) is
published with the marker ``(writerId, batchId)``; the manifest keeps the last batch id committed per
writer and partition, so a micro-batch Spark replays after a failure is not appended twice (its new
staged objects are deleted at once).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from s3stream.apps.spark.options import WriteOptions
from s3stream.apps.spark.publish import discard_unpublished, publish
from s3stream.apps.spark.snapshot import LogReader, TopicInfo
from s3stream.apps.spark.staging import StagedObject, Stager
from s3stream.apps.spark.tasks import object_store_for
from s3stream.base.errors import InvalidRecord
from s3stream.base.settings import StoreSettings

__all__ = ["BatchWriter", "StagedMessage", "StreamWriter"]

log = logging.getLogger(__name__)


@dataclass
class StagedMessage(WriterCommitMessage):
    """A task's commit message: the objects it staged, in its order."""

    staged: tuple[StagedObject, ...] = ()


def _staged(messages: Sequence[WriterCommitMessage | None]) -> list[StagedObject]:
    out = [o for m in messages if isinstance(m, StagedMessage) for o in m.staged]
    return sorted(out, key=lambda o: (o.task, o.seq))


class _Staging:
    """The executor half shared by the batch and the streaming writer."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        names = set(schema.fieldNames())
        if "value" not in names:
            raise InvalidRecord(f"a DataFrame written to s3stream needs a 'value' column; it has {sorted(names)}")
        if opts.topic is None and "topic" not in names:
            raise InvalidRecord("no target topic: give option 'topic' or a 'topic' column")
        self._opts = opts
        self._topics: dict[str, TopicInfo] = {}
        if opts.topic is not None:
            with LogReader.open(opts.url) as reader:
                self._topics[opts.topic] = reader.topic(opts.topic)

    def _write(self, iterator: Iterator[pa.RecordBatch]) -> StagedMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        task = ctx.partitionId() if ctx is not None else 0
        stager = Stager(object_store_for(self._opts.url), task=task, topic=self._opts.topic, topics=self._topics,
                        row_group_bytes=StoreSettings().segment_row_group_bytes)
        try:
            for batch in iterator:
                stager.add(batch)
            return StagedMessage(tuple(stager.finish()))
        except BaseException:
            stager.discard()
            raise


class BatchWriter(_Staging, DataSourceArrowWriter):
    """``df.write.format("s3stream").option("url", ...).option("topic", ...).mode("append").save()``."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        publish(self._opts.url, _staged(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        discard_unpublished(self._opts.url, _staged(messages))


class StreamWriter(_Staging, DataSourceStreamArrowWriter):
    """``df.writeStream.format("s3stream")...``: idempotent per micro-batch (see the module docstring)."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        writer_id = self._opts.writer_id
        if writer_id is None:
            log.warning("streaming write without writerId or checkpointLocation: a replayed micro-batch "
                        "would be appended again")
        publish(self._opts.url, _staged(messages), marker=None if writer_id is None else (writer_id, batchId))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        discard_unpublished(self._opts.url, _staged(messages))
