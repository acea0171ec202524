"""A node: one writing process's identity, its local WAL directory, and its fenced WAL namespace.

Vocabulary:

* **node id**: the name of a local WAL directory under the store's WAL root (``n-<ulid>``). A process
  takes an exclusive lock on the directory; a restarted process reuses an unlocked directory left
  behind (so it replays that WAL), and concurrent processes get distinct ones.
* **WAL namespace**: ``wal/{node_id}/{seq:020d}.wal`` in the bucket. Each WAL object's key is its
  commit point (put-if-absent). A node claims its namespace by writing a *fence object* at
  ``max_seq + 1`` (SlateDB's scheme): a zombie still using the same namespace then collides on its
  next PUT and learns it is fenced. Any other process can fence a node the same way before taking
  over its partitions.

Invariants: within a namespace sequence numbers are dense and never reused; the newest object of a
namespace is never garbage-collected (it is the fence floor).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from s3stream.base import layout
from s3stream.base.clock import Clock
from s3stream.base.errors import ObjectNotFound, PreconditionFailed
from s3stream.base.ids import IdSource
from s3stream.format.walobject import encode_fence_object
from s3stream.objectstore.protocol import ObjectStore

__all__ = ["NodeDirectory", "claim_namespace", "latest_wal_seq", "pick_node_directory"]

log = logging.getLogger(__name__)

_MAX_FENCE_ATTEMPTS = 32


@dataclass(frozen=True, slots=True)
class NodeDirectory:
    """A chosen local WAL directory; ``reused`` when it was left behind by an earlier process."""

    node_id: str
    path: Path
    reused: bool


def pick_node_directory(wal_root: str | os.PathLike[str], ids: IdSource, now_ms: int,
                        node_id: str | None = None) -> list[NodeDirectory]:
    """Candidate node directories in preference order: leftovers first (to recover them), then a new one.

    The caller tries to lock each in turn (the WAL writer takes the lock); an explicit ``node_id``
    yields just that directory.
    """
    root = Path(wal_root)
    root.mkdir(parents=True, exist_ok=True)
    if node_id is not None:
        path = root / node_id
        return [NodeDirectory(node_id, path, path.exists())]
    existing = sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("n-"))
    out = [NodeDirectory(p.name, p, True) for p in existing]
    fresh = f"n-{ids.ulid(now_ms).lower()}"
    out.append(NodeDirectory(fresh, root / fresh, False))
    return out


def latest_wal_seq(store: ObjectStore, node_id: str, *, after: int = -1) -> int:
    """The highest WAL object sequence in ``node_id``'s namespace (-1 when empty).

    LIST finds the bulk; then GET-probes forward, because a lagging listing must never make us reuse a
    sequence number (manifest-protocol.md L2).
    """
    prefix = layout.wal_prefix(node_id)
    start = layout.wal_key(node_id, after) if after >= 0 else None
    best = after
    for entry in store.list(prefix, start_after=start):
        seq = layout.parse_seq(entry.key)
        if seq is not None and seq > best:
            best = seq
    for _ in range(4):
        try:
            store.head(layout.wal_key(node_id, best + 1))
        except ObjectNotFound:
            break
        best += 1
    return best


def claim_namespace(store: ObjectStore, node_id: str, *, clock: Clock) -> int:
    """Fence every older user of ``node_id``'s namespace; return the fence seq (the node's epoch).

    The caller's first WAL object uses ``fence + 1``. Losing a race to the fence key means someone
    wrote there in between: re-probe and fence above it. A 412 or 409 with nothing at the key (a conflict
    the store reported for a write that did not happen) makes the probe find ``seq`` free, and the fence
    goes there again: fencing above a free seq would leave it to the zombie, whose upload could land there
    after a takeover read the namespace.
    """
    seq = latest_wal_seq(store, node_id) + 1
    for _ in range(_MAX_FENCE_ATTEMPTS):
        body = encode_fence_object(node_id=node_id, seq=seq, created_ms=clock.now_ms())
        try:
            store.put(layout.wal_key(node_id, seq), body, if_none_match=True)
        except PreconditionFailed:
            seq = latest_wal_seq(store, node_id, after=seq - 1) + 1
            continue
        log.debug("claimed WAL namespace %s at fence seq %d", node_id, seq)
        return seq
    raise PreconditionFailed(f"could not fence WAL namespace {node_id}: too much contention")

