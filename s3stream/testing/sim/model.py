"""The simulation's model of every partition, and the auditor that holds the store to it after every step.

Every record the simulation appends is unique: a header ``sim`` names it (``a{append}.{index}``), so a record
read back is recognised wherever it turns up, tombstones included. The model knows, per partition, each
append (its process, ack mode and outcome), where each record was first seen or acknowledged (an offset
never changes its record), which acknowledged records must still be readable, and which may be gone:

* below the log start, only when a ``DeleteRecords`` covered it or a retention pass found it expired
  (its timestamp older than ``now - retention.ms`` at that pass);
* on a compacted topic, only when a later record of the same key is in the log (or it is a tombstone);
* an ``ack=wal`` record of a node whose partition another node claimed, at or past what that node had
  in the bucket at the claim (docs/configuration.md, "What each ack mode promises": replaced by design).

:class:`Auditor.check_partition` compares one full read of a partition with the model and raises
:class:`AuditFailure` with what it found; the checks are listed in :mod:`s3stream.testing.sim`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from s3stream.base.producer import ProducerBatch

__all__ = ["Append", "AuditFailure", "Claim", "PartModel", "Row", "SimRecord"]


class AuditFailure(AssertionError):
    """The store broke one of the simulation's invariants (the message says which, with the evidence)."""


@dataclass(frozen=True, slots=True)
class SimRecord:
    """One appended record: its identity (the ``sim`` header), key, tombstone flag and timestamp."""

    ident: str
    key: bytes | None
    tombstone: bool
    timestamp: int


@dataclass(slots=True)
class Append:
    """One append call and what became of it."""

    aid: int
    proc: str
    incarnation: int
    part: tuple[str, int]
    ack: str
    records: list[SimRecord]
    status: str = "pending"  # pending | acked | failed (may be in the log) | refused (never written) | unknown
    base: int | None = None
    outcome: str = ""
    producer: ProducerBatch | None = None  # an idempotent producer's batch
    retry_of: Append | None = None  # a producer's retry of this earlier batch (the same records)


@dataclass(frozen=True, slots=True)
class Row:
    """One record read back."""

    offset: int
    ident: str
    key: bytes | None
    tombstone: bool


@dataclass(frozen=True, slots=True)
class Claim:
    """A process claimed the partition for writing; ``end``: what the previous writer had in the bucket."""

    proc: str
    end: int


@dataclass(slots=True)
class PartModel:
    """What the simulation knows about one partition (see the module docstring)."""

    topic: str
    index: int
    compact: bool
    delete: bool
    appends: list[Append] = field(default_factory=list)
    records: dict[str, tuple[Append, int]] = field(default_factory=dict)  # ident -> (append, index in it)
    placed: dict[str, int] = field(default_factory=dict)  # ident -> its offset (fixed forever once known)
    must: dict[str, int] = field(default_factory=dict)  # acknowledged idents that must be readable -> offset
    owner: dict[int, str] = field(default_factory=dict)  # offset -> the must-survive ident there
    acked_by: dict[str, Append] = field(default_factory=dict)  # must ident -> the append (or retry) that acked it
    lost_ok: set[str] = field(default_factory=set)  # acknowledged, replaced by design (a takeover)
    gone: set[str] = field(default_factory=set)  # legitimately removed: must never come back
    log_start: int = 0
    leo: int = 0
    leo_may_drop: bool = False  # a crash or takeover since the last audit: unacknowledged tails may vanish
    deleted_before: int = 0  # the highest DeleteRecords target tried
    retention_cutoff: int | None = None  # the highest ``now - retention.ms`` a retention pass used
    claims: list[Claim] = field(default_factory=list)
    last_claim: dict[str, int] = field(default_factory=dict)  # process -> index of its last claim
    writer: str | None = None  # the process that claimed it last
    reader: str = ""  # who read it at the last audit (the log end a writer sees runs ahead of the bucket's)

    prefix: str = ""  # its key prefix in the bucket: logs/{topic_id}/{index}/

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"

    # -- events --------------------------------------------------------------------------------------------

    def add(self, append: Append) -> None:
        self.appends.append(append)
        for i, rec in enumerate(append.records):
            self.records[rec.ident] = (append, i)

    def claim(self, proc: str, end: int) -> None:
        """``proc`` claims the partition; acknowledged ``ack=wal`` records of other processes at or past
        ``end`` may be replaced."""
        self.claims.append(Claim(proc, end))
        self.last_claim[proc] = len(self.claims) - 1
        if self.writer is not None and self.writer != proc:
            self.leo_may_drop = True
        self.writer = proc
        for ident, offset in list(self.must.items()):
            append = self.acker(ident)
            if append.proc != proc and append.ack == "wal" and offset >= end:
                self._let_go(ident)

    def _let_go(self, ident: str) -> None:
        offset = self.must.pop(ident)
        self.lost_ok.add(ident)
        if self.owner.get(offset) == ident:
            del self.owner[offset]

    def acked(self, append: Append, base: int) -> None:
        """``append`` was acknowledged at ``base``."""
        append.status, append.base = "acked", base
        replaced = self._replaced(append, base)
        for i, rec in enumerate(append.records):
            offset = base + i
            if replaced:
                self.lost_ok.add(rec.ident)
                if append.producer is None:  # a producer's batch: its retry may write it anew elsewhere
                    self.place(rec.ident, offset, why="acknowledged")
                continue
            other = self.owner.get(offset)
            if other is not None and other != rec.ident:
                raise AuditFailure(f"{self.name}: offset {offset} acknowledged twice: {other} and {rec.ident}")
            self.must[rec.ident] = offset
            self.owner[offset] = rec.ident
            self.acked_by[rec.ident] = append
            self.place(rec.ident, offset, why="acknowledged")
        if not replaced and append.retry_of is None:  # a retry's offsets are its original's: not in call order
            self._check_order(append, base)

    def retried(self, original: Append) -> None:
        """A producer resends ``original``: records of it not acknowledged as must-survive may be written
        anew (lost with a crash, or replaced in a takeover), so where they were seen no longer binds them."""
        if original.status == "refused":
            original.status = "unknown"  # the retry may write what the first attempt could not
        for rec in original.records:
            if rec.ident not in self.must:
                self.placed.pop(rec.ident, None)
                self.lost_ok.discard(rec.ident)

    def acker(self, ident: str) -> Append:
        """The append whose acknowledgement binds ``ident`` (its own, or a producer's retry of it)."""
        return self.acked_by.get(ident) or self.records[ident][0]

    def _replaced(self, append: Append, base: int) -> bool:
        """Whether another process claimed the partition after ``append``'s process last did, below ``base``
        (its ``ack=wal`` records are then replaced by design)."""
        if append.ack != "wal":
            return False
        mine = self.last_claim.get(append.proc, -1)
        return any(c.proc != append.proc and base >= c.end for c in self.claims[mine + 1:])

    def place(self, ident: str, offset: int, *, why: str) -> None:
        """``ident`` is at ``offset``: forever, and consistently with the rest of its append."""
        known = self.placed.get(ident)
        if known is not None:
            if known != offset:
                raise AuditFailure(f"{self.name}: record {ident} moved from offset {known} to {offset} ({why})")
            return
        append, i = self.records[ident]
        base = offset - i
        for j, rec in enumerate(append.records):
            other = self.placed.get(rec.ident)
            if other is not None and other != base + j:
                raise AuditFailure(f"{self.name}: append a{append.aid} is not contiguous: record {j} at {other}, "
                                   f"record {i} at {offset}")
        self.placed[ident] = offset

    def _check_order(self, append: Append, base: int) -> None:
        """Appends of one process incarnation get offsets in call order (checked between acknowledged appends
        that must stay: a replaced one may be anywhere)."""
        for other_append in self.appends:
            if (other_append is append or other_append.proc != append.proc
                    or other_append.incarnation != append.incarnation):
                continue
            first = other_append.records[0].ident if other_append.records else None
            if first is None or first not in self.must or self.acked_by.get(first) is not other_append:
                continue  # not bound, or bound by a producer's retry at its offsets
            other_base = self.must[first]
            if (other_append.aid < append.aid) != (other_base < base):
                raise AuditFailure(f"{self.name}: appends a{other_append.aid} and a{append.aid} of {append.proc}#"
                                   f"{append.incarnation} got offsets out of call order ({other_base}, {base})")

    # -- the audit of one full read -------------------------------------------------------------------------

    def check(self, rows: list[Row], log_start: int, leo: int, *, reader: str,
              parked: frozenset[str] = frozenset()) -> None:
        """Hold one full read ``rows`` of ``[log_start, leo)`` by ``reader`` (a process incarnation) to the
        model (see the module docstring). The records of a process in ``parked`` (closed with records only its
        local WAL holds) on a partition it still owns are not looked for: they come back when it reopens."""
        name = self.name
        if log_start < self.log_start:
            raise AuditFailure(f"{name}: the log start moved back from {self.log_start} to {log_start}")
        if leo < log_start:
            raise AuditFailure(f"{name}: log end {leo} below the log start {log_start}")
        if leo < self.leo and not self.leo_may_drop and reader == self.reader:
            raise AuditFailure(f"{name}: the log end moved back from {self.leo} to {leo}")
        by_offset: dict[int, Row] = {}
        seen: set[str] = set()
        last_by_key: dict[bytes | None, int] = {}
        prev = -1
        for row in rows:
            if row.offset <= prev:
                raise AuditFailure(f"{name}: offsets not increasing in a read: {row.offset} after {prev}")
            prev = row.offset
            if not log_start <= row.offset < leo:
                raise AuditFailure(f"{name}: read offset {row.offset} outside [{log_start}, {leo})")
            if row.ident in seen:
                raise AuditFailure(f"{name}: record {row.ident} read twice (offset {row.offset})")
            seen.add(row.ident)
            known = self.records.get(row.ident)
            if known is None:
                raise AuditFailure(f"{name}: unknown record {row.ident!r} at offset {row.offset}")
            append, i = known
            if append.status == "refused":
                raise AuditFailure(f"{name}: record {row.ident} of append a{append.aid}, refused with "
                                   f"{append.outcome} (nothing written), is at offset {row.offset}")
            if row.ident in self.gone:
                raise AuditFailure(f"{name}: record {row.ident}, removed earlier, is back at offset {row.offset}")
            rec = append.records[i]
            if rec.key != row.key or rec.tombstone != row.tombstone:
                raise AuditFailure(f"{name}: record {row.ident} at offset {row.offset} changed: key {row.key!r} "
                                   f"tombstone {row.tombstone}")
            self.place(row.ident, row.offset, why="read")
            by_offset[row.offset] = row
            last_by_key[row.key] = row.offset
        waiting = self.writer if self.writer in parked else None
        for ident, offset in sorted(self.must.items(), key=lambda kv: kv[1]):
            there = by_offset.get(offset)
            if there is not None and there.ident == ident:
                continue
            if waiting is not None and self.acker(ident).proc == waiting:
                continue
            if there is not None:
                raise AuditFailure(f"{name}: acknowledged record {ident} at offset {offset} was replaced by "
                                   f"{there.ident}")
            self._removed(ident, offset, log_start, last_by_key)
        must_end = max((o for i, o in self.must.items() if waiting is None or self.acker(i).proc != waiting),
                       default=-1) + 1
        if leo < must_end:
            raise AuditFailure(f"{name}: log end {leo} below acknowledged offset {must_end - 1}")
        self.log_start, self.leo, self.leo_may_drop, self.reader = log_start, leo, False, reader

    def _removed(self, ident: str, offset: int, log_start: int, last_by_key: dict[bytes | None, int]) -> None:
        """The acknowledged ``ident`` at ``offset`` is not in the read: legitimately, or an AuditFailure."""
        append, i = self.records[ident]
        rec = append.records[i]
        if offset < log_start:
            expired = (self.delete and self.retention_cutoff is not None
                       and rec.timestamp < self.retention_cutoff)
            # compaction may have removed it first (a later record of its key exists), and retention then the
            # segment by its survivors' timestamps (Kafka's largest timestamp of a cleaned segment)
            superseded = self.compact and self._superseded(rec, offset)
            if offset < self.deleted_before or expired or superseded:
                self._forget(ident)
                return
            raise AuditFailure(f"{self.name}: acknowledged record {ident} (offset {offset}, timestamp "
                               f"{rec.timestamp}) is below the log start {log_start}, but no DeleteRecords "
                               f"(up to {self.deleted_before}) or retention pass (cutoff {self.retention_cutoff}) "
                               "covered it")
        if self.compact and (rec.tombstone or last_by_key.get(rec.key, -1) > offset):
            self._forget(ident)
            return
        raise AuditFailure(f"{self.name}: acknowledged record {ident} ({append.ack}, append a{append.aid} of "
                           f"{append.proc}#{append.incarnation}) is missing at offset {offset} "
                           f"(log [{log_start}, ...))")

    def _superseded(self, rec: SimRecord, offset: int) -> bool:
        """Whether a record of the same key was placed at a later offset (what compaction keeps instead)."""
        for other, other_offset in self.placed.items():
            if other_offset > offset:
                append, i = self.records[other]
                if append.records[i].key == rec.key:
                    return True
        return False

    def _forget(self, ident: str) -> None:
        offset = self.must.pop(ident)
        self.gone.add(ident)
        if self.owner.get(offset) == ident:
            del self.owner[offset]

    def fold_check(self, rows: list[Row], *, parked: frozenset[str] = frozenset()) -> None:
        """Compacted topics: the log folded last-write-wins keeps, for every key, the latest acknowledged
        record or one written after it (a tombstone's key may be gone). Records a parked owner holds back
        (see :meth:`check`) are not looked for."""
        if not self.compact:
            return
        waiting = self.writer if self.writer in parked else None
        latest_read: dict[bytes | None, int] = {}
        for row in rows:
            latest_read[row.key] = row.offset
        latest_acked: dict[bytes | None, tuple[int, SimRecord]] = {}
        for ident, offset in self.must.items():
            append, i = self.records[ident]
            if self.acker(ident).proc == waiting:
                continue
            rec = append.records[i]
            cur = latest_acked.get(rec.key)
            if cur is None or offset > cur[0]:
                latest_acked[rec.key] = (offset, rec)
        for key, (offset, rec) in latest_acked.items():
            if rec.tombstone:
                continue
            if latest_read.get(key, -1) < offset:
                raise AuditFailure(f"{self.name}: the log folded by key lost {key!r}: its latest acknowledged "
                                   f"value {rec.ident} is at offset {offset}, the log's latest at "
                                   f"{latest_read.get(key)}")
