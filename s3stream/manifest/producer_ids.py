"""Producer ids for idempotent producers (InitProducerId): blocks of ids, unique across every process.

Kafka's controller hands brokers blocks of 1000 producer ids (KIP-730); here the bucket does: the id counter
is a chain of immutable numbered documents (``layout.producer_ids_key(seq)``) committed with put-if-absent,
exactly as manifests are (:class:`~s3stream.manifest.versioned.VersionedStore`, manifest-protocol.md 4.3).
Version ``n`` records the block ``[block_start, next_id)`` its committer took; taking the next block is
the intent "``block_start = cur.next_id``, ``next_id = cur.next_id + size``", so two processes racing for a
block commit different versions and get disjoint blocks (the loser rebases on the winner). Ids start at 0.

Format 1, canonical JSON (sorted keys, no whitespace), every field present and exactly typed::

    {"format": 1, "seq": n, "parent_seq": n-1 | null, "commit_id": ULID, "committed_at_ms": ms,
     "block_start": first id of the block, "next_id": one past it, "owner": who took it}

A process (:class:`ProducerIdAllocator`) takes ids from its block in memory and commits a new block only
when it is used up; ids of a block a process did not use before it stopped are never handed out (as in
Kafka). Versions are never deleted: one ~200-byte object per :data:`BLOCK_SIZE` ids (a million producer
ids make a thousand objects), which keeps "the latest version" trivially safe to find.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass

from s3stream.base import layout
from s3stream.base.clock import Clock
from s3stream.base.crashpoints import CrashPoints
from s3stream.base.errors import CorruptData, InternalError
from s3stream.base.ids import IdSource
from s3stream.manifest.codec import (
    FieldError,
    Fields,
    check_format,
    dumps_canonical,
    field_error_to_corrupt,
    loads_object,
)
from s3stream.manifest.versioned import VersionedStore
from s3stream.objectstore.protocol import ObjectStore

__all__ = [
    "BLOCK_SIZE",
    "PRODUCER_IDS_FORMAT",
    "ProducerIdAllocator",
    "ProducerIdBlock",
    "ProducerIdsCodec",
    "decode_producer_id_block",
    "encode_producer_id_block",
    "producer_id_store",
]

PRODUCER_IDS_FORMAT = 1
#: ids per block (Kafka's ProducerIdManager block size)
BLOCK_SIZE = 1000
_MAX_ID = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """One version of the id counter: the block ``[block_start, next_id)`` taken by ``owner``."""

    block_start: int
    next_id: int
    owner: str
    seq: int = 0
    parent_seq: int | None = None
    commit_id: str = ""
    committed_at_ms: int = 0
    format: int = PRODUCER_IDS_FORMAT


def _problem(doc: ProducerIdBlock) -> str | None:
    if not 0 <= doc.block_start < doc.next_id <= _MAX_ID:
        return f"bad block [{doc.block_start}, {doc.next_id})"
    if not doc.owner:
        return "empty owner"
    if doc.seq < 0 or (doc.parent_seq is not None and not 0 <= doc.parent_seq < doc.seq):
        return f"bad seq {doc.seq} / parent_seq {doc.parent_seq}"
    return None


def encode_producer_id_block(doc: ProducerIdBlock) -> bytes:
    """The canonical JSON bytes of ``doc``."""
    return dumps_canonical({
        "format": doc.format, "seq": doc.seq, "parent_seq": doc.parent_seq, "commit_id": doc.commit_id,
        "committed_at_ms": doc.committed_at_ms, "block_start": doc.block_start, "next_id": doc.next_id,
        "owner": doc.owner,
    })


def decode_producer_id_block(data: bytes, *, source: str) -> ProducerIdBlock:
    """Parse and validate a counter version read from ``source``; CorruptData on any defect."""
    what = "producer id block"
    f = Fields(loads_object(data, source=source, what=what), "producer_ids")
    version = check_format(f, what=what, newest=PRODUCER_IDS_FORMAT, source=source)
    try:
        doc = ProducerIdBlock(
            format=version, seq=f.integer("seq", minimum=0), parent_seq=f.opt_integer("parent_seq", minimum=0),
            commit_id=f.text("commit_id"), committed_at_ms=f.integer("committed_at_ms"),
            block_start=f.integer("block_start", minimum=0), next_id=f.integer("next_id", minimum=1),
            owner=f.text("owner", allow_empty=False))
        f.finish()
    except FieldError as exc:
        raise field_error_to_corrupt(exc, what=what, source=source) from exc
    problem = _problem(doc)
    if problem is not None:
        raise CorruptData(f"invalid {what}: {problem}", source=source)
    return doc


class ProducerIdsCodec:
    """:class:`~s3stream.manifest.versioned.DocCodec` of the id counter."""

    def encode(self, doc: ProducerIdBlock) -> bytes:
        return encode_producer_id_block(doc)

    def decode(self, data: bytes, *, source: str) -> ProducerIdBlock:
        return decode_producer_id_block(data, source=source)

    def seq(self, doc: ProducerIdBlock) -> int:
        return doc.seq

    def commit_id(self, doc: ProducerIdBlock) -> str:
        return doc.commit_id

    def stamp(self, doc: ProducerIdBlock, *, seq: int, parent_seq: int | None, commit_id: str,
              now_ms: int) -> ProducerIdBlock:
        return dataclasses.replace(doc, format=PRODUCER_IDS_FORMAT, seq=seq, parent_seq=parent_seq,
                                   commit_id=commit_id, committed_at_ms=now_ms)

    def validate(self, doc: ProducerIdBlock) -> None:
        problem = _problem(doc)
        if problem is not None:
            raise InternalError(f"refusing to commit an invalid producer id block: {problem}")


def producer_id_store(store: ObjectStore, clock: Clock, ids: IdSource, *, crash_points: CrashPoints | None = None,
                      commit_timeout_s: float = 60.0) -> VersionedStore[ProducerIdBlock]:
    """The id counter's versions in ``store``."""
    return VersionedStore(store, key_for_seq=layout.producer_ids_key, prefix=layout.PRODUCER_IDS_PREFIX,
                          codec=ProducerIdsCodec(), clock=clock, ids=ids, commit_timeout_s=commit_timeout_s,
                          crash_points=crash_points)


class ProducerIdAllocator:
    """Unique producer ids for one process: from its current block, a new block committed when it runs out.

    Thread-safe; a caller waits for the block commit only once per ``block_size`` ids.
    """

    def __init__(self, versions: VersionedStore[ProducerIdBlock], owner: str, *,
                 block_size: int = BLOCK_SIZE) -> None:
        if block_size < 1 or not owner:
            raise InternalError("ProducerIdAllocator needs a block size >= 1 and an owner")
        self._versions = versions
        self._owner = owner
        self._block_size = block_size
        self._lock = threading.Lock()
        self._next = 0
        self._end = 0  # the current block is [_next, _end); empty until the first allocation

    def allocate(self) -> int:
        """A producer id no process got before; raises what the commit raises (CommitTimeout, ...)."""
        with self._lock:
            if self._next >= self._end:
                block = self._take_block()
                self._next, self._end = block.block_start, block.next_id
            pid = self._next
            self._next += 1
            return pid

    def _take_block(self) -> ProducerIdBlock:
        size = self._block_size
        owner = self._owner

        def take(cur: ProducerIdBlock | None) -> ProducerIdBlock:
            start = 0 if cur is None else cur.next_id
            if start > _MAX_ID - size:
                raise InternalError("producer ids are exhausted")
            return ProducerIdBlock(block_start=start, next_id=start + size, owner=owner)

        committed = self._versions.commit(take)
        assert committed is not None  # the intent always changes something
        return committed
