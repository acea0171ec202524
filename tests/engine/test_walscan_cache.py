"""What a process knows of another node's WAL namespace, and fencing it, when GC deletes objects in between.

Found by the simulator (tests/sim), each losing ``ack=s3`` records in a takeover: seed 30021 of 150 steps (a
scan probed forward from what it knew and stopped at an object GC had deleted, so it took the namespace for
ending there and never saw a later object), seed 30119 (a LIST from a later sequence number was taken for
complete knowledge from an earlier one, hiding the objects in between), seed 30104 (a fence PUT met a
spurious 412, and the fence went one sequence number higher, leaving the free one to the fenced node, whose
upload landed there after the takeover read the namespace).
"""

from __future__ import annotations

from s3stream import ManualClock
from s3stream.base import layout
from s3stream.base.ids import IdSource
from s3stream.format.walobject import encode_fence_object
from s3stream.manifest.model import WalCursor
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.read.walscan import WalIndexCache
from s3stream.testing.faults import FaultRule, FaultyObjectStore
from s3stream.write.node import claim_namespace

NODE = "n-node"


def _put(store: MemoryObjectStore, *seqs: int) -> None:
    for seq in seqs:
        store.put(layout.wal_key(NODE, seq), encode_fence_object(node_id=NODE, seq=seq, created_ms=0))


def _delete(store: MemoryObjectStore, *seqs: int) -> None:
    for seq in seqs:
        store.delete(layout.wal_key(NODE, seq))


def _seqs(cache: WalIndexCache, from_seq: int) -> list[int]:
    return [seq for _, seq, _ in cache.scan(WalCursor(NODE, from_seq))]


def test_old_knowledge_is_listed_again_not_probed_across_a_gap_gc_made() -> None:
    clock = ManualClock(0, pacing="manual")
    store = MemoryObjectStore("", clock=clock)
    cache = WalIndexCache(store, clock=clock, relist_after_s=30.0)
    _put(store, 0, 1, 2, 3)
    assert _seqs(cache, 0) == [0, 1, 2, 3]
    _put(store, 4, 5, 6, 7)
    clock.advance(120_000)  # long enough for GC to delete objects this cache never saw
    _delete(store, 0, 1, 2, 3, 4, 5)
    assert _seqs(cache, 6) == [6, 7]  # a probe from 3 would stop at the deleted 4 and find nothing
    _put(store, 8)
    assert _seqs(cache, 6) == [6, 7, 8]  # fresh knowledge: probed forward


def test_a_listing_from_a_later_seq_is_no_knowledge_of_the_ones_before() -> None:
    store = MemoryObjectStore("")
    cache = WalIndexCache(store)
    _put(store, 0)
    assert _seqs(cache, 0) == [0]
    _put(store, 6, 7, 8, 9, 10, 11)
    assert _seqs(cache, 9) == [9, 10, 11]  # listed from 9 (too far to probe from 0)
    assert _seqs(cache, 6) == [6, 7, 8, 9, 10, 11]


def test_a_fence_that_meets_a_spurious_conflict_takes_the_same_seq_again() -> None:
    clock = ManualClock(0)
    raw = MemoryObjectStore("", clock=clock)
    _put(raw, 0, 1)
    faulty = FaultyObjectStore(raw, ids=IdSource(1), rules=[FaultRule("put", layout.wal_key(NODE, 2), "conflict409",
                                                                      count=1)])
    assert claim_namespace(faulty, NODE, clock=clock) == 2
    assert [e.key for e in raw.list(f"wal/{NODE}/")] == [layout.wal_key(NODE, s) for s in (0, 1, 2)]
