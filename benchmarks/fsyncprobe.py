"""A raw fsync probe in a process of its own: the WAL disk's fsync latency while a benchmark phase runs.

The engine benchmark judges append latency against the raw fsync latency of the WAL's disk. Measured
alone (:func:`benchmarks.rawlimits.fsync_latency`) the disk is idle; while the latency phase runs, the
same disk also takes the phase's own WAL writes and, when the S3 server runs on this machine (SeaweedFS
in the benchmark keeps its volumes on the same filesystem), the server's writes of every PUT, and every
writer's fsyncs slow down. The probe measures the disk in that condition and nothing of s3stream: a
separate interpreter (no GIL shared with the engine) appends ``block_bytes`` and fdatasyncs every
``interval_s`` to a file of its own for ``seconds``, then prints its latencies as JSON. It stops by itself.

Run alone: ``python -m benchmarks.fsyncprobe DIR SECONDS [BLOCK_BYTES] [INTERVAL_S]``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from benchmarks.measure import LatencySummary

__all__ = ["FsyncProbe", "probe"]

_SYNC = getattr(os, "fdatasync", os.fsync)


def probe(directory: Path, seconds: float, block_bytes: int = 4096, interval_s: float = 0.005) -> list[float]:
    """Append + fdatasync ``block_bytes`` every ``interval_s`` for ``seconds``; the latencies in seconds."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"fsync-probe-{os.getpid()}.bin"
    block = os.urandom(block_bytes)
    samples: list[float] = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    try:
        end = time.perf_counter() + seconds
        while (start := time.perf_counter()) < end:
            os.write(fd, block)
            _SYNC(fd)
            done = time.perf_counter()
            samples.append(done - start)
            time.sleep(max(0.0, interval_s - (done - start)))
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return samples


class FsyncProbe:
    """Runs :func:`probe` in a child process for the duration of a ``with`` block (at most ``seconds``)."""

    def __init__(self, directory: Path, seconds: float, *, block_bytes: int = 4096, interval_s: float = 0.005) -> None:
        self._args = [sys.executable, "-m", "benchmarks.fsyncprobe", str(directory), str(seconds), str(block_bytes),
                      str(interval_s)]
        self._seconds = seconds
        self._proc: subprocess.Popen[str] | None = None
        self.summary: LatencySummary | None = None

    def __enter__(self) -> FsyncProbe:
        root = Path(__file__).resolve().parents[1]  # the repository: ``benchmarks`` is not an installed package
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
    print(json.dumps(probe(directory, seconds, block, interval)))


if __name__ == "__main__":
    main(sys.argv[1:])
