"""Helpers of the Spark tests: stores with generated multi-partition logs, and expected rows.

Logs are built through the public API (``open_store``, ``append``, ``roll``, ``flush``), so each
partition has sealed segments *and* unsealed records in WAL objects, the two places a read plans from.
Expected rows come from ``PartitionLog.read_arrow``, the Python API the Spark source must equal.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

import s3stream
from s3stream import Record

T0 = 1_700_000_000_000
COLUMNS = ["partition", "offset", "key", "value", "ts_ms", "headers"]


def open_at(url: str, wal_dir: Path, **opts: Any) -> s3stream.Store:
    """A writing store on ``url`` with its own WAL directory (probe off, fast flushes, no fsync)."""
    opts.setdefault("probe", False)
    opts.setdefault("flush_interval_ms", 20)
    opts.setdefault("wal_fsync", False)
    opts.setdefault("clock", s3stream.ManualClock(T0 + 1_000_000))
    return s3stream.open_store(url, wal_dir=str(wal_dir), **opts)


def record(p: int, i: int, *, ts: int | None = None, key: bytes | None = None, value: bytes | None = b"",
           headers: bool = True) -> Record:
    """Record ``i`` of partition ``p``: key ``k{i % 7}``, value ``v{p}-{i}``, timestamp ``T0 + i * 1000``."""
    return Record(key if key is not None else f"k{i % 7}".encode(),
                  value if value != b"" else f"v{p}-{i}".encode() * 3,
                  T0 + i * 1000 if ts is None else ts,
                  [("h", f"{i}".encode())] if headers and i % 2 else [])


def fill(store: s3stream.Store, topic: str, partitions: int, per_partition: int, *, roll_every: int = 10,
         config: dict[str, object] | None = None, first: int = 0) -> None:
    """Create ``topic`` (unless ``first`` > 0) and append records ``first..first+per_partition-1``.

    Every ``roll_every`` appends the active segment is rolled (sealed); the rest stays in WAL objects.
    """
    if first == 0:
        store.create_topic(topic, partitions=partitions, config=config or {})
    for p in range(partitions):
        log = store.partition(topic, p)
        for i in range(first, first + per_partition):
            log.append([record(p, i)])
            if (i + 1) % roll_every == 0:
                log.roll()
    store.flush()


def expected(store: s3stream.Store, topic: str, *, start: dict[int, int] | None = None,
             end: dict[int, int] | None = None) -> list[tuple[Any, ...]]:
    """Rows ``(partition, offset, key, value, ts_ms, headers)`` of ``topic`` via the Python API.

    Read through a fresh read-only handle of the store's URL (another process's view): the test's own
    store may have been fenced by a Spark write, and a fenced writer only learns it at its next write.
    """
    with tempfile.TemporaryDirectory() as wal:
        with s3stream.open_store(store.url, probe=False, wal_dir=wal) as fresh:
            return _expected(fresh, topic, start=start, end=end)


def _expected(store: s3stream.Store, topic: str, *, start: dict[int, int] | None,
              end: dict[int, int] | None) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for p in range(store.partitions(topic)):
        log = store.partition(topic, p)
        pos = (start or {}).get(p, log.log_start_offset)
        stop = (end or {}).get(p, log.log_end_offset)
        while pos < stop:
            table = log.read_arrow(pos, max_bytes=1 << 20)
            if table.num_rows == 0:
                break
            table = table.filter(pc.less(table.column("offset"), stop))
            for r in table.to_pylist():
                hdrs = tuple((h["key"], h["value"]) for h in r["headers"]) if r["headers"] else ()
                rows.append((p, r["offset"], r["key"], r["value"], r["timestamp"], hdrs))
            pos = int(table.column("offset")[-1].as_py()) + 1 if table.num_rows else stop
    return sorted(rows)


def spark_rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """The same tuples from a DataFrame's Arrow table (``df.toArrow()``)."""
    out = []
    for r in table.to_pylist():
        ts = r["timestamp"]
        ts_ms = int(ts.timestamp() * 1000) if ts is not None else None
        hdrs = tuple((h["key"], h["value"]) for h in r["headers"]) if r.get("headers") else ()
        out.append((r["partition"], r["offset"], r["key"], r["value"], ts_ms, hdrs))
    return sorted(out)
