"""Manifest edits as pure intents: ``Manifest -> Manifest | None``, re-runnable on any newer state.

An **intent** states what a process wants ("add segment S at offset a", "replace inputs I by outputs
O") rather than a diff of a snapshot, so the commit protocol can re-apply it to whatever manifest won a
race (rebase). Every intent here is:

* **pure**: no I/O, no clock; time (``now_ms``) is captured when the intent is built;
* **idempotent**: applied to its own result it returns None ("nothing to change"), so a commit whose
  response was lost and that is retried on a state already containing it writes nothing twice
  (``claim_writer``/``claim_cleaner`` are the exception by nature: each run claims a new epoch);
* **honest about conflicts**: when it can no longer apply (the log moved past it, inputs vanished) it
  raises :class:`~s3stream.base.errors.CommitConflict`, and the caller abandons or re-plans.

Intents leave ``seq``/``parent_seq``/``commit_id`` alone: the commit stamps them. Values that name the
commit (``added_seq``, ``removed_seq``) use ``cur.seq + 1``, the seq the result will be committed at.
A malformed intent (outputs that do not cover the inputs) is a bug and raises InternalError.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Collection, Sequence

from s3stream.base.errors import CommitConflict, InternalError
from s3stream.base.producer import ProducerSnapshot
from s3stream.manifest.model import Epoch, Manifest, RemovedObject, SegmentRef, WalCursor

__all__ = [
    "Intent",
    "add_segment",
    "advance_log_start",
    "claim_cleaner",
    "claim_writer",
    "compose",
    "drop_segments",
    "forget_removed",
    "replace_segments",
    "set_producers",
    "set_wal_cursor",
]

#: A pure edit: the next manifest, or None when there is nothing to change.
Intent = Callable[[Manifest], Manifest | None]


def claim_writer(owner: str) -> Intent:
    """Become the partition's writer at the next epoch (fences every older writer)."""
    if not owner:
        raise InternalError("claim_writer: empty owner")

    def apply(cur: Manifest) -> Manifest:
        epoch = cur.writer.epoch + 1 if cur.writer is not None else 1
        return dataclasses.replace(cur, writer=Epoch(epoch, owner))

    return apply


def claim_cleaner(owner: str) -> Intent:
    """Become the partition's cleaner at the next epoch (fences every older cleaner)."""
    if not owner:
        raise InternalError("claim_cleaner: empty owner")

    def apply(cur: Manifest) -> Manifest:
        epoch = cur.cleaner.epoch + 1 if cur.cleaner is not None else 1
        return dataclasses.replace(cur, cleaner=Epoch(epoch, owner))

    return apply


def add_segment(ref: SegmentRef, wal: WalCursor | None) -> Intent:
    """Seal: append ``ref`` at the log's sealed end and move the WAL cursor to ``wal``.

    Already present (an earlier attempt landed) -> None. The sealed end moved elsewhere
    (``next_offset != ref.base_offset``) -> CommitConflict. ``wal=None`` keeps the current cursor.
    """

    def apply(cur: Manifest) -> Manifest | None:
        if any(s.key == ref.key for s in cur.segments):
            return None
        if cur.next_offset != ref.base_offset:
            raise CommitConflict(
                f"segment {ref.key} starts at {ref.base_offset} but the sealed log ends at {cur.next_offset}")
        added = dataclasses.replace(ref, added_seq=cur.seq + 1)
        return dataclasses.replace(cur, segments=(*cur.segments, added), next_offset=ref.end_offset,
                                   wal=wal if wal is not None else cur.wal)

    return apply


def set_wal_cursor(wal: WalCursor) -> Intent:
    """Move the WAL cursor. Never moves one node's cursor backwards (a stale retry is a no-op)."""

    def apply(cur: Manifest) -> Manifest | None:
        old = cur.wal
        if old is not None and old.node_id == wal.node_id and old.from_seq >= wal.from_seq:
            return None
        return dataclasses.replace(cur, wal=wal)

    return apply


def set_producers(snapshot: ProducerSnapshot | None, *, at_offset: int) -> Intent:
    """Record the idempotent producers' state as of the sealed end ``at_offset`` (compose it after the
    ``add_segment`` that seals up to there). None when it is already recorded (or both are None); a sealed
    end elsewhere -> CommitConflict (the snapshot would describe other offsets)."""
    if snapshot is not None and snapshot.through_offset != at_offset:
        raise InternalError(f"set_producers: snapshot through {snapshot.through_offset}, sealed end {at_offset}")

    def apply(cur: Manifest) -> Manifest | None:
        if cur.producers == snapshot:
            return None
        if cur.next_offset != at_offset:
            raise CommitConflict(f"producer state as of offset {at_offset}, but the sealed log ends at "
                                 f"{cur.next_offset}")
        return dataclasses.replace(cur, producers=snapshot)

    return apply


def advance_log_start(offset: int) -> Intent:
    """Move the log start offset up to ``offset``; None if it is already there (callers check bounds)."""

    def apply(cur: Manifest) -> Manifest | None:
        if offset <= cur.log_start_offset:
            return None
        return dataclasses.replace(cur, log_start_offset=offset)

    return apply


def forget_removed(keys: Collection[str]) -> Intent:
    """Drop the RemovedObject entries of ``keys`` (GC deleted those objects)."""
    gone = frozenset(keys)

    def apply(cur: Manifest) -> Manifest | None:
        kept = tuple(r for r in cur.removed if r.key not in gone)
        if len(kept) == len(cur.removed):
            return None
        return dataclasses.replace(cur, removed=kept)

    return apply


def drop_segments(keys: Sequence[str], *, now_ms: int, new_log_start: int) -> Intent:
    """Retention: remove a prefix of whole segments and move the log start past them.

    The log start becomes ``max(cur, new_log_start, end of the last dropped segment)`` (RET-4: Kafka moves
    it to the next segment's base). Every key must still be present and the keys must form a prefix of
    the segment list, else CommitConflict. If none is present and the log start already reached
    ``new_log_start``, the edit has landed (or the range is unreadable anyway): None.
    """
    wanted = frozenset(keys)
    if not wanted:
        raise InternalError("drop_segments: no keys")

    def apply(cur: Manifest) -> Manifest | None:
        count = sum(1 for s in cur.segments if s.key in wanted)
        if count == 0 and cur.log_start_offset >= new_log_start:
            return None
        if count != len(wanted):
            raise CommitConflict(f"drop_segments: {len(wanted) - count} of {len(wanted)} segments are gone")
        if any(s.key not in wanted for s in cur.segments[:count]):
            raise CommitConflict("drop_segments: the segments to drop are not a prefix of the log")
        dropped, kept = cur.segments[:count], cur.segments[count:]
        removed = tuple(RemovedObject(s.key, now_ms, cur.seq + 1) for s in dropped)
        start = max(cur.log_start_offset, new_log_start, dropped[-1].end_offset)
        return dataclasses.replace(cur, segments=kept, log_start_offset=start,
                                   removed=(*cur.removed, *removed))

    return apply


def replace_segments(inputs: Sequence[str], outputs: Sequence[SegmentRef], *, now_ms: int,
                     checkpoint: int | None) -> Intent:
    """The cleaner's atomic swap: contiguous ``inputs`` become ``outputs`` covering the same range.

    Applies only if every input is still present (Iceberg's replace rule); if some are gone (retention
    or another cleaner got there first) -> CommitConflict and the outputs become orphans. If all inputs
    are gone and all outputs present, the swap already landed -> None. ``checkpoint`` (when not None)
    becomes the cleaner checkpoint. Outputs are added with ``added_seq = cur.seq + 1``.
    """
    if not inputs or not outputs:
        raise InternalError("replace_segments: inputs and outputs must both be non-empty")
    _check_contiguous(outputs)
    in_keys, out_keys = frozenset(inputs), frozenset(o.key for o in outputs)
    if len(in_keys) != len(inputs):
        raise InternalError("replace_segments: duplicate input keys")

    def apply(cur: Manifest) -> Manifest | None:
        positions = [i for i, s in enumerate(cur.segments) if s.key in in_keys]
        if not positions and out_keys <= {s.key for s in cur.segments}:
            return None
        if len(positions) != len(in_keys):
            raise CommitConflict(f"replace_segments: {len(in_keys) - len(positions)} input segments are gone")
        first, last = positions[0], positions[-1]
        if last - first + 1 != len(positions):
            raise InternalError("replace_segments: inputs are not contiguous in the manifest")
        old = cur.segments[first:last + 1]
        if (outputs[0].base_offset, outputs[-1].last_offset) != (old[0].base_offset, old[-1].last_offset):
            raise InternalError(
                f"replace_segments: outputs cover [{outputs[0].base_offset}, {outputs[-1].last_offset}], "
                f"inputs [{old[0].base_offset}, {old[-1].last_offset}]")
        new = tuple(dataclasses.replace(o, added_seq=cur.seq + 1) for o in outputs)
        removed = tuple(RemovedObject(s.key, now_ms, cur.seq + 1) for s in old)
        return dataclasses.replace(
            cur, segments=(*cur.segments[:first], *new, *cur.segments[last + 1:]),
            removed=(*cur.removed, *removed),
            cleaner_checkpoint=checkpoint if checkpoint is not None else cur.cleaner_checkpoint)

    return apply


def _check_contiguous(refs: Sequence[SegmentRef]) -> None:
    for prev, nxt in itertools.pairwise(refs):
        if nxt.base_offset != prev.end_offset:
            raise InternalError(f"replace_segments: outputs are not contiguous at {prev.key} -> {nxt.key}")


def compose(*intents: Intent) -> Intent:
    """Apply ``intents`` in order, each to the previous result; None if none of them changed anything."""

    def apply(cur: Manifest) -> Manifest | None:
        changed = False
        for intent in intents:
            nxt = intent(cur)
            if nxt is not None:
                cur, changed = nxt, True
        return cur if changed else None

    return apply
