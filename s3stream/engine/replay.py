"""Recovery's replay of a node's local WAL: the entries the bucket lacks, claimed and buffered again.

Split from :mod:`s3stream.engine.runtime` (which decides what to replay and when); this is the per-log
bookkeeping of one replay.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from s3stream.base.errors import CommitConflict, Fenced
from s3stream.format.walentry import AppendEntry, ClaimEntry, RollEntry, decode_entry
from s3stream.partition.log import PartitionLog
from s3stream.write.node_runtime import NodeRuntime
from wal import WalEntry

if TYPE_CHECKING:
    from s3stream.engine.runtime import Runtime

__all__ = ["Replay"]

log = logging.getLogger(__name__)


class Replay:
    """One recovery's logs: each resolved, checked and claimed once, then its unpublished entries replayed.

    A claim entry (:class:`~s3stream.format.walentry.ClaimEntry`) voids the earlier entries of its log: this node
    wrote them in an epoch another node ended by taking the log over, before this node took it back.

    Entries are decoded once and kept only when the bucket lacks their records (at most what was buffered
    but not yet published at the crash), so a gap can still be filled from older entries before anything is
    buffered: the uploader then sees the entries in local WAL order, which its trims rely on.
    """

    def __init__(self, rt: Runtime, node: NodeRuntime) -> None:
        self._rt = rt
        self._node = node
        self._logs: dict[str, PartitionLog] = {}
        self._ends: dict[str, int] = {}  # each claimed log's end in the bucket
        self._skipped: set[str] = set()
        # the local seq of each log's latest claim entry: its earlier entries are void (ClaimEntry)
        self._claimed_at: dict[str, int] = {}

    def _end(self, log_id: str) -> int | None:
        """Where ``log_id`` ends in the bucket (claiming it), or None when it is not to be replayed."""
        if log_id in self._skipped:
            return None
        end = self._ends.get(log_id)
        if end is not None:
            return end
        plog = self._rt.partition_for_log_id(log_id)
        if plog is None:  # topic deleted (or re-created)
            self._skipped.add(log_id)
            return None
        owner = plog.writer_owner()
        if owner is not None and owner != self._node.node_id:
            # another node claimed the partition after us, so it fenced this node: what the local WAL still
            # holds for it was never in the bucket and its offsets now belong to the new writer; replaying it
            # would steal the partition back and clash
            log.error("recovery of %s skipped: the partition is now written by %s, which fenced node %s; its "
                      "records only in this local WAL are lost", log_id, owner, self._node.node_id)
            self._skipped.add(log_id)
            return None
        try:
            end = plog.recovery_end()
        except (Fenced, CommitConflict) as exc:
            log.error("recovery of %s stopped: %s", log_id, exc)
            self._skipped.add(log_id)
            return None
        self._logs[log_id] = plog
        self._ends[log_id] = end
        return end

    def unpublished(self, entries: Iterable[WalEntry], *, only: set[str] | None = None
                    ) -> list[tuple[int, AppendEntry | RollEntry]]:
        """The decoded ``entries`` (of the logs ``only``) whose records or boundaries the bucket lacks."""
        out: list[tuple[int, AppendEntry | RollEntry]] = []
        for entry in entries:
            decoded = decode_entry(entry.payload, source=f"local WAL of {self._node.node_id}, entry {entry.seq}")
            if only is not None and decoded.log_id not in only:
                continue
            if isinstance(decoded, ClaimEntry):
                self._claimed_at[decoded.log_id] = max(entry.seq, self._claimed_at.get(decoded.log_id, -1))
                continue
            end = self._end(decoded.log_id)
            if end is None:
                continue
            if isinstance(decoded, RollEntry):
                if decoded.base_offset >= end:
                    out.append((entry.seq, decoded))
            elif decoded.batch.num_rows and decoded.batch.column(0)[-1].as_py() >= end:
                out.append((entry.seq, decoded))
        return out

    def _live(self, pending: list[tuple[int, AppendEntry | RollEntry]]) -> list[tuple[int, AppendEntry | RollEntry]]:
        """``pending`` without the entries a later claim entry of their log voided."""
        claimed = self._claimed_at
        return [(seq, d) for seq, d in pending if seq > claimed.get(d.log_id, -1)]

    def gaps(self, pending: list[tuple[int, AppendEntry | RollEntry]]) -> set[str]:
        """The logs whose first pending records start past their end in the bucket."""
        first: dict[str, int] = {}
        for _seq, decoded in self._live(pending):
            if isinstance(decoded, AppendEntry) and decoded.log_id not in first:
                first[decoded.log_id] = decoded.batch.column(0)[0].as_py()
        return {log_id for log_id, base in first.items() if base > self._ends[log_id]}

    def run(self, pending: list[tuple[int, AppendEntry | RollEntry]]) -> int:
        """Replay ``pending`` (in local WAL order); the number of entries buffered again."""
        replayed = 0
        for seq, decoded in self._live(pending):
            if decoded.log_id in self._skipped:
                continue
            try:
                replayed += self._logs[decoded.log_id].recover_entry(decoded, seq)
            except (Fenced, CommitConflict) as exc:
                log.error("recovery of %s stopped: %s", decoded.log_id, exc)
                self._skipped.add(decoded.log_id)
        return replayed

