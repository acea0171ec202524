"""Finding a partition's unsealed data in WAL objects, for processes that did not write it.

A partition's manifest names the writer's WAL namespace and the first WAL sequence that may hold its
unsealed records (``WalCursor``). A reader, a takeover or a recovery LISTs that namespace from the
cursor, reads each object's index (a suffix GET, cached: WAL objects are immutable) and keeps the
chunks of its partition that continue the offsets contiguously from the sealed end. A hole (an object
still in flight while a later one already landed) ends the scan: what follows is not yet readable.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from s3stream import layout
from s3stream.errors import ObjectNotFound
from s3stream.manifest.model import WalCursor
from s3stream.objectstore.protocol import ByteRange, ObjectStore
from s3stream.walobject import WalChunkIndex, WalObjectIndex, read_wal_index

__all__ = ["ChunkRef", "WalIndexCache", "contiguous_chunks"]


@dataclass(frozen=True, slots=True)
class ChunkRef:
    """One partition's chunk inside one WAL object."""

    key: str
    seq: int
    chunk: WalChunkIndex


class WalIndexCache:
    """Indexes of WAL objects by key (immutable objects, so entries never go stale); LRU-bounded."""

    def __init__(self, store: ObjectStore, *, max_entries: int = 4096) -> None:
        self._store = store
        self._max = max_entries
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, WalObjectIndex] = OrderedDict()

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

    def scan(self, cursor: WalCursor) -> list[tuple[str, int, WalObjectIndex]]:
        """``(key, seq, index)`` of every WAL object of the cursor's namespace from ``from_seq`` on."""
        start = layout.wal_key(cursor.node_id, cursor.from_seq - 1) if cursor.from_seq > 0 else None
        out: list[tuple[str, int, WalObjectIndex]] = []
        entries = sorted(
            ((layout.parse_seq(e.key), e.key, e.size)
             for e in self._store.list(layout.wal_prefix(cursor.node_id), start_after=start)),
            key=lambda t: -1 if t[0] is None else t[0],
        )
        for seq, key, size in entries:
            if seq is None or seq < cursor.from_seq:
                continue
            try:
                out.append((key, seq, self.get(key, size)))
            except ObjectNotFound:
                continue  # collected between LIST and GET: it held nothing we still need
        return out


def contiguous_chunks(objects: list[tuple[str, int, WalObjectIndex]], log_id: str,
                      from_offset: int) -> tuple[list[ChunkRef], tuple[int, ...]]:
    """The chunks of ``log_id`` that continue contiguously from ``from_offset``, and their roll offsets.

    Chunks wholly below ``from_offset`` are skipped (already sealed); a chunk starting above the
    expected offset is a hole, which ends the readable range.
    """
    expected = from_offset
    chunks: list[ChunkRef] = []
    rolls: list[int] = []
    for key, seq, index in sorted(objects, key=lambda t: t[1]):
        chunk = index.chunk_for(log_id)
        if chunk is None or chunk.record_count == 0:
            continue
        if chunk.last_offset < expected:
            continue
        if chunk.base_offset > expected:
            break
        chunks.append(ChunkRef(key, seq, chunk))
        rolls.extend(r for r in chunk.roll_offsets if r > from_offset)
        expected = chunk.last_offset + 1
    return chunks, tuple(sorted(set(rolls)))
