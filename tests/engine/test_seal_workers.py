"""Seals in worker processes (``seal.workers``): same segments as a sealer thread, errors carried back as
themselves, a lost worker replaced, requests counted in the parent's metrics, workers gone at close."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

import s3stream
from s3stream.base.errors import InvalidConfig, ObjectNotFound
from s3stream.format.walobject import WalChunkIndex
from s3stream.read.tiers import LogView, MemBatch
from s3stream.read.walscan import ChunkRef
from s3stream.write.metrics import StoreMetrics
from s3stream.write.sealjob import SealJob
from s3stream.write.sealworker import SealWorkers

from .helpers import open_mem, read_all, recs, values


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive: reap it if it is our child
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return done == 0


def _segments(store: s3stream.Store, topic: str) -> list[tuple[int, int, int]]:
    return [(s.base_offset, s.last_offset, s.record_count) for s in store.partition(topic, 0).segments() if s.sealed]


def _fill(store: s3stream.Store, topic: str, batches: int) -> list[bytes | None]:
    """Append ``batches`` batches of 20 records to partition 0 (segments of 40 records), roll, flush."""
    size = recs(1, size=200)[0].size_bytes
    if topic not in store.list_topics():
        store.create_topic(topic, partitions=1, config={"segment.bytes": 50 * size})
    log = store.partition(topic, 0)
    out: list[bytes | None] = []
    for b in range(batches):
        batch = recs(20, start=log.log_end_offset, size=200)
        log.append(batch)
        out += values(batch)
    log.roll()
    store.flush()
    return out


def test_worker_seals_the_same_segments_as_a_thread(tmp_path: Path) -> None:
    layouts = {}
    for mode in ("thread", "process"):
        with open_mem(f"file://{tmp_path}/{mode}", tmp_path, wal=f"wal-{mode}", seal_workers=mode) as store:
            expected = _fill(store, "t", 5)
            assert (store.runtime.seal_workers is not None) == (mode == "process")
            assert values(read_all(store.partition("t", 0))) == expected
            layouts[mode] = _segments(store, "t")
        with open_mem(f"file://{tmp_path}/{mode}", tmp_path, wal=f"wal-{mode}") as again:
            assert values(read_all(again.partition("t", 0))) == expected
    assert layouts["process"] == layouts["thread"] == [(0, 39, 40), (40, 79, 40), (80, 99, 20)]


def test_worker_requests_count_in_the_stores_metrics(tmp_path: Path) -> None:
    with open_mem(f"file://{tmp_path}/s", tmp_path, seal_workers="process") as store:
        registry = store.metrics_registry

        def puts() -> float:
            return registry.get_sample_value("s3stream_object_store_requests_total", {"op": "put"}) or 0.0

        store.create_topic("t", partitions=1)
        store.partition("t", 0).append(recs(3))
        store.flush()
        before = puts()
        _fill(store, "u", 4)  # two sealed segments (and WAL objects the parent PUTs)
        assert len(_segments(store, "u")) == 2
        wal_objects = store.runtime.existing_node().uploader.puts  # type: ignore[union-attr]
        assert puts() - before >= 2
        assert puts() >= wal_objects + 2


def test_a_killed_worker_is_replaced_and_the_seal_retried(tmp_path: Path) -> None:
    with open_mem(f"file://{tmp_path}/s", tmp_path, seal_workers="process") as store:
        workers = store.runtime.seal_workers
        assert workers is not None
        expected = _fill(store, "t", 2)
        [first] = workers.pids
        os.kill(first, signal.SIGKILL)
        expected += _fill(store, "t", 2)  # the seal fails on the dead worker, is retried on a new one
        assert first not in workers.pids and len(workers.pids) == 1
        assert values(read_all(store.partition("t", 0))) == expected
        assert _segments(store, "t") == [(0, 39, 40), (40, 79, 40)]


def test_workers_exit_when_the_store_closes(tmp_path: Path) -> None:
    with open_mem(f"file://{tmp_path}/s", tmp_path, seal_workers="process", seal_concurrency=2) as store:
        _fill(store, "t", 2)
        workers = store.runtime.seal_workers
        assert workers is not None
        pids = workers.pids
        assert pids and all(_alive(p) for p in pids)
    assert not any(_alive(p) for p in pids)


def test_an_error_in_the_worker_is_raised_as_itself(tmp_path: Path) -> None:
    chunk = WalChunkIndex(log_id="x", base_offset=0, last_offset=0, record_count=1, size_bytes=10,
                          max_timestamp=-1, first_timestamp=-1, byte_start=0, byte_end=10, crc32c=0, roll_offsets=())
    view = LogView(log_start_offset=0, log_end_offset=1, next_offset=0,
                   chunks=(ChunkRef("wal/missing-object", 1, chunk),))
    job = SealJob.of(view, log_id="x", key="segments/never", base_offset=0, end_offset=1, first_batch_max_ts=-1,
                     row_group_bytes=1 << 20, part_bytes=8 << 20)
    workers = SealWorkers(f"file://{tmp_path}/s", StoreMetrics())
    (tmp_path / "s").mkdir()
    try:
        with pytest.raises(ObjectNotFound, match="wal/missing-object"):
            workers.run(job)
        assert len(workers.pids) == 1  # the worker survived its job's failure and is reused
    finally:
        workers.close()


def test_seal_workers_setting(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfig, match="memory://"):
        s3stream.open_store("memory://w", seal_workers="process", wal_dir=str(tmp_path / "w"))
    with pytest.raises(InvalidConfig, match="seal_workers"):
        s3stream.open_store("memory://w", seal_workers="sometimes", wal_dir=str(tmp_path / "w"))
    with open_mem(f"file://{tmp_path}/auto", tmp_path) as store:  # auto: threads except for s3:// stores
        assert store.runtime.seal_workers is None


@pytest.mark.s3
def test_auto_seals_s3_stores_in_workers(moto_endpoint: str, tmp_path: Path) -> None:
    from .test_backends import _s3_url

    with open_mem(_s3_url(moto_endpoint), tmp_path) as store:
        assert store.runtime.seal_workers is not None
        expected = _fill(store, "t", 3)
        assert store.runtime.seal_workers.pids
        assert values(read_all(store.partition("t", 0))) == expected


def test_a_job_carries_only_the_batches_no_wal_object_holds_yet() -> None:
    def chunk(first: int, last: int) -> ChunkRef:
        return ChunkRef(f"wal/{first}", first, WalChunkIndex("x", first, last, last - first + 1, 10, -1, -1, 0, 10, 0,
                                                             ()))

    memory = tuple(MemBatch(first, first + 9, 10, None) for first in range(0, 60, 10))
    view = LogView(log_start_offset=0, log_end_offset=60, next_offset=0,
                   chunks=(chunk(0, 19), chunk(20, 29), chunk(30, 39)), memory=memory)
    job = SealJob.of(view, log_id="x", key="k", base_offset=10, end_offset=50, first_batch_max_ts=-1,
                     row_group_bytes=1, part_bytes=1)
    assert [c.chunk.base_offset for c in job.chunks] == [0, 20, 30]
    assert [m.first for m in job.memory] == [40]  # 0..39 are in WAL objects; 50.. is past the segment


def test_a_worker_seals_records_no_wal_object_holds_yet(tmp_path: Path) -> None:
    with open_mem(f"file://{tmp_path}/s", tmp_path, seal_workers="process", flush_interval_ms=3_600_000,
                  flush_bytes=1 << 30) as store:
        store.create_topic("t", partitions=1)
        log = store.partition("t", 0)
        batch = recs(30, size=100)
        log.append(batch)
        assert store.runtime.existing_node().uploader.puts == 0  # type: ignore[union-attr]
        log.roll()  # seals now, from the tail cache alone
        assert _segments(store, "t") == [(0, 29, 30)]
        assert values(read_all(log)) == values(batch)
