"""A node that takes a partition back after another node took it over, and a fenced node's late acks.

Found by the simulator (tests/sim); each test names the seed. The stores run ``background=manual``: every
step is in this thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from s3stream import Fenced, ManualClock, Record, Store
from s3stream.base import layout
from s3stream.base.ids import IdSource
from s3stream.objectstore.forwarding import ForwardingObjectStore
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.objectstore.protocol import ListEntry
from s3stream.testing.faults import FaultRule, FaultyObjectStore

from .helpers import T0, abandon, open_mem, read_all


def _open(url: str, tmp: Path, wal: str, clock: ManualClock, seed: int, **opts: object) -> Store:
    return open_mem(url, tmp, clock=clock, wal=wal, ids=IdSource(seed), background="manual",
                    flush_interval_ms=60_000, max_block_ms=120_000, ack="wal", **opts)


def _recs(prefix: str, n: int) -> list[Record]:
    return [Record(None, f"{prefix}{i}".encode()) for i in range(n)]


def test_taking_a_partition_back_voids_the_stale_local_entries(mem_url: str, tmp_path: Path) -> None:
    """Seed 11: a restart after taking a partition back refused to open (CorruptData): the node's local WAL
    still held entries of the partition from the epoch the other node ended, and recovery replayed them."""
    clock = ManualClock(T0, pacing="manual")
    a = _open(mem_url, tmp_path, "a", clock, 1)
    a.create_topic("t", 1)
    assert a.partition("t", 0).append(_recs("stale", 3)).base_offset == 0  # only in A's local WAL
    b = _open(mem_url, tmp_path, "b", clock, 2)
    assert b.partition("t", 0).append(_recs("b", 2)).base_offset == 0  # takes t-0 over: A's records replaced
    b.close()
    a.close()  # its uploads meet B's fence (the stale records stay in its local WAL)
    a = _open(mem_url, tmp_path, "a", clock, 3)  # recovery skips t-0: B owns it
    assert a.partition("t", 0).append(_recs("back", 4)).base_offset == 2  # takes t-0 back
    abandon(a)  # dies before uploading: the new records are only in its local WAL
    a = _open(mem_url, tmp_path, "a", clock, 4)  # replays them, never the stale ones
    try:
        assert [r.value for r in read_all(a.partition("t", 0))] == [
            b"b0", b"b1", b"back0", b"back1", b"back2", b"back3"]
    finally:
        a.close()


def test_a_fenced_node_acknowledges_no_entry_made_durable_after_it_learned(mem_url: str, tmp_path: Path) -> None:
    """Seeds 3 and 8: ``ack=wal`` appends whose WAL entry became durable after the node learned it was fenced
    were acknowledged (and their records replaced)."""
    clock = ManualClock(T0, pacing="manual")
    a = _open(mem_url, tmp_path, "a", clock, 1)
    a.create_topic("t", 2)
    la = a.partition("t", 0)
    la.append(_recs("a", 1))
    a.flush()
    b = _open(mem_url, tmp_path, "b", clock, 2)
    b.partition("t", 0).append(_recs("b", 1))  # fences A's namespace
    late = la.append_async(_recs("late", 1))
    steps = a.runtime.steps()
    assert steps.drain()  # its entry is written into A's local WAL ...
    with pytest.raises(Fenced):
        a.flush()  # ... A learns it was fenced (its PUT meets B's fence) ...
    assert not late.done()
    assert steps.write_wal() and steps.sync_wal()  # ... and only then is the entry durable
    with pytest.raises(Fenced):
        late.result(timeout=0)
    b.close()
    abandon(a)


def test_taking_a_partition_back_never_uploads_its_stale_buffered_appends(mem_url: str, tmp_path: Path) -> None:
    """Found by the simulator (seed 436): a node whose seal met another node's writer epoch let go of the
    partition, then took it back; the appends it had buffered before (at offsets the other node had written
    since) went into the same WAL object as the new ones, and the upload failed with InternalError
    (non-increasing offsets) instead of the node learning it was fenced."""
    clock = ManualClock(T0, pacing="manual")
    a = _open(mem_url, tmp_path, "a", clock, 1)
    a.create_topic("t", 1, {"segment.bytes": "200"})
    la = a.partition("t", 0)
    la.append(_recs("a", 1))
    a.flush()
    stale = la.append_async([Record(None, b"x" * 150) for _ in range(2)], ack="s3")  # rolls: a seal is pending
    steps = a.runtime.steps()
    assert steps.drain()
    b = _open(mem_url, tmp_path, "b", clock, 2)
    assert b.partition("t", 0).append(_recs("b", 1)).base_offset == 1  # takes t-0 over (A's buffer is stale)
    b.close()
    assert steps.seal()  # meets B's writer epoch: A lets go of t-0
    assert not la.is_writer
    again = la.append_async(_recs("back", 1), ack="s3")  # takes t-0 back, at B's end
    with pytest.raises(Fenced):
        stale.result(timeout=0)  # dropped from the buffer when A took t-0 back
    with pytest.raises(Fenced):
        a.flush()  # A's namespace was fenced by B's takeover: nothing more of A lands
    with pytest.raises(Fenced):
        again.result(timeout=0)
    abandon(a)


def test_an_upload_landing_above_the_fence_of_its_epoch_is_never_read(mem_url: str, tmp_path: Path) -> None:
    """Found by the simulator (seed 10057 of 40 steps): with two uploads in flight, the first failed (a 500)
    while another node fenced the namespace at its seq, and the second landed above that fence. The node's
    reopen then took the landed object for its own data after a hole of committed objects and refused to
    open (CorruptData); and GC, deleting the fence first, could have made it readable again."""
    clock = ManualClock(T0, pacing="manual")
    raw = MemoryObjectStore(mem_url.removeprefix("memory://"), clock=clock)
    faulty = FaultyObjectStore(raw, ids=IdSource(9))
    a = open_mem(mem_url, tmp_path, clock=clock, wal="a", ids=IdSource(1), background="manual",
                 object_store=faulty, flush_interval_ms=60_000, flush_bytes=1, upload_concurrency=2,
                 orphan_min_age_ms=1000)
    a.create_topic("t", 1)
    a.create_topic("u", 1)
    a.partition("u", 0).append(_recs("u", 1))
    a.flush()
    node = a.node_id
    assert node is not None
    b = _open(mem_url, tmp_path, "b", clock, 2)
    b.partition("u", 0).append(_recs("b", 1))  # takes u-0 over: A's namespace is fenced at its next seq
    b.close()
    fence_seq = max(layout.parse_seq(e.key) or 0 for e in raw.list(f"wal/{node}/"))
    faulty.set_rules([FaultRule("put", layout.wal_key(node, fence_seq), "error", count=1)])
    lt = a.partition("t", 0)
    first = lt.append_async(_recs("x", 2))  # its object takes the fenced seq: the PUT fails (a 500) ...
    steps = a.runtime.steps()
    assert steps.drain() and steps.write_wal() and steps.sync_wal() and steps.flush()
    second = lt.append_async(_recs("y", 3))
    assert steps.drain() and steps.write_wal() and steps.sync_wal() and steps.flush()  # ... this one lands above it
    assert raw.head(layout.wal_key(node, fence_seq + 1))
    assert first.result(timeout=0).base_offset == 0 and second.result(timeout=0).base_offset == 2  # ack=wal
    a.close()  # the retry meets the fence: A learns it was fenced
    a = _open(mem_url, tmp_path, "a", clock, 3)  # recovers t-0 from its local WAL
    assert [r.value for r in read_all(a.partition("t", 0))] == [b"x0", b"x1", b"y0", b"y1", b"y2"]
    a.close()
    clock.advance(10_000)
    a = _open(mem_url, tmp_path, "a", clock, 4, orphan_min_age_ms=1000)
    assert layout.wal_key(node, fence_seq + 1) in a.collect_garbage().deleted["wal_object"]  # before the fence
    a.close()
    with _open(mem_url, tmp_path, "r", clock, 5) as reader:
        assert [r.value for r in read_all(reader.partition("t", 0))] == [b"x0", b"x1", b"y0", b"y1", b"y2"]


class _ListHook(ForwardingObjectStore):
    """Runs ``hook`` (once, when armed) before the first LIST under ``prefix``."""

    def __init__(self, inner: MemoryObjectStore) -> None:
        super().__init__(inner)
        self.prefix = ""
        self.hook: Callable[[], None] | None = None

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ListEntry]:
        hook = self.hook
        if hook is not None and self.prefix and prefix.startswith(self.prefix):
            self.hook = None
            hook()
        return self.inner.list(prefix, start_after=start_after)


def test_a_claim_decided_from_a_stale_manifest_never_ends_an_unfenced_epoch(mem_url: str, tmp_path: Path) -> None:
    """Found by the chaos harness (claimers-wal): a restarted node read a manifest naming itself the last writer,
    and while it scanned its own WAL namespace the other node claimed the partition. Its claim committed on top
    of that one anyway, ending the other node's epoch without fencing its namespace: the other node's
    acknowledged records were dropped, and its objects of the ended epoch, left in its namespace, later made its
    reopen refuse the partition (CorruptData)."""
    clock = ManualClock(T0, pacing="manual")
    b = _open(mem_url, tmp_path, "b", clock, 1)
    b.create_topic("t", 1)
    b.create_topic("u", 1)
    assert b.partition("t", 0).append(_recs("b", 2)).base_offset == 0
    b.close()  # the manifest names B as t-0's writer
    hooked = _ListHook(MemoryObjectStore(mem_url.removeprefix("memory://"), clock=clock))
    b = _open(mem_url, tmp_path, "b", clock, 2, object_store=hooked)
    b.partition("u", 0).append(_recs("u", 1))  # B's node is open: the next LIST of its namespace is t-0's claim
    node = b.node_id
    assert node is not None
    acked: list[int] = []

    def a_takes_over() -> None:  # between B's manifest read and its commit
        a = _open(mem_url, tmp_path, "a", clock, 3)
        acked.append(a.partition("t", 0).append(_recs("a", 3), ack="s3").base_offset)
        abandon(a)

    hooked.prefix, hooked.hook = layout.wal_prefix(node), a_takes_over
    b.partition("t", 0).append(_recs("late", 1))  # B claims t-0: it must fence A and adopt A's records
    assert acked == [2] and hooked.hook is None
    abandon(b)
    with _open(mem_url, tmp_path, "r", clock, 4) as reader:
        assert [r.value for r in read_all(reader.partition("t", 0))][:5] == [b"b0", b"b1", b"a0", b"a1", b"a2"]
