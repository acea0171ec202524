"""One output segment of a cleaning round, encoded and uploaded while the round still filters its input.

The round's thread hands the survivors of each chunk to :meth:`OutputStream.send`; a worker thread encodes
them row group by row group and uploads the object part by part (:func:`s3stream.write.seal.write_segment_stream`),
so when the group's last chunk is filtered only that chunk, the footer and the upload's completion are
left (building the whole output first and PUTting it after was the round's longest wait: its last, largest
output). At most :data:`QUEUED` survivor tables wait for the worker. A failure on either side aborts the
upload, so nothing is left visible; the error surfaces in the round's thread.
"""

from __future__ import annotations

import dataclasses
import itertools
import queue
from collections.abc import Iterator
from concurrent.futures import Executor, Future
from typing import TYPE_CHECKING

import pyarrow as pa

from s3stream.manifest.model import SegmentRef
from s3stream.write.seal import write_segment_stream

if TYPE_CHECKING:
    from s3stream.engine.runtime import Runtime
    from s3stream.partition.log import PartitionLog

__all__ = ["QUEUED", "OutputStream"]

#: Survivor tables waiting for the worker (each at most a read chunk).
QUEUED = 2
_POLL_S = 0.05


class _Aborted(Exception):
    """The round stopped before the output was complete: the upload must not complete."""


_END = object()
_ABORT = object()


class OutputStream:
    """The output segment replacing ``group``: survivors in, a :class:`SegmentRef` out (not yet referenced)."""

    def __init__(self, pool: Executor, rt: Runtime, plog: PartitionLog, group: list[SegmentRef]) -> None:
        self._queue: queue.Queue[object] = queue.Queue(maxsize=QUEUED)
        self._pool, self._rt, self._plog, self._group = pool, rt, plog, group
        # background=manual: the pool is inline, so the writer cannot run beside the round; it runs at end(), over
        # the survivors held until then (the group's survivors in memory, instead of QUEUED tables)
        self._held: list[pa.Table] | None = [] if rt.settings.background == "manual" else None
        self._future: Future[SegmentRef] | None = (
            None if self._held is not None else pool.submit(self._write, rt, plog, group))

    def send(self, table: pa.Table) -> None:
        """Queue survivors (in offset order) for the output; raises the worker's error if it failed."""
        if table.num_rows:
            self._put(table)

    def end(self) -> None:
        """No more survivors: the worker completes the upload (collect it with :meth:`result`)."""
        self._put(_END)

    def result(self) -> SegmentRef:
        """Wait for the ended output to be uploaded; its manifest entry (or the worker's error)."""
        assert self._future is not None, "result() before end()"
        return self._future.result()

    def finish(self) -> SegmentRef:
        """:meth:`end`, then :meth:`result`."""
        self.end()
        return self.result()

    def abort(self) -> SegmentRef | None:
        """Stop the output (ended or not); the entry of an object completed anyway (to delete), else None."""
        if self._future is None:  # held survivors, never written: nothing was uploaded
            return None
        if self._held is not None:  # written at end(), in the caller's thread: done either way
            return None if self._future.exception() is not None else self._future.result()
        try:
            self._queue.put_nowait(_ABORT)
        except queue.Full:  # the worker is busy with what is queued, or gone: make room for the signal
            _drain(self._queue)
            self._queue.put_nowait(_ABORT)
        try:
            return self._future.result()
        except Exception:  # noqa: BLE001 - the round is already failing with its own error
            return None

    def _put(self, item: object) -> None:
        if self._held is not None:
            if item is _END:
                self._future = self._pool.submit(self._write, self._rt, self._plog, self._group)
            else:
                assert isinstance(item, pa.Table)
                self._held.append(item)
            return
        assert self._future is not None
        while True:
            if self._future.done():
                self._future.result()  # raises the worker's error
                raise AssertionError("the output finished before its end was sent")
            try:
                self._queue.put(item, timeout=_POLL_S)
                return
            except queue.Full:
                continue

    def _tables(self) -> Iterator[pa.Table]:
        if self._held is not None:
            held, self._held = self._held, []
            yield from held
            return
        while True:
            item = self._queue.get()
            if item is _END:
                return
            if item is _ABORT:
                raise _Aborted("cleaning round stopped")
            assert isinstance(item, pa.Table)
            yield item

    def _write(self, rt: Runtime, plog: PartitionLog, group: list[SegmentRef]) -> SegmentRef:
        tables = self._tables()
        first = next(tables, None)  # its first timestamp goes in the footer (CLEAN-GRP-2 keeps offsets and times)
        first_ts = int(first.column("timestamp")[0].as_py()) if first is not None else -1
        ref = write_segment_stream(rt, topic_id=plog.topic_id, partition=plog.partition,
                                   tables=itertools.chain([] if first is None else [first], tables),
                                   base_offset=group[0].base_offset, last_offset=group[-1].last_offset,
                                   first_batch_max_ts=first_ts, cleaned=True, crash_point="clean.output_put")
        return dataclasses.replace(ref, created_ms=group[-1].created_ms)  # CLEAN-GRP-2: the last source's mtime


def _drain(q: queue.Queue[object]) -> None:
    while True:
        try:
            q.get_nowait()
        except queue.Empty:
            return
