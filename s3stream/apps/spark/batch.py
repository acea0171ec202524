"""The batch reader of the ``s3stream`` data source (``spark.read.format("s3stream")``).

Planning runs once, on the driver side (in Spark's planning worker): resolve the subscribed partitions
and their start/end offsets (:mod:`s3stream.apps.spark.positions`), take one manifest snapshot per partition,
and turn each into read tasks (:func:`s3stream.apps.spark.planning.plan_partition`): one input partition per
sealed segment or per run of WAL-object chunks. ``read`` runs on executors and yields Arrow record
batches (:mod:`s3stream.apps.spark.tasks`). Filter pushdown (:mod:`s3stream.apps.spark.pushdown`) narrows the plan
before it is made; :class:`PushdownBatchReader` offers it, :class:`BatchReader` does not.

Which one the source returns follows the session's setting, which a data source cannot see; but Spark
plans a Python read in one of two worker modules. ``data_source_pushdown_filters`` runs only when
``spark.sql.python.filterPushdown.enabled`` is true and the query has filters, and calls ``pushFilters``;
``plan_data_source_read`` plans every other read and, on a session without that setting (Spark's
default), refuses a reader that defines ``pushFilters`` (``DATA_SOURCE_PUSHDOWN_DISABLED``). So the
pushdown reader is returned only to the former (:func:`pushdown_planner_calling`); a later pyspark
that renames it costs the pushdown, never the query.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition

from s3stream.apps.spark.options import ReadOptions
from s3stream.apps.spark.planning import Bounds, ReadTask, plan_partition
from s3stream.apps.spark.positions import resolve_end, resolve_start, subscribed
from s3stream.apps.spark.pushdown import apply_filters
from s3stream.apps.spark.snapshot import LogReader
from s3stream.apps.spark.tasks import read_task

__all__ = ["BatchReader", "PushdownBatchReader", "plan_batch", "pushdown_planner_calling"]

#: The pyspark worker module that plans a read with filter pushdown (pyspark/sql/worker/).
_PUSHDOWN_PLANNER = "data_source_pushdown_filters"


def pushdown_planner_calling() -> bool:
    """Whether Spark's filter-pushdown planner is on the call stack (see the module docstring)."""
    frame = inspect.currentframe()
    try:
        while frame is not None:
            if Path(frame.f_code.co_filename).stem == _PUSHDOWN_PLANNER:
                return True
            frame = frame.f_back
        return False
    finally:
        del frame  # no reference cycle through this frame


def plan_batch(opts: ReadOptions, bounds: Bounds | None = None) -> list[ReadTask]:
    """Every read task of a batch query (one manifest snapshot per subscribed partition)."""
    bounds = bounds or Bounds()
    tasks: list[ReadTask] = []
    if bounds.impossible:
        return tasks
    with LogReader.open(opts.url) as reader:
        for topic, p in subscribed(opts, reader):
            if not bounds.allows(topic.name, p):
                continue
            snap = reader.fresh_snapshot(topic, p)
            start, end = resolve_start(opts, reader, snap), resolve_end(opts, reader, snap)
            tasks.extend(plan_partition(snap, start, end, url=opts.url, bounds=bounds,
                                        include_headers=opts.include_headers,
                                        fail_on_data_loss=opts.fail_on_data_loss))
    return tasks


class BatchReader(DataSourceReader):
    """Plans from manifest snapshots; reads planned byte ranges on executors."""

    def __init__(self, opts: ReadOptions) -> None:
        self._opts = opts
        self._bounds = Bounds()

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(task) for task in plan_batch(self._opts, self._bounds)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        task = partition.value
        if isinstance(task, ReadTask):
            yield from read_task(task)


class PushdownBatchReader(BatchReader):
    """A :class:`BatchReader` that accepts filters on topic, partition, offset and timestamp."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        self._bounds, rest = apply_filters(filters, self._bounds)
        return rest
