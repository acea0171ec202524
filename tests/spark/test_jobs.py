"""Distributed jobs: Spark compaction equals the in-process cleaner; export and backfill round-trip."""

from __future__ import annotations

import random
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import s3stream
from s3stream import Record
from s3stream.apps.spark.jobs import compact
from s3stream.apps.spark.snapshot import LogReader

from .kit import T0, expected, fill, open_at

pytestmark = pytest.mark.spark

COMPACT = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "segment.bytes": 1500,
           "delete.retention.ms": 1000}


def _generate(store: s3stream.Store, rng: random.Random, partitions: int, count: int, *, first: bool) -> None:
    """Duplicated keys, tombstones (every 6th-ish record), a roll every 8 records; all sealed at the end."""
    if first:
        store.create_topic("kv", partitions=partitions, config=COMPACT)
    for p in range(partitions):
        log = store.partition("kv", p)
        for i in range(count):
            key = f"key-{rng.randrange(12)}".encode()
            value = None if rng.random() < 0.17 else f"{p}:{i}:{rng.random():.6f}".encode()
            log.append([Record(key, value, T0 + i * 10, [("n", b"%d" % i)] if i % 4 == 0 else [])])
            if i % 8 == 7:
                log.roll()
        log.roll()


def _drain_cleaner(store: s3stream.Store) -> int:
    rounds = 0
    while store.run_cleaner().cleaned is not None:
        rounds += 1
        assert rounds < 100
    return rounds


def _state(url: str) -> list[Any]:
    """Everything that defines a partition's log: records (with horizons) and the manifest's facts."""
    out: list[Any] = []
    with tempfile.TemporaryDirectory() as wal, s3stream.open_store(url, probe=False, wal_dir=wal) as store:
        for p in range(store.partitions("kv")):
            log = store.partition("kv", p)
            m = log.manifest()
            records = log.read_arrow(log.log_start_offset, max_bytes=1 << 30)
            out.append((p, m.log_start_offset, m.next_offset, m.cleaner_checkpoint, dict(m.attributes),
                        [(s.base_offset, s.last_offset, s.record_count, s.size_bytes, s.max_timestamp,
                          s.first_batch_max_timestamp, s.cleaned) for s in m.segments],
                        records.to_pylist()))
    return out


@pytest.mark.parametrize("dedupe_buffer", [None, 24 * 6], ids=["map-fits", "partial-cleaning"])
def test_spark_compaction_equals_the_in_process_cleaner(spark: Any, tmp_path: Path, dedupe_buffer: int | None) -> None:
    options = {} if dedupe_buffer is None else {"log_cleaner_dedupe_buffer_size": dedupe_buffer,
                                                "log_cleaner_io_buffer_load_factor": 1.0}
    a_dir = tmp_path / "a"
    a_dir.mkdir()
    url_a = f"file://{a_dir}"
    clock = s3stream.ManualClock(T0 + 1_000_000)
    rng = random.Random(5)
    with open_at(url_a, a_dir / "_wal", clock=clock, **options) as store:
        _generate(store, rng, 3, 40, first=True)
        _drain_cleaner(store)  # offset gaps and stamped tombstone horizons
        clock.advance(5_000)  # the horizons stamped so far have expired: tombstones go in the next round
        _generate(store, rng, 3, 30, first=False)
    b_dir = tmp_path / "b"
    shutil.copytree(a_dir, b_dir)
    url_b = f"file://{b_dir}"
    before = _state(url_b)
    assert _state(url_a) == before

    with open_at(url_a, a_dir / "_wal", clock=clock, **options) as store:
        in_process_rounds = _drain_cleaner(store)
    runs, map_full = 0, False
    while True:
        report = compact(spark, url_b, "kv", now_ms=clock.now_ms(), store_options=options)
        if not report.outcomes:
            break
        assert all(o.status == "cleaned" for o in report.outcomes)
        map_full |= any(o.map_full for o in report.outcomes)
        runs += 1
        assert runs < 50
    assert in_process_rounds >= 3 and runs >= 1
    assert map_full == (dedupe_buffer is not None)  # the small map really made cleaning partial
    after = _state(url_b)
    assert after != before
    assert _state(url_a) == after
    # no scratch objects are left behind
    with LogReader.open(url_b) as reader:
        assert list(reader.object_store.list("_spark/")) == []


def test_export_then_backfill_round_trips(spark: Any, store_dir: Path, tmp_path: Path) -> None:
    from s3stream.apps.spark.jobs import backfill, export

    url = f"file://{store_dir}"
    with open_at(url, store_dir / "_wal") as store:
        fill(store, "orders", 3, 14)
        store.create_topic("copy", partitions=3)
        out = tmp_path / "export"
        export(spark, url, "orders", str(out))
        table = pq.read_table(out)
        assert table.num_rows == 42
        assert {"key", "value", "offset", "timestamp", "headers"} <= set(table.column_names)
        backfill(spark, url, "copy", str(out))
        assert expected(store, "copy") == expected(store, "orders")


def test_cli_export(spark: Any, store_dir: Path, tmp_path: Path) -> None:
    from s3stream.apps.cli import app

    url = f"file://{store_dir}"
    with open_at(url, store_dir / "_wal") as store:
        fill(store, "orders", 2, 6)
    out = tmp_path / "cli-export"
    result = CliRunner().invoke(app, ["spark", "export", "orders", str(out), "--url", url, "--master", "local[2]"])
    assert result.exit_code == 0, result.output
    assert pq.read_table(out).num_rows == 12
    result = CliRunner().invoke(app, ["spark", "compact", "orders", "--url", url, "--master", "local[2]"])
    assert result.exit_code == 0, result.output  # not compacted: nothing eligible
    assert "0 partition(s) cleaned" in result.output


def test_job_heartbeat_is_refreshed_while_running_and_deleted_after() -> None:
    """What keeps store GC away from a running job's scratch directory (s3stream.maintenance.gc)."""
    from s3stream.apps.spark.jobs import JobHeartbeat
    from s3stream.base import layout
    from s3stream.objectstore.memory import MemoryObjectStore

    beats = threading.Semaphore(0)

    class Counting(MemoryObjectStore):
        def put(self, key: str, data: Any, **kw: Any) -> Any:
            meta = super().put(key, data, **kw)
            beats.release()
            return meta

    store = Counting()
    with JobHeartbeat(store, "job-1", interval_ms=5):
        for _ in range(3):  # the first PUT on entry, then refreshes
            assert beats.acquire(timeout=30)
        assert [e.key for e in store.list(layout.JOBS_PREFIX)] == [layout.job_heartbeat_key("job-1")]
    assert list(store.list(layout.JOBS_PREFIX)) == []
