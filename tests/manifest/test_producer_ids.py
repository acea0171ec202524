"""Producer id blocks: every id handed out once, across allocators racing on memory, file and SeaweedFS stores."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from s3stream import ManualClock, open_store
from s3stream.base import layout
from s3stream.base.clock import SystemClock
from s3stream.base.errors import CorruptData
from s3stream.base.ids import IdSource
from s3stream.manifest.producer_ids import (
    BLOCK_SIZE,
    ProducerIdAllocator,
    ProducerIdBlock,
    decode_producer_id_block,
    encode_producer_id_block,
    producer_id_store,
)
from s3stream.objectstore.local import LocalObjectStore
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.objectstore.protocol import ObjectStore
from s3stream.objectstore.s3 import S3ObjectStore

StoreFactory = Callable[[], ObjectStore]


def _allocator(store: ObjectStore, owner: str, *, seed: int = 0, block_size: int = BLOCK_SIZE) -> ProducerIdAllocator:
    return ProducerIdAllocator(producer_id_store(store, SystemClock(), IdSource(seed)), owner, block_size=block_size)


def test_ids_come_from_dense_blocks_and_a_restart_takes_a_new_one() -> None:
    store = MemoryObjectStore()
    first = _allocator(store, "a")
    assert [first.allocate() for _ in range(BLOCK_SIZE + 2)] == list(range(BLOCK_SIZE + 2))
    again = _allocator(store, "a")  # a restarted process: the rest of its block is never handed out
    assert again.allocate() == 2 * BLOCK_SIZE
    versions = producer_id_store(store, SystemClock(), IdSource(1))
    assert versions.list_seqs() == [1, 2, 3]
    assert [(b.block_start, b.next_id) for b in map(versions.load, (1, 2, 3))] == [
        (0, BLOCK_SIZE), (BLOCK_SIZE, 2 * BLOCK_SIZE), (2 * BLOCK_SIZE, 3 * BLOCK_SIZE)]
    assert [e.key for e in store.list("")] == [layout.producer_ids_key(s) for s in (1, 2, 3)]


def _race(factory: StoreFactory, *, threads: int, per_thread: int, block_size: int) -> None:
    """``threads`` allocators, each on its own store instance, allocate at once: no id twice, no block lost."""
    barrier = threading.Barrier(threads)
    got: list[list[int]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []

    def run(i: int) -> None:
        alloc = _allocator(factory(), f"node-{i}", seed=i + 1, block_size=block_size)
        barrier.wait()
        try:
            got[i].extend(alloc.allocate() for _ in range(per_thread))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(120)
    assert errors == []
    ids = [pid for ids in got for pid in ids]
    assert len(ids) == threads * per_thread == len(set(ids))
    versions = producer_id_store(factory(), SystemClock(), IdSource(99))
    seqs = versions.list_seqs()
    assert seqs == list(range(1, len(seqs) + 1))  # dense: every commit landed exactly once
    blocks = [versions.load(s) for s in seqs]
    assert [(b.block_start, b.next_id) for b in blocks] == [(k * block_size, (k + 1) * block_size)
                                                             for k in range(len(blocks))]
    for i, mine in enumerate(got):  # each allocator's ids come from blocks it committed itself
        owned = {pid for b in blocks if b.owner == f"node-{i}" for pid in range(b.block_start, b.next_id)}
        assert set(mine) <= owned


def test_racing_allocators_on_memory() -> None:
    inner = MemoryObjectStore()
    _race(lambda: inner, threads=6, per_thread=40, block_size=7)


def test_racing_allocators_on_file(tmp_path: Path) -> None:
    _race(lambda: LocalObjectStore(str(tmp_path / "bucket")), threads=4, per_thread=30, block_size=4)


@pytest.fixture
def seaweedfs_store(seaweedfs_endpoint: str) -> Iterator[StoreFactory]:
    bucket = "s3stream-producer-ids"
    S3ObjectStore(bucket, endpoint_url=seaweedfs_endpoint).ensure_bucket()
    prefix = f"t-{IdSource().ulid(0).lower()}"
    made: list[S3ObjectStore] = []

    def factory() -> ObjectStore:
        store = S3ObjectStore(bucket, prefix=prefix, endpoint_url=seaweedfs_endpoint, max_attempts=4)
        made.append(store)
        return store

    yield factory
    cleanup = factory()
    for entry in list(cleanup.list("")):
        cleanup.delete(entry.key)
    for store in made:
        store.close()


@pytest.mark.s3
@pytest.mark.seaweedfs
def test_racing_allocators_on_seaweedfs(seaweedfs_store: StoreFactory) -> None:
    # SeaweedFS makes some losers of a put-if-absent race wait whole seconds: few racers, few blocks
    _race(seaweedfs_store, threads=3, per_thread=6, block_size=3)


def test_store_allocates_unique_ids_from_many_threads_and_processes(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'data'}"
    a = open_store(url, clock=ManualClock(0), wal_dir=str(tmp_path / "a"), probe=False)
    b = open_store(url, clock=ManualClock(0), wal_dir=str(tmp_path / "b"), probe=False)
    try:
        got: list[int] = []
        lock = threading.Lock()

        def run() -> None:
            ids = [a.allocate_producer_id() for _ in range(150)]
            with lock:
                got.extend(ids)

        workers = [threading.Thread(target=run) for _ in range(8)]
        for t in workers:
            t.start()
        for t in workers:
            t.join(60)
        assert sorted(got) == list(range(1200))  # one process: no id twice, none skipped
        assert b.allocate_producer_id() == 2 * BLOCK_SIZE  # another process takes the next block
    finally:
        a.close()
        b.close()


def test_codec_round_trips_and_refuses_garbage() -> None:
    doc = ProducerIdBlock(block_start=1000, next_id=2000, owner="n1", seq=2, parent_seq=1, commit_id="01X",
                          committed_at_ms=5)
    data = encode_producer_id_block(doc)
    assert decode_producer_id_block(data, source="k") == doc
    good = json.loads(data)
    for bad in [{**good, "extra": 1}, {**good, "next_id": 1000}, {**good, "block_start": -1},
                {**good, "owner": ""}, {**good, "format": 2}, {**good, "next_id": True},
                {k: v for k, v in good.items() if k != "owner"}, {**good, "parent_seq": 2}]:
        with pytest.raises(CorruptData):
            decode_producer_id_block(json.dumps(bad).encode(), source="k")
    with pytest.raises(CorruptData):
        decode_producer_id_block(b"\xff", source="k")
