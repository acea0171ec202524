"""Helpers of the store-level retention tests: opening stores, shaping segments, reading back.

Every record built here has the same logical size (:data:`REC_BYTES`), so ``segment.bytes`` and
``retention.bytes`` can be stated in records. Segments are shaped explicitly with ``roll()``: each
group given to :func:`shape` becomes one segment, and the last group stays the active segment.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import s3stream
from s3stream import ManualClock, Record
from s3stream.objectstore.protocol import ObjectMeta, ObjectStore
from s3stream.testing.forwarding import ForwardingObjectStore

T0 = 1_700_000_000_000
HOUR = 3_600_000
DAY = 24 * HOUR


def rec(i: int, ts: int) -> Record:
    """Record ``i`` (key ``k0000i``) at timestamp ``ts``; always :data:`REC_BYTES` bytes."""
    return Record(b"k%05d" % i, b"v%09d" % i, ts)


REC_BYTES = rec(0, 0).size_bytes  # 21 + 6 + 10 = 37


def open_at(url: str, wal_dir: Path, clock: ManualClock, **opts: Any) -> s3stream.Store:
    """A store on ``url`` (probe off, fast flushes) with its local WAL in ``wal_dir``."""
    opts.setdefault("probe", False)
    opts.setdefault("flush_interval_ms", 50)
    return s3stream.open_store(url, clock=clock, wal_dir=str(wal_dir), **opts)


def append_n(log: s3stream.PartitionLog, n: int, ts: int, *, one_batch: bool = False) -> None:
    """Append ``n`` records at timestamp ``ts`` (one batch each, or one batch for all)."""
    start = log.log_end_offset
    batch = [rec(start + i, ts) for i in range(n)]
    if one_batch:
        log.append(batch)
        return
    for r in batch:
        log.append([r])


def shape(log: s3stream.PartitionLog, groups: Sequence[Sequence[int]], *, roll_last: bool = False) -> None:
    """One segment per group of record timestamps; the last group stays active unless ``roll_last``."""
    for i, stamps in enumerate(groups):
        start = log.log_end_offset
        log.append([rec(start + j, ts) for j, ts in enumerate(stamps)])
        if i < len(groups) - 1 or roll_last:
            log.roll()
    log.flush()


def ranges(log: s3stream.PartitionLog) -> list[tuple[int, int, bool]]:
    """``(base_offset, last_offset, sealed)`` of every segment, oldest first."""
    return [(s.base_offset, s.last_offset, s.sealed) for s in log.segments()]


def offsets(log: s3stream.PartitionLog, start: int | None = None) -> list[int]:
    """Every readable offset from ``start`` (the log start by default) to the log end."""
    pos = log.log_start_offset if start is None else start
    out: list[int] = []
    while True:
        got = log.read(pos, max_bytes=1 << 20)
        if not got:
            return out
        out.extend(r.offset for r in got if r.offset is not None)
        pos = out[-1] + 1


def exists(objstore: ObjectStore, key: str) -> bool:
    try:
        objstore.head(key)
    except FileNotFoundError:
        return False
    return True


def manifest_puts(keys: Sequence[str]) -> list[str]:
    return [k for k in keys if "/manifest/" in k]


class HookedStore(ForwardingObjectStore):
    """An ObjectStore wrapper that records PUT keys and can run ``hook`` once, right before a PUT.

    ``arm(predicate, hook)``: the first PUT whose ``(key, thread name)`` satisfies ``predicate`` first
    runs ``hook()`` (disarmed before it runs, so the hook's own PUTs pass straight through).
    """

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.puts: list[str] = []
        self._lock = threading.Lock()
        self._armed: tuple[Callable[[str, str], bool], Callable[[], object]] | None = None
        self.fired = 0

    def arm(self, predicate: Callable[[str, str], bool], hook: Callable[[], object]) -> None:
        with self._lock:
            self._armed = (predicate, hook)

    def put(self, key: str, data: bytes | bytearray | memoryview, *, if_none_match: bool = False,
            if_match: str | None = None) -> ObjectMeta:
        hook = None
        with self._lock:
            armed = self._armed
            if armed is not None and armed[0](key, threading.current_thread().name):
                self._armed = None
                hook = armed[1]
        if hook is not None:
            self.fired += 1
            hook()
        with self._lock:
            self.puts.append(key)
        return self.inner.put(key, data, if_none_match=if_none_match, if_match=if_match)

