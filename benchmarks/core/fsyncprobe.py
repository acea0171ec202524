"""A raw fsync probe in a process of its own: the WAL disk's fsync latency while a benchmark phase runs.

The engine benchmark judges append latency against the raw fsync latency of the WAL's disk. Measured
alone (:func:`benchmarks.core.rawlimits.fsync_latency`) the disk is idle; while the latency phase runs, the
same disk also takes the phase's own WAL writes and, when the S3 server runs on this machine (SeaweedFS
in the benchmark keeps its volumes on the same filesystem), the server's writes of every PUT, and every
writer's fsyncs slow down. The probe measures the disk in that condition and nothing of s3stream: a
separate interpreter (no GIL shared with the engine) runs ``threads`` writers, each appending
``block_bytes`` to a file of its own and fdatasyncing it every ``interval_s`` for ``seconds``, then
prints every write + fdatasync latency as JSON. It stops by itself.

Each writer keeps a schedule (starts staggered over one interval) and never bursts to catch up, exactly
like a rate-limited producer (:class:`benchmarks.core.producers.Producers`): a disk stall delays each writer's
operation in flight once, so a probe with the producers' count, block size and pace samples stalls as
often as the appends do.

Run alone: ``python -m benchmarks.core.fsyncprobe DIR SECONDS [BLOCK_BYTES] [INTERVAL_S] [THREADS]``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import TracebackType

from benchmarks.core.measure import LatencySummary

__all__ = ["FsyncProbe", "probe"]

_SYNC = getattr(os, "fdatasync", os.fsync)


def _writer(path: Path, seconds: float, block_bytes: int, interval_s: float, offset_s: float) -> list[float]:
    """One writer: append + fdatasync ``block_bytes`` on a schedule of ``interval_s``; its latencies."""
    block = os.urandom(block_bytes)
    samples: list[float] = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    try:
        now = time.perf_counter()
        end, next_at = now + seconds, now + offset_s
        while True:
            time.sleep(max(0.0, next_at - time.perf_counter()))
            start = time.perf_counter()
            if start >= end:
                break
            os.write(fd, block)
            _SYNC(fd)
            done = time.perf_counter()
            samples.append(done - start)
            next_at = max(next_at + interval_s, done)  # keep the schedule, never burst to catch up
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return samples


def probe(directory: Path, seconds: float, block_bytes: int = 4096, interval_s: float = 0.005,
          threads: int = 1) -> list[float]:
    """``threads`` writers, each appending + fdatasyncing ``block_bytes`` every ``interval_s`` to a file of
    its own for ``seconds``; every latency in seconds."""
    if threads < 1 or block_bytes < 1 or interval_s <= 0:
        raise ValueError("the fsync probe needs threads >= 1, block_bytes >= 1 and interval_s > 0")
    directory.mkdir(parents=True, exist_ok=True)
    results: list[list[float]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []

    def run(index: int) -> None:
        path = directory / f"fsync-probe-{os.getpid()}-{index}.bin"
        try:
            results[index] = _writer(path, seconds, block_bytes, interval_s, interval_s * index / threads)
        except BaseException as exc:  # noqa: BLE001 - re-raised below, after the other writers finish
            errors.append(exc)

    workers = [threading.Thread(target=run, args=(i,), name=f"fsync-probe-{i}") for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    if errors:
        raise errors[0]
    return [x for samples in results for x in samples]


class FsyncProbe:
    """Runs :func:`probe` in a child process for the duration of a ``with`` block (at most ``seconds``)."""

    def __init__(self, directory: Path, seconds: float, *, block_bytes: int = 4096, interval_s: float = 0.005,
                 threads: int = 1) -> None:
        self._args = [sys.executable, "-m", "benchmarks.core.fsyncprobe", str(directory), str(seconds),
                      str(block_bytes), str(interval_s), str(threads)]
        self._seconds = seconds
        self._proc: subprocess.Popen[str] | None = None
        self.summary: LatencySummary | None = None

    def __enter__(self) -> FsyncProbe:
        root = Path(__file__).resolve().parents[2]  # the repository: ``benchmarks`` is not an installed package
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
        self._proc = subprocess.Popen(self._args, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                                      env=env)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        proc = self._proc
        if proc is None:
            return
        try:
            out, _ = proc.communicate(timeout=self._seconds + 30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
        if proc.returncode != 0 and exc is None:
            raise RuntimeError(f"the fsync probe exited with {proc.returncode}")
        if proc.returncode == 0:
            self.summary = LatencySummary.of_seconds(json.loads(out))


def main(argv: list[str]) -> None:
    directory, seconds = Path(argv[0]), float(argv[1])
    block = int(argv[2]) if len(argv) > 2 else 4096
    interval = float(argv[3]) if len(argv) > 3 else 0.005
    threads = int(argv[4]) if len(argv) > 4 else 1
    print(json.dumps(probe(directory, seconds, block, interval, threads)))


if __name__ == "__main__":
    main(sys.argv[1:])
