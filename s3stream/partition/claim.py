"""Claiming a partition for writing: the writer-epoch commit, and adopting another node's records.

Cases, decided from the latest manifest:

* never written, or last written by this node (a restart reusing its WAL directory): claim the next
  writer epoch; this node's WAL objects from the manifest's cursor on still hold the unsealed records.
* written by another node: write a claim entry into this node's local WAL (durable first: entries of the
  log this node wrote in an earlier epoch, before that node took it over, are void for recovery; those
  still buffered are never uploaded), fence
  that node's WAL namespace (so it can commit nothing more and stops), read the unsealed records it left
  in its WAL objects, seal them into segments (split at the roll offsets it recorded), and commit those
  segments together with the new writer epoch and a cursor into this node's namespace — one manifest
  commit, so no acknowledged record is lost or duplicated.
  The same commit records the idempotent producers' state as of the adopted end: the manifest's snapshot
  plus the producer batches the fenced node's WAL objects list, so its producers' retries stay deduplicated.

A concurrent change of the writer, its cursor or the sealed end (the old node sealing, another node's
claim landing between our read and our commit) makes the commit conflict; the claim is then retried from
a fresh manifest (so a claim decided from a stale manifest never ends a writer's epoch without fencing it).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa

from s3stream.base import layout
from s3stream.base.errors import CommitConflict, Fenced, PreconditionFailed
from s3stream.base.producer import ProducerAppend, ProducerSnapshot, ProducerStateTable
from s3stream.format.walobject import WalObjectIndex, encode_fence_object
from s3stream.manifest.intents import Intent, add_segment, claim_writer, compose, set_producers, set_wal_cursor
from s3stream.manifest.model import Epoch, Manifest, SegmentRef, WalCursor
from s3stream.objectstore.protocol import ObjectStore
from s3stream.read.tiers import LogView
from s3stream.read.walscan import ChunkRef, WalIndexCache, contiguous_chunks
from s3stream.write.node import claim_namespace
from s3stream.write.seal import read_chunks, write_segment_stream

if TYPE_CHECKING:
    from s3stream.manifest.versioned import ManifestStore
    from s3stream.write.context import StoreContext
    from s3stream.write.node_runtime import NodeRuntime

__all__ = ["Claimable", "Claimed", "claim_partition", "plug_holes"]

_MAX_ATTEMPTS = 8


class Claimable(Protocol):
    """The partition being claimed, as the claim sees it."""

    @property
    def log_id(self) -> str: ...
    @property
    def topic(self) -> str: ...
    @property
    def topic_id(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def manifest_store(self) -> ManifestStore: ...
    def manifest(self, *, refresh: bool = True) -> Manifest: ...


@dataclass(frozen=True, slots=True)
class Claimed:
    """The committed claim: the manifest, our writer epoch, and our own unsealed chunks."""

    manifest: Manifest
    epoch: Epoch
    chunks: tuple[ChunkRef, ...]
    rolls: tuple[int, ...]


def claim_partition(plog: Claimable, node: NodeRuntime) -> Claimed:
    """Make ``node`` the writer of ``plog`` (see the module docstring)."""
    last_error: CommitConflict | None = None
    for _ in range(_MAX_ATTEMPTS):
        try:
            return _claim_once(plog, node)
        except CommitConflict as exc:
            last_error = exc
    raise CommitConflict(f"could not claim {plog.log_id}: {last_error}")


def _claim_once(plog: Claimable, node: NodeRuntime) -> Claimed:
    rt = node.ctx
    m = plog.manifest(refresh=True)
    adopted: list[SegmentRef] = []
    producers: list[Intent] = []
    if m.wal is not None and m.wal.node_id != node.node_id:
        # what this node wrote in an earlier epoch, before that node took the log over, is stale: never replayed
        # from the local WAL, never uploaded from the buffer
        node.void_local_entries(plog.log_id, m.next_offset)
        node.uploader.discard(plog.log_id, Fenced(f"{plog.log_id} was taken over by node {m.wal.node_id} before "
                                                  f"this append of node {node.node_id} was uploaded"))
        claim_namespace(rt.objstore, m.wal.node_id, clock=rt.clock)
        adopted, foreign = _seal_foreign(rt, plog, m, m.wal)
        if adopted:
            end = adopted[-1].end_offset
            producers = [set_producers(_producers_after(m, foreign, end, rt.clock.now_ms()), at_offset=end)]
    own: list[ChunkRef] = []
    rolls: tuple[int, ...] = ()
    if m.wal is not None and m.wal.node_id == node.node_id:
        own, rolls = contiguous_chunks(rt.walindex.scan(m.wal), plog.log_id, m.next_offset,
                                       from_seq=m.wal.from_seq)
        cursor = m.wal
    else:
        cursor = WalCursor(node.node_id, node.uploader.lowest_unpublished_seq)
    intent = compose(*[add_segment(ref, None) for ref in adopted], *producers, claim_writer(node.node_id),
                     set_wal_cursor(cursor))

    def on_base(cur: Manifest | None) -> Manifest | None:
        base = cur if cur is not None else Manifest.empty(plog.topic, plog.topic_id, plog.partition)
        if (base.writer, base.wal, base.next_offset) != (m.writer, m.wal, m.next_offset):
            # another claim or a seal landed since ``m``: whom to fence, what to adopt and where our own chunks
            # start were decided from a stale writer (committing would end its epoch without fencing it)
            raise CommitConflict(f"{plog.log_id}: the writer changed while node {node.node_id} claimed it")
        return intent(base)

    committed = plog.manifest_store.commit(on_base)
    assert committed.writer is not None
    return Claimed(committed, committed.writer, tuple(own), rolls)


def _producers_after(m: Manifest, appends: list[ProducerAppend], end: int, now_ms: int) -> ProducerSnapshot | None:
    """The producers' state as of ``end``: ``m``'s snapshot, then ``appends`` (in offset order) past it."""
    table = ProducerStateTable.from_snapshot(m.producers)
    table.replay(appends, now_ms)
    table.through_offset = max(table.through_offset, end)
    table.expire(now_ms)
    return table.snapshot() if len(table) else None


def _seal_foreign(rt: StoreContext, plog: Claimable, m: Manifest, cursor: WalCursor
                  ) -> tuple[list[SegmentRef], list[ProducerAppend]]:
    """Seal the records another (now fenced) node left unsealed, split at its roll offsets; with the
    producer batches its WAL objects list for them."""
    objects = plug_holes(rt.objstore, rt.walindex, cursor, rt.clock.now_ms())
    chunks, rolls = contiguous_chunks(objects, plog.log_id, m.next_offset, from_seq=cursor.from_seq)
    if not chunks:
        return [], []
    end = chunks[-1].chunk.last_offset + 1
    view = LogView(m.log_start_offset, end, m.next_offset, (), tuple(chunks))
    bounds = [m.next_offset, *[r for r in rolls if m.next_offset < r < end], end]
    refs: list[SegmentRef] = []
    for lo, hi in itertools.pairwise(bounds):
        first_ts, tables = _peek_first_ts(read_chunks(view, lo, hi, log_id=plog.log_id, segments=rt.segments,
                                                      chunks=rt.chunks))
        refs.append(write_segment_stream(rt, topic_id=plog.topic_id, partition=plog.partition, tables=tables,
                                         base_offset=lo, last_offset=hi - 1, first_batch_max_ts=first_ts))
    return refs, [p for ref in chunks for p in ref.chunk.producers if p.last_offset < end]


def plug_holes(store: ObjectStore, walindex: WalIndexCache, cursor: WalCursor,
                now_ms: int) -> list[tuple[str, int, WalObjectIndex]]:
    """The fenced node's WAL objects from the cursor on, after taking every sequence number below its
    newest object that it has not committed and nothing proves it did (an upload still in flight).

    The fence stops the node's writes above its newest object only: without this, an upload in flight
    below it could land after we read the namespace and publish records whose offsets we reassign.
    A hole plug that loses the race means the object landed: the namespace is listed again.
    """
    objects = walindex.scan(cursor)
    for _ in range(_MAX_ATTEMPTS):
        seqs = {seq for _, seq, _ in objects}
        top = max(seqs, default=cursor.from_seq)
        raced = False
        for seq in range(cursor.from_seq, top):
            if seq in seqs or any(index.committed_before(seq) for _, _, index in objects):
                continue
            body = encode_fence_object(node_id=cursor.node_id, seq=seq, created_ms=now_ms, hole=True)
            try:
                store.put(layout.wal_key(cursor.node_id, seq), body, if_none_match=True)
            except PreconditionFailed:
                raced = True
        if not raced:
            return objects
        # the object landed, or the store reported a conflict for a put that did not happen: list again,
        # and plug what is still free (a hole left open would let the fenced node's upload land in it)
        objects = walindex.scan(cursor, relist=True)
    raise CommitConflict(f"could not plug the holes of WAL namespace {cursor.node_id}: too much contention")


def _peek_first_ts(tables: Iterator[pa.Table]) -> tuple[int, Iterator[pa.Table]]:
    """The first chunk's :func:`_first_batch_max_ts`, and every chunk still to stream."""
    first = next(tables, None)
    if first is None:
        return -1, iter(())
    return _first_batch_max_ts(first), itertools.chain([first], tables)


def _first_batch_max_ts(table: pa.Table) -> int:
    """Best available stand-in for rule ROLL-2's first-batch timestamp: the first record's timestamp."""
    if table.num_rows == 0:
        return -1
    return int(table.column("timestamp")[0].as_py())
