"""The Structured Streaming source: per-partition offsets, rate limits, AvailableNow, data loss.

Offsets are Spark's Kafka-source JSON, ``{"topic": {"partition": next_offset}}``: for each partition the
next offset to read (everything below it was read). Spark checkpoints them, so a restarted query goes on
from its checkpoint without loss or duplicates: micro-batch ``[start, end)`` is planned, from a fresh
manifest snapshot, exactly like a batch read of those offsets (:mod:`s3stream.apps.spark.planning`).

* ``initialOffset``: ``startingOffsets`` / ``startingTimestamp`` (default latest) of every subscribed
  partition; partitions that appear later (a topic or pattern gains partitions) start at their log start.
* ``latestOffset(start, limit)``: the log end of every partition, capped by the read limit:
  ``maxOffsetsPerTrigger`` (:class:`ReadMaxRows`) is split over the partitions in proportion to their
  backlog (largest remainders, so the batch takes exactly ``min(limit, backlog)`` offsets); with
  ``Trigger.AvailableNow`` never past the log ends recorded by ``prepareForTriggerAvailableNow``.
* data loss: when a partition's log start moved past a checkpointed offset (retention, DeleteRecords),
  ``failOnDataLoss=true`` fails the query naming the offsets lost; ``false`` logs a warning and skips to
  the log start. Executors apply the same rule to objects removed after planning (:mod:`s3stream.apps.spark.tasks`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from s3stream.apps.spark.options import ReadOptions
from s3stream.apps.spark.planning import ReadTask, plan_partition
from s3stream.apps.spark.positions import resolve_start, subscribed
from s3stream.apps.spark.snapshot import LogReader, PartitionSnapshot
from s3stream.apps.spark.tasks import read_task
from s3stream.base.errors import OffsetOutOfRange

__all__ = ["Offsets", "StreamReader", "rate_limit"]

log = logging.getLogger(__name__)

#: ``{topic: {partition (as a string): next offset}}``
Offsets = dict[str, dict[str, int]]


def _flat(offsets: Offsets) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(v) for t, parts in offsets.items() for p, v in parts.items()}


def _nested(flat: dict[tuple[str, int], int]) -> Offsets:
    out: Offsets = {}
    for (t, p), v in sorted(flat.items()):
        out.setdefault(t, {})[str(p)] = v
    return out


def rate_limit(start: dict[tuple[str, int], int], latest: dict[tuple[str, int], int],
               limit: int) -> dict[tuple[str, int], int]:
    """End offsets taking ``min(limit, total backlog)`` offsets, split in proportion to each backlog."""
    backlog = {k: max(0, latest[k] - start.get(k, latest[k])) for k in latest}
    total = sum(backlog.values())
    if total <= limit:
        return dict(latest)
    shares = {k: limit * b // total for k, b in backlog.items()}
    left = limit - sum(shares.values())
    by_remainder = sorted(backlog, key=lambda k: (-(limit * backlog[k] % total), k))
    for k in by_remainder[:left]:
        shares[k] += 1
    return {k: start.get(k, latest[k]) + shares[k] for k in latest}


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of new records; methods other than ``read`` run in Spark's driver-side worker."""

    def __init__(self, opts: ReadOptions) -> None:
        self._opts = opts
        self._reader: LogReader | None = None
        self._target: dict[tuple[str, int], int] | None = None

    def __getstate__(self) -> dict[str, object]:
        return {"_opts": self._opts, "_reader": None, "_target": None}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)

    def _log_reader(self) -> LogReader:
        if self._reader is None:
            self._reader = LogReader.open(self._opts.url)
        return self._reader

    def _snapshots(self) -> list[PartitionSnapshot]:
        reader = self._log_reader()
        return [reader.fresh_snapshot(topic, p) for topic, p in subscribed(self._opts, reader)]

    # -- offsets ---------------------------------------------------------------------------------------

    def initialOffset(self) -> Offsets:
        reader = self._log_reader()
        return _nested({(s.topic.name, s.partition): resolve_start(self._opts, reader, s) for s in self._snapshots()})

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self._opts.max_offsets_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {(s.topic.name, s.partition): s.log_end_offset for s in self._snapshots()}

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        begin = _flat(start)
        first: dict[tuple[str, int], int] = {}
        latest: dict[tuple[str, int], int] = {}
        for s in self._snapshots():
            key = (s.topic.name, s.partition)
            first[key] = begin.get(key, s.log_start_offset)  # a new partition starts at its log start
            end = s.log_end_offset
            if self._target is not None:
                end = min(end, self._target.get(key, first[key]))
            latest[key] = max(end, first[key])
        for key, value in begin.items():  # partitions no longer subscribed keep their position
            first.setdefault(key, value)
            latest.setdefault(key, value)
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(first, latest, limit.max_rows)
        return _nested(latest)

    def reportLatestOffset(self) -> Offsets | None:
        return _nested({(s.topic.name, s.partition): s.log_end_offset for s in self._snapshots()})

    # -- planning and reading --------------------------------------------------------------------------

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        begin, stop = _flat(start), _flat(end)
        tasks: list[ReadTask] = []
        for snap in self._snapshots():
            key = (snap.topic.name, snap.partition)
            if key not in stop:
                continue
            first = self._checked_start(snap, begin.get(key, snap.log_start_offset), stop[key])
            tasks.extend(plan_partition(snap, first, stop[key], url=self._opts.url,
                                        include_headers=self._opts.include_headers,
                                        fail_on_data_loss=self._opts.fail_on_data_loss))
        return [InputPartition(t) for t in tasks]

    def _checked_start(self, snap: PartitionSnapshot, first: int, end: int) -> int:
        """``first``, or the log start when retention overtook it and failOnDataLoss is false."""
        if first >= snap.log_start_offset or first >= end:
            return first
        lost_to = min(snap.log_start_offset, end)
        message = (f"{snap.topic.name}/{snap.partition}: offsets [{first}, {lost_to}) were removed by "
                   f"retention before the query read them (log start is now {snap.log_start_offset})")
        if self._opts.fail_on_data_loss:
            raise OffsetOutOfRange(message + "; set failOnDataLoss=false to skip them", offset=first,
                                   log_start_offset=snap.log_start_offset, log_end_offset=snap.log_end_offset)
        log.warning("%s; skipping them (failOnDataLoss=false)", message)
        return snap.log_start_offset

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        task = partition.value
        if isinstance(task, ReadTask):
            yield from read_task(task)

    def commit(self, end: Offsets) -> None:
        """Nothing to do: positions live in Spark's checkpoint, and retention never waits for readers."""

    def stop(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
