"""Helpers of the cleaner tests: stores on unique namespaces, record builders, log folds, a hook store.

Every end-to-end test goes through the public API (``open_store``, ``create_topic``, ``partition()``,
``run_cleaner``, ``run_retention``, ``collect_garbage``). Segments are shaped explicitly with
``roll()``; ``fold`` is the last-write-wins view a consumer reading from the start builds (CLEAN-GUAR-4/CLEAN-GUAR-5).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

import s3stream
from s3stream import Record
from s3stream.base.clock import Clock
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.objectstore.protocol import ObjectMeta, ObjectStore
from s3stream.testing.forwarding import ForwardingObjectStore
from tests.engine.helpers import read_all

T0 = 1_700_000_000_000
DAY = 86_400_000
_COUNTER = itertools.count()

#: Compacted-topic config that makes every sealed segment cleanable at once (tests tune from here).
COMPACT: dict[str, object] = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
                              "segment.bytes": 1 << 20, "delete.retention.ms": 1000}


def unique_name(tag: str) -> str:
    """A memory namespace no other test uses (dropped first, in case a name is reused)."""
    name = f"cleaner-{next(_COUNTER)}-{tag}"
    name = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)[:60]
    MemoryObjectStore.drop_namespace(name)
    return name


def open_at(url: str, wal_dir: Path, clock: Clock, **opts: Any) -> s3stream.Store:
    """A store on ``url`` (probe off, fast flushes, no fsync) with its local WAL in ``wal_dir``."""
    opts.setdefault("probe", False)
    opts.setdefault("flush_interval_ms", 20)
    opts.setdefault("wal_fsync", False)
    return s3stream.open_store(url, clock=clock, wal_dir=str(wal_dir), **opts)


def kv(key: str | None, value: str | None, ts: int | None = None) -> Record:
    """A record with str key/value (None stays None: a null key, or a tombstone); ts None = the clock."""
    return Record(None if key is None else key.encode(), None if value is None else value.encode(), ts)


def put_segment(log: s3stream.PartitionLog, pairs: Sequence[tuple[str | None, str | None]], *, ts: int | None = None,
                roll: bool = True, one_batch: bool = False) -> None:
    """Append ``pairs`` (one append each, or one batch) and roll them into a sealed segment."""
    records = [kv(k, v, ts) for k, v in pairs]
    if one_batch:
        log.append(records)
    else:
        for r in records:
            log.append([r])
    if roll:
        log.roll()


def triples(records: Iterable[Record]) -> list[tuple[int | None, bytes | None, bytes | None]]:
    """``(offset, key, value)`` of each record."""
    return [(r.offset, r.key, r.value) for r in records]


Folded = dict[bytes | None, tuple[int | None, bytes | None]]


def fold(records: Iterable[Record], *, drop_tombstones: bool = False) -> Folded:
    """Last-write-wins per key: key -> (offset, value); tombstones stay unless ``drop_tombstones``."""
    out: Folded = {}
    for r in records:
        out[r.key] = (r.offset, r.value)
    if drop_tombstones:
        out = {k: v for k, v in out.items() if v[1] is not None}
    return out


def horizons(log: s3stream.PartitionLog) -> dict[int, int | None]:
    """offset -> stored tombstone horizon (``horizon_ms`` column) of every tombstone in the log."""
    table: pa.Table = log.read_arrow(log.log_start_offset, max_bytes=1 << 30)
    rows = table.select(["offset", "value", "horizon_ms"]).to_pylist()
    return {r["offset"]: r["horizon_ms"] for r in rows if r["value"] is None}


def sealed_ranges(log: s3stream.PartitionLog) -> list[tuple[int, int]]:
    """``(base_offset, last_offset)`` of the sealed segments, from the manifest."""
    return [(s.base_offset, s.last_offset) for s in log.manifest().segments]


def topic(store: s3stream.Store, **overrides: object) -> s3stream.PartitionLog:
    """Topic ``t`` (one partition) with :data:`COMPACT` plus ``overrides``."""
    store.create_topic("t", 1, {**COMPACT, **overrides})
    return store.partition("t", 0)


def cleaned(report: Any) -> Any:
    """The round a cleaner pass ran (it must have run and not aborted)."""
    assert report.cleaned is not None, report
    assert not report.cleaned.aborted
    return report.cleaned


class HookStore(ForwardingObjectStore):
    """An ObjectStore wrapper that runs a competing action right before the next matching PUT.

    ``arm(action, when)``: the first PUT whose key satisfies ``when`` (by default: a manifest PUT that
    follows a segment PUT, i.e. the cleaner's swap after its outputs) first runs ``action`` once, in the
    calling thread, then performs the PUT. Every PUT key is recorded in ``puts``.
    """

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self._action: Callable[[], None] | None = None
        self._when: Callable[[str], bool] = lambda key: False
        self._saw_segment = False
        self._lock = threading.Lock()
        self.fired = 0
        self.puts: list[str] = []

    def arm(self, action: Callable[[], None], when: Callable[[str], bool] | None = None) -> None:
        with self._lock:
            self._action = action
            self._saw_segment = False
            self._when = when or self._swap_put

    def _swap_put(self, key: str) -> bool:
        return "/manifest/" in key and self._saw_segment

    def put(self, key: str, data: bytes | bytearray | memoryview, *, if_none_match: bool = False,
            if_match: str | None = None) -> ObjectMeta:
        with self._lock:
            self.puts.append(key)
            action = None
            if self._action is not None and self._when(key):
                action, self._action = self._action, None
            elif "/segments/" in key:
                self._saw_segment = True
        if action is not None:
            self.fired += 1
            action()
        return self.inner.put(key, data, if_none_match=if_none_match, if_match=if_match)



__all__ = ["COMPACT", "DAY", "T0", "HookStore", "cleaned", "fold", "horizons", "kv", "open_at", "put_segment",
           "read_all", "sealed_ranges", "topic", "triples", "unique_name"]
