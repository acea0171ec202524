"""Measuring helpers: elapsed time, latency percentiles, CPU use, peak RSS, and the machine's facts.

Vocabulary: **MB** is 10^6 bytes (bandwidths in MB/s, as disks and networks quote them); **MiB/GiB**
are 2^20/2^30 bytes (buffer sizes, as the settings quote them). Latencies are reported in
milliseconds; percentiles use the nearest-rank method on the whole sample (no histogram buckets).

Peak RSS: on Linux the kernel's high-water mark ``VmHWM`` is reset by writing ``5`` to
``/proc/self/clear_refs``, so a phase's peak is exact; a 20 ms sampler of ``/proc/self/statm`` runs as
well (and alone where the reset is not allowed), and also samples the bytes Arrow's memory pool holds
(the rest of the RSS is the Python heap, ``bytes`` objects, libraries and allocator slack), and
optional caller-given gauges (the engine's buffer and cache sizes), keeping each one's peak.
``resource.getrusage`` gives the process-lifetime peak.
"""

from __future__ import annotations

import contextlib
import os
import platform
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from s3stream.base.allocator import allocator_setting

__all__ = [
    "CpuMeter",
    "LatencySummary",
    "PeakRss",
    "current_rss_bytes",
    "machine_info",
    "mb_per_s",
    "versions",
]

_MB = 1_000_000
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def mb_per_s(nbytes: int | float, seconds: float) -> float:
    """Bandwidth in MB/s (10^6 bytes per second); 0 for an empty interval."""
    return nbytes / seconds / _MB if seconds > 0 else 0.0


@dataclass(frozen=True, slots=True)
class LatencySummary:
    """Percentiles of a latency sample, in milliseconds (nearest rank over the whole sample)."""

    count: int
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    mean_ms: float

    @classmethod
    def of_seconds(cls, samples: list[float]) -> LatencySummary:
        """Summarize latencies given in seconds; an empty sample gives zeros."""
        if not samples:
            return cls(0, 0.0, 0.0, 0.0, 0.0, 0.0)
        ordered = sorted(samples)

        def rank(q: float) -> float:
            index = min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.999999) - 1))
            return ordered[index] * 1000.0

        mean = sum(ordered) / len(ordered) * 1000.0
        return cls(len(ordered), rank(0.50), rank(0.99), rank(0.999), ordered[-1] * 1000.0, mean)

    def as_dict(self) -> dict[str, float | int]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def _system_cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) jiffies over all CPUs from /proc/stat, or None off Linux."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return None
    values = [int(v) for v in fields]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return sum(values) - idle, sum(values)


#: The pids of helper processes whose resources count as the engine's (s3stream's seal workers).
Helpers = Callable[[], list[int]]


class CpuMeter:
    """CPU used by this process (all threads) and its ``helpers`` processes, and by the whole machine, over
    an interval, in cores. A helper started during the interval counts from its start."""

    def __init__(self, helpers: Helpers | None = None) -> None:
        self._helpers = helpers
        self._t0 = time.perf_counter()
        self._cpu0 = _process_cpu_s()
        self._helper0 = {pid: _pid_cpu_s(pid) or 0.0 for pid in (helpers() if helpers else [])}
        self._sys0 = _system_cpu_ticks()

    def read(self) -> dict[str, float]:
        """Average cores busy since construction: this process (with its helpers), and the machine."""
        wall = max(time.perf_counter() - self._t0, 1e-9)
        helper_s = sum(max(0.0, (_pid_cpu_s(pid) or 0.0) - self._helper0.get(pid, 0.0))
                       for pid in (self._helpers() if self._helpers else []))
        out = {"wall_s": round(wall, 3),
               "process_cpu_cores": round((_process_cpu_s() - self._cpu0 + helper_s) / wall, 3)}
        if self._helpers is not None:
            out["helper_processes_cpu_cores"] = round(helper_s / wall, 3)
        sys1 = _system_cpu_ticks()
        if self._sys0 is not None and sys1 is not None and sys1[1] > self._sys0[1]:
            busy = (sys1[0] - self._sys0[0]) / (sys1[1] - self._sys0[1])
            out["machine_busy_cores"] = round(busy * (os.cpu_count() or 1), 3)
            out["other_processes_cores"] = round(max(0.0, out["machine_busy_cores"] - out["process_cpu_cores"]), 3)
        return out


def _pid_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` (None once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _pid_status_bytes(pid: int | str, field: str) -> int | None:
    """A ``kB`` line of ``/proc/PID/status`` (``VmRSS``, ``VmHWM``) in bytes; None if unreadable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _process_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def current_rss_bytes() -> int:
    """The resident set size of this process now (0 where /proc is missing)."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def _vm_hwm_bytes() -> int | None:
    return _pid_status_bytes("self", "VmHWM")


def _reset_hwm() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    hwm = _vm_hwm_bytes()
    return hwm is not None and hwm <= current_rss_bytes() * 1.05 + (1 << 20)


class PeakRss:
    """Peak resident memory over a phase (``with PeakRss() as peak: ...; peak.result()``), of this process
    plus its ``helpers`` processes: the sum of their peaks (an upper bound of the peak of the sum)."""

    def __init__(self, interval_s: float = 0.02, *, gauges: Callable[[], dict[str, int]] | None = None,
                 helpers: Helpers | None = None) -> None:
        self._helpers = helpers
        self._helper_hwm: dict[int, int] = {}
        self._interval = interval_s
        self._gauges = gauges
        self._gauge_peaks: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-rss", daemon=True)
        self._sampled = 0
        self._start = 0
        self._reset_ok = False
        self._arrow_start = 0
        self._arrow = 0

    def __enter__(self) -> PeakRss:
        self._start = current_rss_bytes()
        self._reset_ok = _reset_hwm()
        self._sampled = self._start
        self._arrow_start = self._arrow = _arrow_allocated_bytes()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            helpers = 0
            for pid in self._helpers() if self._helpers else []:
                helpers += _pid_status_bytes(pid, "VmRSS") or 0
                self._helper_hwm[pid] = max(self._helper_hwm.get(pid, 0), _pid_status_bytes(pid, "VmHWM") or 0)
            self._sampled = max(self._sampled, current_rss_bytes() + helpers)
            self._arrow = max(self._arrow, _arrow_allocated_bytes())
            if self._gauges is not None:
                for name, value in self._gauges().items():
                    self._gauge_peaks[name] = max(self._gauge_peaks.get(name, 0), value)

    def _run_once_more(self) -> None:
        """Read the helpers' lifetime peaks at the end too (a helper that started late was sampled little)."""
        for pid in self._helpers() if self._helpers else []:
            self._helper_hwm[pid] = max(self._helper_hwm.get(pid, 0), _pid_status_bytes(pid, "VmHWM") or 0)

    def result(self) -> dict[str, Any]:
        """Peak RSS (bytes) with how it was measured, the RSS at the start, the lifetime peak."""
        self._run_once_more()
        hwm = _vm_hwm_bytes() if self._reset_ok else None
        helper_peak = sum(self._helper_hwm.values())
        peak = max(self._sampled, (hwm or 0) + helper_peak)
        return {
            "peak_rss_bytes": peak,
            "helper_processes_peak_rss_bytes": helper_peak,
            "method": "VmHWM reset via /proc/self/clear_refs" if hwm is not None else "sampled every 20 ms",
            "sampled_peak_rss_bytes": self._sampled,
            "start_rss_bytes": self._start,
            "process_lifetime_peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "arrow_allocated_start_bytes": self._arrow_start,
            "arrow_allocated_sampled_peak_bytes": self._arrow,
            "arrow_memory_pool": _arrow_pool_name(),
            "gauge_peaks_bytes": dict(self._gauge_peaks),
        }


def _arrow_allocated_bytes() -> int:
    import pyarrow

    return int(pyarrow.total_allocated_bytes())


def _arrow_pool_name() -> str:
    import pyarrow

    return str(pyarrow.default_memory_pool().backend_name)


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _memory_bytes() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def _mount_of(path: str) -> dict[str, str]:
    """The filesystem holding ``path`` (device, mount point, type) from /proc/mounts."""
    real = os.path.realpath(path)
    best = {"device": "unknown", "mount_point": "/", "fs_type": "unknown"}
    with contextlib.suppress(OSError):
        for line in Path("/proc/mounts").read_text().splitlines():
            dev, mnt, fstype = line.split()[:3]
            inside = real == mnt or real.startswith(mnt.rstrip("/") + "/")
            if inside and len(mnt) >= len(best["mount_point"]):
                best = {"device": dev, "mount_point": mnt, "fs_type": fstype}
    return best


def machine_info(wal_dir: str) -> dict[str, Any]:
    """Cores, memory, CPU model, OS and the WAL directory's filesystem."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cores": os.cpu_count(),
        "cores_usable": affinity,
        "cpu_model": _cpu_model(),
        "memory_bytes": _memory_bytes(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "wal_dir_filesystem": _mount_of(wal_dir),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
        "allocator": allocator_setting(),
    }


def _command_output(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def _uncommitted_files(root: Path) -> list[str]:
    """Tracked files that differ from the commit (result files aside): a figure measured with local
    changes must not pass for the commit's."""
    out = _command_output(["git", "-C", str(root), "diff", "--name-only", "HEAD"]) or ""
    return [p for p in out.splitlines() if p and not p.startswith("benchmarks/results/")]


def versions() -> dict[str, Any]:
    """Versions of s3stream (and its git commit), Python libraries, and the weed binary if present."""
    import boto3
    import botocore
    import pyarrow

    import s3stream

    root = Path(__file__).resolve().parents[2]
    return {
        "s3stream": s3stream.__version__,
        "git_commit": _command_output(["git", "-C", str(root), "rev-parse", "HEAD"]),
        "git_uncommitted": _uncommitted_files(root),
        "python": sys.version.split()[0],
        "pyarrow": pyarrow.__version__,
        "boto3": boto3.__version__,
        "botocore": botocore.__version__,
        "weed": _command_output(["weed", "version"]),
    }
