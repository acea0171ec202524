"""Finding a partition's unsealed data in WAL objects, for processes that did not write it.

A partition's manifest names the writer's WAL namespace and the first WAL sequence that may hold its
unsealed records (``WalCursor``). A reader, a takeover or a recovery LISTs that namespace from the
cursor, reads each object's index (a suffix GET, cached: WAL objects are immutable) and keeps the
chunks of its partition that continue the offsets contiguously from the sealed end. A hole (an object
still in flight while a later one already landed) ends the scan: what follows is not yet readable. A
hole where an object is proven to have been committed (the ``committed`` range later objects carry, or
a close marker's log ends) is data that was deleted: that raises ``CorruptData`` instead of silently
serving a shorter log, for readers and for a claiming writer alike.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from s3stream.base import layout
from s3stream.base.clock import Clock
from s3stream.base.errors import CorruptData, ObjectNotFound
from s3stream.format.walobject import WalChunkIndex, WalObjectIndex, read_wal_index
from s3stream.manifest.model import WalCursor
from s3stream.objectstore.protocol import ByteRange, ObjectStore

_PROBE_LIMIT = 8

__all__ = ["ChunkRef", "WalIndexCache", "contiguous_chunks", "fenced_upload"]


@dataclass(frozen=True, slots=True)
class ChunkRef:
    """One partition's chunk inside one WAL object."""

    key: str
    seq: int
    chunk: WalChunkIndex


class WalIndexCache:
    """Indexes of WAL objects by key (immutable objects, so entries never go stale); LRU-bounded."""

    def __init__(self, store: ObjectStore, *, max_entries: int = 4096, clock: Clock | None = None,
                 relist_after_s: float | None = None) -> None:
        self._store = store
        self._max = max_entries
        # what this cache knows of a namespace is complete only while GC cannot have deleted, unseen, an object
        # above it (GC waits orphan_min_age_ms): older knowledge is listed again instead of probed forward
        self._clock = clock
        self._relist_after_s = relist_after_s
        self._looked_at: dict[str, float] = {}  # node -> when its namespace was last listed or probed
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, WalObjectIndex] = OrderedDict()
        self._namespaces: dict[str, dict[int, str]] = {}   # node -> seq -> key of objects seen
        self._listed_from: dict[str, int] = {}               # node -> lowest seq the knowledge is complete from

    def put(self, key: str, index: WalObjectIndex) -> None:
        with self._lock:
            self._cache[key] = index
            self._cache.move_to_end(key)
            while len(self._cache) > self._max:
                self._cache.popitem(last=False)

    def get(self, key: str, size: int | None = None) -> WalObjectIndex:
        """The index of WAL object ``key`` (raises ObjectNotFound when it is gone)."""
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        if size is None:
            size = self._store.head(key).size
        def fetch(start: int, end: int) -> bytes:
            return self._store.get(key, ByteRange(start, end))

        index = read_wal_index(fetch, size, source=key)
        self.put(key, index)
        return index

    def scan(self, cursor: WalCursor, *, relist: bool = False) -> list[tuple[str, int, WalObjectIndex]]:
        """``(key, seq, index)`` of every WAL object of the cursor's namespace from ``from_seq`` on.

        The first scan of a namespace LISTs it; later scans reuse what they found and only probe the
        next sequence numbers with HEAD (sequences are dense), so a steady-state scan costs one HEAD
        that answers 404 and no LIST. Too many new objects fall back to a LIST, and so does knowledge older
        than ``relist_after_s`` (pacing time): GC may since have deleted an object above what is known
        (one that held only other partitions' sealed records), and a probe stopping at that gap would take
        the namespace for ending there, hiding every later object.
        """
        node = cursor.node_id
        now = None if self._clock is None else self._clock.monotonic()
        with self._lock:
            known = self._namespaces.get(node)
            top = max(known) if known else None
            listed_from = self._listed_from.get(node)
            looked_at = self._looked_at.get(node)
        stale = (now is not None and self._relist_after_s is not None
                 and (looked_at is None or now - looked_at > self._relist_after_s))
        if (relist or stale or known is None or top is None or listed_from is None or cursor.from_seq < listed_from
                or cursor.from_seq > top + _PROBE_LIMIT):
            self._list_into(node, cursor.from_seq)
        else:
            self._probe_forward(node, top)
        if now is not None:
            with self._lock:
                self._looked_at[node] = now
        with self._lock:
            found = self._namespaces.get(node, {})
            seqs = sorted(s for s in found if s >= cursor.from_seq)
            keyed = [(found[s], s) for s in seqs]
        out: list[tuple[str, int, WalObjectIndex]] = []
        for key, seq in keyed:
            try:
                out.append((key, seq, self.get(key)))
            except ObjectNotFound:
                self._forget(node, seq)  # collected since: it held nothing we still need
        return out

    def _list_into(self, node: str, from_seq: int) -> None:
        start = layout.wal_key(node, from_seq - 1) if from_seq > 0 else None
        for e in self._store.list(layout.wal_prefix(node), start_after=start):
            seq = layout.parse_seq(e.key)
            if seq is None or seq < from_seq:
                continue
            try:
                self.get(e.key, e.size)
            except ObjectNotFound:
                continue
            self._remember(node, seq, e.key)
        with self._lock:
            self._namespaces.setdefault(node, {})
            # complete from ``from_seq`` only: what was known below it may have a gap above its top (objects
            # this listing did not cover, between an older probe's end and ``from_seq``)
            self._listed_from[node] = from_seq

    def _probe_forward(self, node: str, top: int) -> None:
        seq = top + 1
        for _ in range(_PROBE_LIMIT):
            key = layout.wal_key(node, seq)
            try:
                self.get(key)
            except ObjectNotFound:
                return
            self._remember(node, seq, key)
            seq += 1
        self._list_into(node, seq)  # many new objects: one LIST is cheaper than probing each

    def _remember(self, node: str, seq: int, key: str) -> None:
        with self._lock:
            found = self._namespaces.setdefault(node, {})
            found[seq] = key
            while len(found) > self._max:
                lowest = min(found)
                del found[lowest]
                self._listed_from[node] = max(self._listed_from.get(node, 0), lowest + 1)

    def _forget(self, node: str, seq: int) -> None:
        with self._lock:
            self._namespaces.get(node, {}).pop(seq, None)


def contiguous_chunks(objects: list[tuple[str, int, WalObjectIndex]], log_id: str, from_offset: int, *,
                      from_seq: int) -> tuple[list[ChunkRef], tuple[int, ...]]:
    """The chunks of ``log_id`` that continue contiguously from ``from_offset``, and their roll offsets.

    ``objects`` are the WAL objects of one namespace present from ``from_seq`` (the manifest's cursor) on.
    Chunks wholly below ``from_offset`` are skipped (already sealed). A chunk starting above the expected
    offset, or a close marker recording a later end, means records sit in WAL objects that are not
    there. If one of those may still be in flight (nothing proves it was committed), the readable range
    ends before it, and so it does where a claiming process plugged a hole its fenced owner left (those
    records were never committed); if every one of them was committed (``WalObjectIndex.committed``),
    they are gone and the records with them. An object that landed above a fence of its own epoch (another
    process fenced the namespace while it was in flight) is skipped: it was never published.

    Raises:
        CorruptData: acknowledged records of ``log_id`` are in WAL objects that no longer exist.
    """
    ordered = sorted(objects, key=lambda t: t[1])
    fences = [seq for _, seq, index in ordered if index.fence]
    # an upload of a fenced epoch that landed above the fence (several were in flight at once) never counts
    ordered = [(key, seq, index) for key, seq, index in ordered if not fenced_upload(index, seq, fences)]
    present = {seq for _, seq, index in ordered if not index.hole}
    indexes = [index for _, _, index in ordered]
    last_seen = from_seq - 1
    expected = from_offset
    chunks: list[ChunkRef] = []
    rolls: list[int] = []
    for key, seq, index in ordered:
        end = index.end_of(log_id)
        if end is not None and end > expected:
            _check_lost(log_id, expected, end, range(last_seen + 1, seq), present, indexes, key)
            break
        chunk = index.chunk_for(log_id)
        if chunk is None:
            continue
        if chunk.record_count == 0:  # a boundary without records (an explicit roll): keep the boundary
            rolls.extend(r for r in chunk.roll_offsets if r == expected and r > from_offset)
            last_seen = seq
            continue
        if chunk.last_offset < expected:
            last_seen = seq
            continue
        if chunk.base_offset > expected:
            _check_lost(log_id, expected, chunk.base_offset, range(last_seen + 1, seq), present, indexes, key)
            break
        chunks.append(ChunkRef(key, seq, chunk))
        rolls.extend(r for r in chunk.roll_offsets if r > from_offset)
        expected = chunk.last_offset + 1
        last_seen = seq
    return chunks, tuple(sorted(set(rolls)))


def fenced_upload(index: WalObjectIndex, seq: int, fences: list[int]) -> bool:
    """Whether data object ``seq`` belongs to an epoch of its node that a fence object below it ended.

    A node's epoch starts after its own fence (``committed[0]`` is the epoch's first seq); a later fence, hole
    plug or close marker at ``F`` ends it. With several uploads in flight, an object of the old epoch above
    ``F`` may still land after that (its seq was free): it was never published (publication is in seq order
    and ``F`` is not the node's), so its records are acknowledged by nobody or only from the node's local
    WAL, which replays them into the next epoch's objects at the same offsets.
    """
    if index.fence or index.committed is None:
        return False
    first = index.committed[0]
    return any(first <= fence < seq for fence in fences)


def _check_lost(log_id: str, expected: int, found: int, between: range, present: set[int],
                indexes: list[WalObjectIndex], witness: str) -> None:
    """Offsets ``[expected, found)`` must be in the WAL objects ``between`` that are absent; raise when all
    of them were committed (deleted since), return when one may still be in flight."""
    absent = [seq for seq in between if seq not in present]
    if any(not any(index.committed_before(seq) for index in indexes) for seq in absent):
        return
    node = indexes[0].node_id if indexes else "?"
    missing = ", ".join(layout.wal_key(node, seq) for seq in absent[:4]) + (" ..." if len(absent) > 4 else "")
    raise CorruptData(f"records [{expected}, {found}) of {log_id} are missing: they were in committed WAL "
                      f"objects that no longer exist ({missing or 'none absent'}; {witness} follows them)",
                      source=log_id)
