"""Shared helpers of the engine tests: store factories, record builders, crash abandonment, wrappers."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

import s3stream
from s3stream import ManualClock, Record
from s3stream.base.crashpoints import SimulatedCrash
from s3stream.objectstore.protocol import ObjectMeta, ObjectStore
from s3stream.testing.forwarding import ForwardingObjectStore

T0 = 1_700_000_000_000


def open_mem(url: str, tmp: Path, *, clock: ManualClock | None = None, wal: str = "wal", **opts: Any
             ) -> s3stream.Store:
    """A store on ``url`` with its WAL under ``tmp/wal`` (probe off, a manual clock)."""
    opts.setdefault("probe", False)
    opts.setdefault("flush_interval_ms", 50)
    return s3stream.open_store(url, clock=clock or ManualClock(T0), wal_dir=str(tmp / wal), **opts)


def recs(n: int, *, prefix: str = "k", start: int = 0, ts: int | None = None, size: int = 10) -> list[Record]:
    return [Record(f"{prefix}{i}".encode(), f"v{i}".encode().ljust(size, b"."), ts) for i in
            range(start, start + n)]


def values(records: list[Record]) -> list[bytes | None]:
    return [r.value for r in records]


def read_all(log: s3stream.PartitionLog, start: int | None = None) -> list[Record]:
    """Every record from ``start`` (the log start by default) to the log end, via paged reads."""
    pos = log.log_start_offset if start is None else start
    out: list[Record] = []
    while True:
        got = log.read(pos, max_bytes=1 << 20)
        if not got:
            return out
        out.extend(got)
        last = got[-1].offset
        assert last is not None
        pos = last + 1


def abandon(store: s3stream.Store) -> None:
    """Simulate a process death: stop the store's threads WITHOUT flushing or sealing; release the WAL lock.

    Uploads in flight are stopped at their next step; nothing buffered is written to the bucket.
    """
    rt = store.runtime
    rt.sealer.stop()
    node = rt.existing_node()
    if node is not None:
        up = node.uploader
        with up._cond:  # a dead process flushes nothing more
            if up._failed is None:
                up._failed = SimulatedCrash("abandoned")
            up._buf = type(up._buf)()  # what was buffered dies with the process
            up._closing = True
            up._cond.notify_all()
        if up._thread is not None:
            up._thread.join(10)
        with contextlib.suppress(Exception):
            node.wal.close()
    rt._closed = True


class CountingStore(ForwardingObjectStore):
    """An ObjectStore wrapper counting PUTs by key prefix; ``stall`` blocks PUTs until released."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.puts: list[str] = []
        self.lock = threading.Lock()
        self.gate = threading.Event()
        self.gate.set()
        self.blocked = threading.Event()

    def stall(self) -> None:
        self.gate.clear()

    def release(self) -> None:
        self.gate.set()

    def wal_puts(self) -> list[str]:
        with self.lock:
            return [k for k in self.puts if k.startswith("wal/")]

    def put(self, key: str, data: bytes | bytearray | memoryview, *, if_none_match: bool = False,
            if_match: str | None = None) -> ObjectMeta:
        if not self.gate.is_set():
            self.blocked.set()
            self.gate.wait(30)
        with self.lock:
            self.puts.append(key)
        return self.inner.put(key, data, if_none_match=if_none_match, if_match=if_match)



__all__ = ["T0", "CountingStore", "abandon", "open_mem", "read_all", "recs", "values"]
