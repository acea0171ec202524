"""The writer state of a partition in the process that writes it: its unsealed segments and its tail.

* ``pending``: segments already rolled (a boundary decided at append, rule ROLL-1) but not yet sealed;
* ``active``: the segment receiving appends; ``leo``: the next offset;
* ``memory``: recent batches (the tail cache; unflushed ones are pinned until their WAL object lands);
* ``chunks``: where this node's WAL objects hold the partition's unsealed records;
* ``producers``: the idempotent producers' state through ``leo`` (checks of new batches); a rolled
  segment keeps a copy of it as of its end, which its seal commits to the manifest (the state of the
  offsets it seals, never of a batch that is not durable yet).

Invariants: ``manifest.next_offset <= pending[0].base <= ... <= active.base <= leo``; every offset in
``[manifest.next_offset, leo)`` is in ``memory`` or ``chunks`` (or both). The owner (:mod:`.state`) guards it
with the partition's lock; nothing here locks.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from s3stream.base.producer import ProducerAppend, ProducerSnapshot, ProducerStateTable
from s3stream.base.records import batch_nbytes
from s3stream.manifest.model import Epoch
from s3stream.policy.roll import ActiveStats
from s3stream.read.tiers import MemBatch
from s3stream.read.walscan import ChunkRef

if TYPE_CHECKING:
    from s3stream.write.node_runtime import NodeRuntime

__all__ = ["Unsealed", "WriterState", "split_unsealed"]


@dataclass(slots=True)
class Unsealed:
    """A segment not yet sealed: the active one, or one rolled and awaiting its seal."""

    base_offset: int
    end_offset: int
    size_bytes: int = 0
    record_count: int = 0
    max_timestamp: int = -1
    first_batch_max_ts: int = -1
    created_ms: int = 0
    jitter_ms: int = 0
    #: local WAL seq of the roll entry that closed it: kept replayable until it is sealed, so a restart
    #: after a crash claims the partition and seals it (the node never trims its local WAL past it)
    roll_seq: int | None = None
    #: the idempotent producers' state as of ``end_offset`` (taken when it is rolled)
    producers: ProducerStateTable | None = None

    def stats(self) -> ActiveStats:
        return ActiveStats(self.base_offset, self.size_bytes, self.record_count, self.first_batch_max_ts,
                           self.created_ms, self.jitter_ms)

    def add(self, nbytes: int, count: int, max_ts: int, end_offset: int, first_ts: int | None = None) -> None:
        """Account a batch; ``first_ts`` stands in for the first batch's max timestamp when rebuilding."""
        if self.record_count == 0 and self.first_batch_max_ts < 0:
            self.first_batch_max_ts = max_ts if first_ts is None else first_ts
        self.size_bytes += nbytes
        self.record_count += count
        self.max_timestamp = max(self.max_timestamp, max_ts)
        self.end_offset = end_offset

    def copy(self) -> Unsealed:
        return dataclasses.replace(self)

    @property
    def empty(self) -> bool:
        return self.record_count == 0 and self.size_bytes == 0


@dataclass(slots=True)
class WriterState:
    """What this node knows of the partition it writes (see the module docstring)."""

    epoch: Epoch
    node: NodeRuntime
    leo: int
    active: Unsealed
    pending: list[Unsealed] = field(default_factory=list)
    memory: deque[MemBatch] = field(default_factory=deque)
    memory_bytes: int = 0
    unflushed_from: int = 0
    chunks: list[ChunkRef] = field(default_factory=list)
    producers: ProducerStateTable = field(default_factory=ProducerStateTable)

    def record_producers(self, appends: Sequence[ProducerAppend], now_ms: int) -> None:
        """Producer batches written (or replayed) at their offsets, in offset order (those the state already
        reflects, below its ``through_offset``, are skipped)."""
        self.producers.replay(appends, now_ms)

    def producer_snapshot(self, seg: Unsealed, now_ms: int) -> ProducerSnapshot | None:
        """What a seal of ``seg`` records: the producers' state as of its end, expired ids dropped (None when
        none is left); the live state drops them too."""
        self.producers.expire(now_ms)
        table = seg.producers if seg.producers is not None else ProducerStateTable()
        table.expire(now_ms)
        table.through_offset = max(table.through_offset, seg.end_offset)
        return table.snapshot() if len(table) else None

    def roll(self, new_active: Unsealed, roll_seq: int | None = None) -> None:
        """The active segment becomes pending (closed by the roll entry at ``roll_seq``); ``new_active`` follows."""
        self.active.roll_seq = roll_seq
        self.active.producers = self.producers.copy()  # every batch below the roll is recorded already
        self.pending.append(self.active)
        self.active = new_active

    def add_batch(self, batch: pa.RecordBatch, base: int, last: int, nbytes: int) -> None:
        """``batch`` (offsets ``base..last``) is in the local WAL and the uploader: keep it in the tail."""
        self.memory.append(MemBatch(base, last, nbytes, batch))
        self.memory_bytes += nbytes
        self.leo = last + 1

    def flushed(self, ref: ChunkRef, last_offset: int) -> None:
        self.chunks.append(ref)
        self.unflushed_from = max(self.unflushed_from, last_offset + 1)

    def oldest_roll_seq(self) -> int | None:
        return min((seg.roll_seq for seg in self.pending if seg.roll_seq is not None), default=None)

    def evict(self, want_bytes: int) -> int:
        """Drop flushed batches from the tail cache, oldest first (unflushed ones are never evicted)."""
        freed = 0
        while self.memory and freed < want_bytes and self.memory[0].last < self.unflushed_from:
            freed += self.memory.popleft().nbytes
        self.memory_bytes -= freed
        return freed

    def sealed(self, seg: Unsealed, next_offset: int) -> int:
        """``seg`` is in the manifest, whose sealed tier now ends at ``next_offset``: drop it, and the chunks and
        tail batches below that end. Returns the tail bytes freed (0 when ``seg`` was not the oldest pending)."""
        if not self.pending or self.pending[0] is not seg:
            return 0
        self.pending.pop(0)
        self.chunks = [c for c in self.chunks if c.chunk.last_offset >= next_offset]
        dropped = 0
        while self.memory and self.memory[0].last < next_offset:
            dropped += self.memory.popleft().nbytes
        self.memory_bytes -= dropped
        return dropped

    def chunk_seqs_from(self, end_offset: int) -> list[int]:
        """The WAL objects holding records at or past ``end_offset`` (a seal's cursor must not pass them)."""
        return [c.seq for c in self.chunks if c.chunk.last_offset >= end_offset]

    def unsealed_chunks(self, next_offset: int) -> tuple[ChunkRef, ...]:
        return tuple(c for c in self.chunks if c.chunk.last_offset >= next_offset)


def rebuild_producers(snapshot: ProducerSnapshot | None, appends: Sequence[ProducerAppend],
                      segments: Sequence[Unsealed], now_ms: int) -> ProducerStateTable:
    """After a claim: the manifest's ``snapshot`` then the WAL objects' producer batches (in offset order);
    each rolled segment of ``segments`` (all but the last, the active one) gets the state as of its end.
    Returns the state through the last batch."""
    table = ProducerStateTable.from_snapshot(snapshot)
    i = 0
    for seg in segments[:-1]:
        j = i
        while j < len(appends) and appends[j].base_offset < seg.end_offset:
            j += 1
        table.replay(appends[i:j], now_ms)
        seg.producers = table.copy()
        i = j
    table.replay(appends[i:], now_ms)
    return table


def split_unsealed(chunks: Sequence[ChunkRef], rolls: Sequence[int], next_offset: int, now_ms: int,
                   jitter_ms: int, load: Callable[[ChunkRef], pa.RecordBatch]) -> list[Unsealed]:
    """Rebuild pending + active segments from WAL chunks and recorded roll offsets (after a restart).

    A chunk wholly inside one segment contributes its index stats; a chunk that straddles the sealed
    end or a roll offset is loaded and split, so sizes (which drive rule ROLL-1) stay exact.
    """
    end = chunks[-1].chunk.last_offset + 1 if chunks else next_offset
    bounds = sorted({r for r in rolls if next_offset < r < end})
    segs = [Unsealed(next_offset, next_offset, created_ms=now_ms)]
    for ref in chunks:
        c = ref.chunk
        while bounds and bounds[0] <= c.base_offset:
            start = bounds.pop(0)
            segs.append(Unsealed(start, start, created_ms=now_ms))
        inside = [b for b in bounds if b <= c.last_offset]
        if c.base_offset >= segs[-1].base_offset and not inside:
            segs[-1].add(c.size_bytes, c.record_count, c.max_timestamp, c.last_offset + 1, c.first_timestamp)
            continue
        batch = load(ref)
        for cut in [*inside, c.last_offset + 1]:
            part = batch.filter(pc.and_(pc.greater_equal(batch.column("offset"), segs[-1].base_offset),
                                        pc.less(batch.column("offset"), cut)))
            if part.num_rows:
                segs[-1].add(batch_nbytes(part), part.num_rows, int(pc.max(part.column("timestamp")).as_py()),
                             int(part.column("offset")[-1].as_py()) + 1, int(part.column("timestamp")[0].as_py()))
            if cut <= c.last_offset:
                bounds.pop(0)
                segs.append(Unsealed(cut, cut, created_ms=now_ms))
    segs[-1].jitter_ms = jitter_ms
    return segs
