"""What a seal worker process does: read one rolled segment's records, encode and upload the segment object.

A seal is mostly Python-driven I/O and encoding (GETs of WAL-object chunks, Parquet encoding fed through
a Python sink, the upload), and in a sealer thread all of it competes for the GIL with the appends whose
acknowledgement latency matters: the engine benchmark's ack p99 at half load was several times the no-seal
figure while seals ran. In a worker process at a lower CPU priority a seal shares nothing with appends
but the cores.

The parent (:mod:`s3stream.write.sealworker`) keeps every decision: it names the object (ids and the clock are
its own), commits the manifest and hits the crash points. A worker gets a :class:`SealJob`: the key, the
offset range and where each record lives (WAL-object chunks it GETs itself, tail-cache batches sent
along), and answers with the encoder's :class:`~s3stream.format.segment.SegmentSummary` and the requests it made,
which the parent counts in its own metrics. Messages travel over a ``multiprocessing`` connection the
worker inherits as a file descriptor (:data:`WORKER_COMMAND` + ``FD``); the store URL comes through it
too, never on the command line, and credentials come from the environment the worker inherits.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import sys
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection

import pyarrow as pa
from prometheus_client import CollectorRegistry, Counter

from s3stream.base.errors import CorruptData
from s3stream.format.segment import SegmentSummary
from s3stream.objectstore.metered import ERROR_KINDS, OPS, MeteredObjectStore
from s3stream.objectstore.protocol import ObjectStore
from s3stream.read.tiers import ChunkCache, LogView, MemBatch, SegmentReaderCache
from s3stream.read.walscan import ChunkRef
from s3stream.write.seal import SEAL_READ_BYTES, read_chunks, stream_segment

__all__ = ["PROTOCOL", "WORKER_COMMAND", "JobDone", "JobFailed", "OpenWorker", "RequestCounts", "SealJob",
           "WorkerReady", "main", "receive_job", "run_job",
           "send_job"]

#: How a worker is started (then the fd): imported, never run as ``__main__``, so the message classes the
#: parent pickles are the very classes the worker unpickles.
WORKER_COMMAND = ("-c", "import sys; from s3stream.write.sealjob import main; sys.exit(main(sys.argv))")

#: ``(op, None) -> requests`` and ``(op, kind) -> failed requests`` made for one job.
RequestCounts = dict[tuple[str, str | None], int]


#: Bumped whenever a message changes: a worker started from other code (the package was upgraded under a
#: running process) is refused at once instead of misreading jobs.
PROTOCOL = 1


@dataclass(frozen=True, slots=True)
class OpenWorker:
    """The first message to a worker: the store to open and how much to lower its CPU priority."""

    url: str
    nice: int
    protocol: int = PROTOCOL


@dataclass(frozen=True, slots=True)
class WorkerReady:
    """A worker's answer to :class:`OpenWorker`: it runs, and its resident memory before any job."""

    pid: int
    rss_bytes: int
    protocol: int = PROTOCOL


@dataclass(frozen=True, slots=True)
class SealJob:
    """Seal the records at offsets ``[base_offset, end_offset)`` of ``log_id`` as the object ``key``."""

    log_id: str
    key: str
    base_offset: int
    end_offset: int
    first_batch_max_ts: int
    chunks: tuple[ChunkRef, ...]
    memory: tuple[MemBatch, ...]
    row_group_bytes: int
    part_bytes: int

    @classmethod
    def of(cls, view: LogView, *, log_id: str, key: str, base_offset: int, end_offset: int,
           first_batch_max_ts: int, row_group_bytes: int, part_bytes: int) -> SealJob:
        """The job for ``[base_offset, end_offset)`` of ``view``: the WAL-object chunks in that range, and
        the tail-cache batches only past the last of them (records no WAL object holds yet). The worker
        GETs what a WAL object holds rather than receiving a copy of the parent's cache: its memory stays
        one upload part and its prefetch, whatever ``cache.bytes`` is."""
        chunks = tuple(c for c in view.chunks
                       if c.chunk.last_offset >= base_offset and c.chunk.base_offset < end_offset)
        uploaded_end = max([base_offset, *(c.chunk.last_offset + 1 for c in chunks)])
        memory = tuple(m for m in view.memory if m.last >= uploaded_end and m.first < end_offset)
        return cls(log_id, key, base_offset, end_offset, first_batch_max_ts, chunks, memory, row_group_bytes,
                   part_bytes)


def send_job(conn: Connection, job: SealJob) -> None:
    """Send ``job``: its tail-cache batches as one Arrow IPC stream after it, so the worker maps them from
    the received bytes (one copy) instead of unpickling each buffer (two)."""
    conn.send(dataclasses.replace(job, memory=tuple(MemBatch(m.first, m.last, m.nbytes, None) for m in job.memory)))
    sink = pa.BufferOutputStream()
    if job.memory:
        with pa.ipc.new_stream(sink, job.memory[0].batch.schema) as stream:
            for m in job.memory:
                stream.write_batch(m.batch)
    conn.send_bytes(sink.getvalue())


def receive_job(conn: Connection, job: SealJob) -> SealJob:
    """The rest of a job :func:`send_job` sent: its batches, zero-copy views of the received stream."""
    payload = conn.recv_bytes()
    if not job.memory:
        return job
    batches = list(pa.ipc.open_stream(pa.py_buffer(payload)))
    if len(batches) != len(job.memory):
        raise CorruptData(f"seal job {job.key}: {len(batches)} tail-cache batches for {len(job.memory)} bounds")
    memory = tuple(MemBatch(m.first, m.last, m.nbytes, b) for m, b in zip(job.memory, batches, strict=True))
    return dataclasses.replace(job, memory=memory)


@dataclass(frozen=True, slots=True)
class JobDone:
    summary: SegmentSummary
    requests: RequestCounts


@dataclass(frozen=True, slots=True)
class JobFailed:
    """``error`` is the pickled exception when it pickles; ``kind``/``message``/``trace`` always describe it."""

    error: bytes | None
    kind: str
    message: str
    trace: str
    requests: RequestCounts


def run_job(job: SealJob, objstore: ObjectStore, *, chunks: ChunkCache, segments: SegmentReaderCache
            ) -> SegmentSummary:
    """Read, encode and upload one segment (the same streaming seal a sealer thread runs); nothing of the
    range is sealed yet (``next_offset`` is its base)."""
    view = LogView(log_start_offset=job.base_offset, log_end_offset=job.end_offset, next_offset=job.base_offset,
                   chunks=job.chunks, memory=job.memory)
    tables = read_chunks(view, job.base_offset, job.end_offset, log_id=job.log_id, segments=segments,
                         chunks=chunks)
    return stream_segment(objstore, job.key, tables, base_offset=job.base_offset, last_offset=job.end_offset - 1,
                          first_batch_max_ts=job.first_batch_max_ts, row_group_bytes=job.row_group_bytes,
                          part_bytes=job.part_bytes)


class _Counted:
    """The worker's store behind its own request counters, read as per-job deltas."""

    def __init__(self, inner: ObjectStore) -> None:
        self._registry = CollectorRegistry()
        self.store = MeteredObjectStore(
            inner, requests=Counter("requests", "", ["op"], registry=self._registry),
            errors=Counter("errors", "", ["op", "kind"], registry=self._registry))
        self._seen: RequestCounts = {}

    def take(self) -> RequestCounts:
        now: RequestCounts = {}
        for op in OPS:
            now[(op, None)] = int(self._registry.get_sample_value("requests_total", {"op": op}) or 0)
            for kind in ERROR_KINDS:
                now[(op, kind)] = int(self._registry.get_sample_value("errors_total", {"op": op, "kind": kind}) or 0)
        delta = {k: v - self._seen.get(k, 0) for k, v in now.items() if v != self._seen.get(k, 0)}
        self._seen = now
        return delta


def _failure(exc: BaseException, requests: RequestCounts) -> JobFailed:
    blob: bytes | None
    try:
        blob = pickle.dumps(exc)
        pickle.loads(blob)  # an exception whose constructor cannot take its args back fails here, not in the parent
    except Exception:  # noqa: BLE001 - any exception must still be reported, pickled or not
        blob = None
    return JobFailed(blob, type(exc).__name__, str(exc), traceback.format_exc(), requests)


def _warm_up() -> None:
    """Load what every seal uses (Arrow IPC, compute kernels, the Parquet writer) before reporting ready, so
    the RSS reported is the worker's baseline and the first job's growth is its buffers."""
    from s3stream.base.records import RECORD_SCHEMA
    from s3stream.format.segment import encode_segment

    table = RECORD_SCHEMA.empty_table()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, RECORD_SCHEMA) as stream:
        stream.write_table(table)
    list(pa.ipc.open_stream(sink.getvalue()))
    encode_segment(table, base_offset=0, last_offset=0, first_batch_max_timestamp=-1, row_group_bytes=1 << 20)


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def serve(conn: Connection) -> None:
    """Answer jobs until the parent says stop (``None``) or goes away."""
    from s3stream.base.allocator import tune_allocator
    from s3stream.base.clock import SystemClock
    from s3stream.base.ids import IdSource
    from s3stream.objectstore.url import open_object_store

    hello = conn.recv()
    if not isinstance(hello, OpenWorker) or hello.protocol != PROTOCOL:
        raise SystemExit(f"s3stream seal worker (protocol {PROTOCOL}): refusing {hello!r:.200}")
    if hello.nice:
        os.nice(hello.nice)
    tune_allocator()
    counted = _Counted(open_object_store(hello.url, clock=SystemClock(), ids=IdSource()))
    _warm_up()
    conn.send(WorkerReady(os.getpid(), _rss_bytes()))
    chunks = ChunkCache(counted.store, max_bytes=2 * SEAL_READ_BYTES)  # the prefetch (read chunks are in use)
    segments = SegmentReaderCache(counted.store, max_entries=4)
    try:
        while True:
            try:
                job = conn.recv()
                if job is None:
                    return
                job = receive_job(conn, job)
            except EOFError:
                return
            try:
                summary = run_job(job, counted.store, chunks=chunks, segments=segments)
            except Exception as exc:  # noqa: BLE001 - reported to the parent, which retries the seal
                conn.send(_failure(exc, counted.take()))
            else:
                conn.send(JobDone(summary, counted.take()))
    finally:
        counted.store.close()


def main(argv: list[str]) -> int:
    """The worker process's entry point (:data:`WORKER_COMMAND`); ``argv[1]`` is the connection's fd."""
    if len(argv) != 2 or not argv[1].isdigit():
        print("a seal worker takes the fd of its connection (started by s3stream, not by hand)", file=sys.stderr)
        return 2
    with Connection(int(argv[1])) as conn:
        serve(conn)
    return 0

