"""The seal worker processes of a store (parent side): started on demand, reused, replaced when lost.

Why processes, and what a worker does: :mod:`s3stream.write.sealjob`. A worker runs one job at a time; the
store's ``seal_slot`` already bounds seals to ``seal_concurrency``, so that is also the most workers
alive. A worker that dies mid-job (killed, out of memory) is replaced and the job run again on the new
one; a second loss is a retriable error for the sealer. Workers exit when the store closes, and by
themselves when the parent's end of their connection closes (a crashed parent leaves none behind), quietly:
their stderr is the application's (:func:`worker_main`).
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
from multiprocessing import Pipe
from multiprocessing.connection import Connection

from s3stream.base.errors import S3StreamError, TransientError
from s3stream.format.segment import SegmentSummary
from s3stream.write import sealjob
from s3stream.write.metrics import StoreMetrics
from s3stream.write.sealjob import (
    PROTOCOL,
    JobDone,
    JobFailed,
    OpenWorker,
    RequestCounts,
    SealJob,
    WorkerReady,
    send_job,
)

__all__ = ["SEAL_WORKER_NICE", "SealWorkers", "worker_main"]

log = logging.getLogger(__name__)

#: How much a worker lowers its CPU priority: seals are background work, appends are waited for.
SEAL_WORKER_NICE = 10
_STOP_TIMEOUT_S = 5.0
#: How a worker is started (then the fd): :func:`worker_main`, imported, never run as ``__main__`` (so the
#: message classes the parent pickles are the very classes the worker unpickles).
_WORKER_COMMAND = ("-c", "import sys; from s3stream.write.sealworker import worker_main; "
                          "sys.exit(worker_main(sys.argv))")


def worker_main(argv: list[str]) -> int:
    """A seal worker's entry point: :func:`s3stream.write.sealjob.main`, exiting quietly once the parent is gone.

    A parent that dies (SIGKILL, a crash) closes its end of the connection, and the worker's next send
    raises BrokenPipeError (a receive: EOFError or ConnectionResetError). The worker's stderr is the
    application's, so that ends the worker without a traceback; a segment it uploaded is referenced by
    no manifest, and GC removes it. SIGINT is ignored: Ctrl-C in a terminal reaches the whole process
    group, and the parent stops its workers itself (or its exit closes their connections).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return sealjob.main(argv)
    except (EOFError, ConnectionError):  # BrokenPipeError and ConnectionResetError included
        return 0


class SealWorkerFailed(S3StreamError):
    """A seal failed inside a worker with an error that could not be carried back as itself."""


class _Worker:
    def __init__(self, url: str, nice: int) -> None:
        ours, theirs = Pipe(duplex=True)
        fd = theirs.fileno()
        package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        # a seal's buffers are large and short-lived: with the pinned mmap threshold (s3stream.base.allocator) the
        # system allocator returns them to the OS at once, where mimalloc kept ~50 MiB more per worker
        env.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
        try:
            self.proc = subprocess.Popen([sys.executable, *_WORKER_COMMAND, str(fd)], pass_fds=(fd,),
                                         stdin=subprocess.DEVNULL, env=env)
        finally:
            theirs.close()
        self.conn: Connection = ours
        try:
            self.conn.send(OpenWorker(url, nice))
            ready = self.conn.recv()
        except (EOFError, OSError) as exc:
            self.stop(0.0)
            raise TransientError(f"seal worker {self.proc.pid} did not start ({self._exit_status()})") from exc
        if not isinstance(ready, WorkerReady) or ready.protocol != PROTOCOL:
            self.stop(0.0)
            raise TransientError(f"seal worker {self.proc.pid} answered {ready!r:.200} to OpenWorker (protocol "
                                 f"{PROTOCOL}): is s3stream being upgraded under this process?")
        self.ready_rss_bytes = ready.rss_bytes

    def call(self, job: SealJob) -> JobDone | JobFailed:
        try:
            send_job(self.conn, job)
            answer = self.conn.recv()
        except (EOFError, OSError) as exc:
            raise TransientError(f"seal worker {self.proc.pid} exited ({self._exit_status()})") from exc
        if not isinstance(answer, JobDone | JobFailed):
            raise TransientError(f"seal worker {self.proc.pid} answered {type(answer).__name__}")
        return answer

    def _exit_status(self) -> str:
        try:
            code = self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return "connection lost"
        return f"exit code {code}"

    def stop(self, timeout_s: float) -> None:
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.conn.close()
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class SealWorkers:
    """Seal jobs run in worker processes; the answer's requests are counted in the store's metrics."""

    def __init__(self, url: str, metrics: StoreMetrics, *, nice: int = SEAL_WORKER_NICE) -> None:
        self._url = url
        self._metrics = metrics
        self._nice = nice
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._closed = False

    def run(self, job: SealJob) -> SegmentSummary:
        """Run ``job`` in a worker and re-raise its exception here. A worker lost mid-job (killed, out of
        memory) is replaced and the job run once more; a second loss raises TransientError."""
        for attempt in (1, 2):
            worker = self._take()
            try:
                answer = worker.call(job)
            except TransientError as exc:
                self._drop(worker)
                if attempt == 2:
                    raise
                log.warning("%s", exc)
                continue
            except BaseException:
                self._drop(worker)
                raise
            self._give(worker)
            self._count(answer.requests)
            if isinstance(answer, JobDone):
                return answer.summary
            log.debug("seal of %s failed in its worker:\n%s", job.key, answer.trace)
            raise _rebuilt(answer)
        raise AssertionError("unreachable")

    @property
    def pids(self) -> list[int]:
        """Process ids of the live workers (for tests and memory accounting)."""
        return list(self.ready_rss_bytes)

    @property
    def ready_rss_bytes(self) -> dict[int, int]:
        """Each live worker's resident memory once started, before its first job (its interpreter's baseline)."""
        with self._lock:
            return {w.proc.pid: w.ready_rss_bytes for w in [*self._idle, *self._busy]}

    def close(self) -> None:
        """Stop every worker. A busy one finishes its job (its thread stops it) or is killed at the timeout;
        its connection is left to that thread, which then sees the worker gone."""
        with self._lock:
            self._closed = True
            idle, busy = list(self._idle), list(self._busy)
            self._idle.clear()
        for worker in idle:
            worker.stop(_STOP_TIMEOUT_S)
        for worker in busy:
            try:
                worker.proc.wait(timeout=_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                worker.proc.kill()

    def _take(self) -> _Worker:
        with self._lock:
            if self._closed:
                raise TransientError("the store is closing: no seal worker")
            worker = self._idle.pop() if self._idle else None
        if worker is None:
            worker = _Worker(self._url, self._nice)
        with self._lock:
            self._busy.add(worker)
        return worker

    def _give(self, worker: _Worker) -> None:
        with self._lock:
            self._busy.discard(worker)
            if not self._closed:
                self._idle.append(worker)
                return
        worker.stop(_STOP_TIMEOUT_S)

    def _drop(self, worker: _Worker) -> None:
        with self._lock:
            self._busy.discard(worker)
        worker.stop(0.0)

    def _count(self, requests: RequestCounts) -> None:
        for (op, kind), n in requests.items():
            if kind is None:
                self._metrics.requests.labels(op).inc(n)
            else:
                self._metrics.request_errors.labels(op, kind).inc(n)


def _rebuilt(answer: JobFailed) -> BaseException:
    """The worker's exception as itself when it pickled, else a SealWorkerFailed describing it."""
    if answer.error is not None:
        try:
            exc = pickle.loads(answer.error)
        except Exception:  # noqa: BLE001 - fall back to the description
            exc = None
        if isinstance(exc, BaseException):
            return exc
    return SealWorkerFailed(f"{answer.kind}: {answer.message}")
