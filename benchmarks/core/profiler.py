"""A whole-process stack sampler: where every thread's time goes (py-spy is not available here).

Every ``interval_s`` the sampler takes ``sys._current_frames()`` and charges one sample to each other
thread's stack: **self** to the innermost Python function (a standard-library frame, such as a lock
wait, is named with its first caller outside the standard library: ``threading.py:wait <-
uploader.py:wait_for_room``), **inclusive** to every distinct function on the stack (left out:
standard-library and harness frames, and functions on every sample of a role, i.e. its entry points).
Threads are grouped by role from their names (``bench-producer-3`` -> ``bench-producer``,
``s3stream-flush-n-...`` -> ``s3stream-flush``), so a report reads "the producers spend 40% of their
samples in ``log.py:_validate``". A thread blocked in C (``os.fdatasync``, a socket read, a lock wait)
shows its innermost *Python* frame, so samples are wall-clock time, not CPU time: read them together
with the CPU meter (cores used) of the same phase.

The sampler needs the GIL to take a sample, so it sees a CPU-bound thread at the interpreter's switch
points (every ``sys.getswitchinterval()``, 5 ms by default): an unbiased but coarse view, plenty for
finding which functions dominate.
"""

from __future__ import annotations

import contextlib
import re
import sys
import sysconfig
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

__all__ = ["StackSampler", "maybe_sample"]

_STDLIB = sysconfig.get_paths()["stdlib"]
_HARNESS = str(Path(__file__).resolve().parents[1])  # benchmarks/
_ROLE_RE = re.compile(r"[-_]?(\d+|n-[0-9a-z]+|[0-9a-f]{8,})$")


def _role(name: str) -> str:
    """The role of a thread from its name: the first word, without trailing numbers and node ids."""
    role = name.split()[0] if name.strip() else "unnamed"
    while True:
        stripped = _ROLE_RE.sub("", role)
        if stripped == role or not stripped:
            return role
        role = stripped


def _where(frame: FrameType) -> str:
    code = frame.f_code
    parts = code.co_filename.replace("\\", "/").split("/")
    short = "/".join(parts[-2:]) if len(parts) > 1 else parts[0]
    return f"{short}:{code.co_name}"


def _is_stdlib(frame: FrameType) -> bool:
    name = frame.f_code.co_filename
    return (name.startswith(_STDLIB) and "site-packages" not in name) or name.startswith("<frozen")


def _where_self(frame: FrameType) -> str:
    """The innermost frame; a standard-library frame (a lock wait) is named with its first non-stdlib caller."""
    if not _is_stdlib(frame):
        return _where(frame)
    caller: FrameType | None = frame.f_back
    while caller is not None and _is_stdlib(caller):
        caller = caller.f_back
    return _where(frame) if caller is None else f"{_where(frame)} <- {_where(caller)}"


class StackSampler:
    """Samples every thread's stack in a background thread (``with StackSampler() as s: ...``)."""

    def __init__(self, interval_s: float = 0.005, *, top: int = 15) -> None:
        self._interval = interval_s
        self._top = top
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-profiler", daemon=True)
        self._self: dict[str, Counter[str]] = {}
        self._inclusive: dict[str, Counter[str]] = {}
        self._samples: Counter[str] = Counter()
        self._ticks = 0

    def __enter__(self) -> StackSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(self._interval):
            names = {t.ident: t.name for t in threading.enumerate()}
            frames = sys._current_frames()  # the documented way to sample other threads
            self._ticks += 1
            for ident, frame in frames.items():
                if ident == me:
                    continue
                self._charge(_role(names.get(ident, "unknown")), frame)

    def _charge(self, role: str, frame: FrameType) -> None:
        self._samples[role] += 1
        self._self.setdefault(role, Counter())[_where_self(frame)] += 1
        seen: set[str] = set()
        f: FrameType | None = frame
        while f is not None:
            if not _is_stdlib(f) and not f.f_code.co_filename.startswith(_HARNESS):
                seen.add(_where(f))
            f = f.f_back
        self._inclusive.setdefault(role, Counter()).update(seen)

    def result(self) -> dict[str, Any]:
        """Per thread role: samples, and the top functions by self and inclusive share (in %)."""
        roles: dict[str, Any] = {}
        for role, n in self._samples.most_common():
            inclusive = [(fn, c) for fn, c in self._inclusive[role].most_common() if c < n]  # not the roots
            roles[role] = {
                "samples": n,
                "top_self": [[fn, round(100 * c / n, 1)] for fn, c in self._self[role].most_common(self._top)],
                "top_inclusive": [[fn, round(100 * c / n, 1)] for fn, c in inclusive[:self._top]],
            }
        return {"interval_ms": self._interval * 1000, "ticks": self._ticks, "threads_by_role": roles}


@contextlib.contextmanager
def maybe_sample(enabled: bool) -> Iterator[StackSampler | None]:
    """A running :class:`StackSampler` when ``enabled``, else None."""
    if not enabled:
        yield None
        return
    with StackSampler() as sampler:
        yield sampler
