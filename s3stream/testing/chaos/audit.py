"""The audit: one full read of each partition held to the side logs (pure: no I/O here).

For each partition, every acknowledged record must be at its acknowledged offset with the key and value it
was appended with, exactly once, and the log end must not be below it nor move back between audits, unless
the record was removed legitimately (the rules of :mod:`s3stream.testing.sim.model`, here on wall time):

* below the log start, when retention could have expired it (``delete`` policy and a timestamp older than
  ``now - retention.ms`` at the audit: no pass can have used a later cutoff) or, on a compacted topic, a
  later record of its key exists (compaction removed it first);
* at or above the log start on a compacted topic, when it is a tombstone or a later record of its key is in
  the read;
* an ``ack=wal`` record of a node whose partition another node claimed after the node's own claim it was
  written under, at or past that claim's end (what the old node had in the bucket): replaced by design
  (docs/configuration.md, "What each ack mode promises"). Claims come from the manifest history.

Only *settled* acknowledgements are held to a read taken while writers run: every ``ack=s3`` one (it is in
the bucket), and the ``ack=wal`` ones of incarnations that ended and whose node reopened since (recovery
uploads them). Records the read holds must all be known (an intent was logged before each append), never
twice, never at a second offset. A writer that logged ``fenced`` must have had no append resolve after it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from s3stream.testing.chaos.sidelog import AckedRecord, Event

__all__ = ["AuditResult", "ClaimInfo", "ReadRow", "Retention", "audit_partition"]

_MAX_PROBLEMS = 30


@dataclass(frozen=True, slots=True)
class ReadRow:
    """One record read back: its offset, identity (the ``chaos`` header), key and digest."""

    offset: int
    ident: str
    key: bytes | None
    digest: str
    tombstone: bool


@dataclass(frozen=True, slots=True)
class ClaimInfo:
    """A manifest version whose writer differs from the version before it: ``owner`` claimed at ``end``."""

    seq: int
    owner: str
    end: int
    committed_ms: int


@dataclass(frozen=True, slots=True)
class Retention:
    """The topic's removal rules at the audit: ``compact``, ``delete`` and the time cutoff (or None)."""

    compact: bool = False
    delete: bool = False
    cutoff_ms: int | None = None


@dataclass(slots=True)
class AuditResult:
    """Counts of one audit (every bad count must be 0) and the first problems found, in words."""

    acked_appends: int = 0
    acked_records: int = 0
    checked_records: int = 0
    read_records: int = 0
    lost: int = 0
    duplicated: int = 0
    changed: int = 0
    reused_offsets: int = 0
    acked_after_fenced: int = 0
    log_end_back: int = 0
    replaced_by_design: int = 0
    removed_legitimately: int = 0
    problems: list[str] = field(default_factory=list)

    BAD = ("lost", "duplicated", "changed", "reused_offsets", "acked_after_fenced", "log_end_back")

    @property
    def ok(self) -> bool:
        return all(getattr(self, name) == 0 for name in self.BAD)

    def problem(self, counter: str, message: str) -> None:
        setattr(self, counter, getattr(self, counter) + 1)
        if len(self.problems) < _MAX_PROBLEMS:
            self.problems.append(message)

    def add(self, other: AuditResult) -> None:
        for name in ("acked_appends", "acked_records", "checked_records", "read_records", "replaced_by_design",
                     "removed_legitimately", *self.BAD):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.problems.extend(other.problems[:max(0, _MAX_PROBLEMS - len(self.problems))])

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: getattr(self, name) for name in (
            "acked_appends", "acked_records", "checked_records", "read_records", "replaced_by_design",
            "removed_legitimately", *self.BAD)}
        out["ok"] = self.ok
        out["problems"] = list(self.problems)
        return out


@dataclass(frozen=True, slots=True)
class _Acked:
    ident: str
    offset: int
    rec: AckedRecord
    writer: str
    inc: int
    ack: str
    ms: int


def _replaced(claims: Sequence[ClaimInfo], a: _Acked) -> bool:
    """Whether ``a`` (ack=wal) was replaced by design by another node's later claim (module docstring)."""
    if a.ack != "wal":
        return False
    own = [c for c in claims if c.owner == a.writer and c.committed_ms <= a.ms]
    if not own:
        return False
    after = own[-1].seq
    return any(c.seq > after and c.owner != a.writer and c.end <= a.offset for c in claims)


def audit_partition(partition: int, acks: Iterable[Event], intents: Iterable[Event], rows: Sequence[ReadRow],
                    log_start: int, leo: int, *, claims: Sequence[ClaimInfo] = (),
                    retention: Retention = Retention(), settled: Callable[[str, int, str], bool] | None = None,
                    previous_leo: int = 0, fenced: Iterable[Event] = ()) -> AuditResult:
    """Audit one read of ``partition`` (see the module docstring).

    Args:
        acks: the ``ack`` events to hold the read to (read from the side logs *before* the partition).
        intents: the ``intent`` events (read *after* the partition, so every record read is known).
        rows: the read, ``[log_start, leo)``.
        claims: the partition's claims from its manifest history, in seq order.
        settled: ``(writer, incarnation, ack)`` -> whether such acknowledgements must be visible in this read
            (every one by default: a final audit).
        previous_leo: the log end of the previous audit (it must not move back).
        fenced: the ``fenced`` events: no append of that incarnation may resolve after it.
    """
    res = AuditResult()
    known: dict[str, tuple[AckedRecord, Event]] = {}
    for ev in intents:
        if ev.fields["p"] == partition:
            for rec in ev.records():
                known[rec.ident] = (rec, ev)
    by_intent = {(ev.fields["w"], ev.fields["inc"], ev.fields["a"]): ev for ev in intents
                 if ev.fields["p"] == partition}
    fenced_ms = {(ev.fields["w"], ev.fields["inc"]): ev.fields["ms"] for ev in fenced}
    name = f"partition {partition}"
    acked: list[_Acked] = []
    for ev in acks:
        f = ev.fields
        if f["p"] != partition:
            continue
        intent = by_intent.get((f["w"], f["inc"], f["a"]))
        if intent is None:
            res.problem("changed", f"{name}: ack of {f['w']}.{f['inc']}.{f['a']} without an intent")
            continue
        recs = intent.records()
        res.acked_appends += 1
        res.acked_records += len(recs)
        if f["last"] - f["o"] + 1 != len(recs):
            res.problem("changed", f"{name}: append {f['w']}.{f['inc']}.{f['a']} of {len(recs)} records "
                                   f"acknowledged as {f['o']}..{f['last']}")
        fms = fenced_ms.get((f["w"], f["inc"]))
        if fms is not None and f["ms"] > fms:
            res.problem("acked_after_fenced", f"{name}: {f['w']}.{f['inc']}.{f['a']} resolved at {f['ms']} ms, "
                                              f"after the writer saw Fenced at {fms} ms")
        if settled is not None and not settled(f["w"], f["inc"], f["ack"]):
            continue
        for i, rec in enumerate(recs):
            acked.append(_Acked(rec.ident, f["o"] + i, rec, f["w"], f["inc"], f["ack"], f["ms"]))
    # the read: increasing offsets inside [log_start, leo), known records, unchanged, each once
    at: dict[int, ReadRow] = {}
    where: dict[str, int] = {}
    later_key: dict[bytes | None, int] = {}
    prev = -1
    for row in rows:
        res.read_records += 1
        if row.offset <= prev or not log_start <= row.offset < leo:
            res.problem("duplicated", f"{name}: offset {row.offset} after {prev} in a read of [{log_start}, {leo})")
        prev = max(prev, row.offset)
        if row.ident in where:
            res.problem("duplicated", f"{name}: record {row.ident} read at {where[row.ident]} and {row.offset}")
        where[row.ident] = row.offset
        at[row.offset] = row
        later_key[row.key] = max(later_key.get(row.key, -1), row.offset)
        rec_intent = known.get(row.ident)
        if rec_intent is None:
            res.problem("changed", f"{name}: unknown record {row.ident!r} at offset {row.offset}")
        elif (rec_intent[0].digest, rec_intent[0].key) != (row.digest, row.key):
            res.problem("changed", f"{name}: record {row.ident} at offset {row.offset} has another key or value")
    # every settled acknowledgement
    owner: dict[int, _Acked] = {}
    must_end = 0
    acked_keys: dict[bytes | None, int] = {}
    for a in acked:
        acked_keys[a.rec.key] = max(acked_keys.get(a.rec.key, -1), a.offset)
    for a in acked:
        if _replaced(claims, a):
            res.replaced_by_design += 1
            continue
        res.checked_records += 1
        other = owner.get(a.offset)
        if other is not None and other.ident != a.ident:
            res.problem("reused_offsets", f"{name}: offset {a.offset} acknowledged twice: {other.ident} and "
                                          f"{a.ident}")
        owner[a.offset] = a
        must_end = max(must_end, a.offset + 1)
        there = at.get(a.offset)
        if there is not None and there.ident == a.ident:
            continue
        if a.ident in where:
            res.problem("changed", f"{name}: acknowledged {a.ident} at {a.offset} was read at {where[a.ident]}")
            continue
        if there is not None:
            res.problem("lost", f"{name}: acknowledged {a.ident} ({a.ack}) at {a.offset} replaced by {there.ident}")
            continue
        superseded = max(later_key.get(a.rec.key, -1), acked_keys.get(a.rec.key, -1)) > a.offset
        if a.offset < log_start:
            expired = (retention.delete and retention.cutoff_ms is not None
                       and a.rec.timestamp < retention.cutoff_ms)
            if expired or (retention.compact and (superseded or a.rec.tombstone)):
                res.removed_legitimately += 1
                continue
        elif retention.compact and (a.rec.tombstone or later_key.get(a.rec.key, -1) > a.offset):
            res.removed_legitimately += 1
            continue
        res.problem("lost", f"{name}: acknowledged {a.ident} ({a.ack}, {a.writer}#{a.inc}) missing at offset "
                            f"{a.offset} (log [{log_start}, {leo}))")
    if leo < must_end:
        res.problem("lost", f"{name}: log end {leo} below an acknowledged offset {must_end - 1}")
    if leo < previous_leo:
        res.problem("log_end_back", f"{name}: the log end moved back from {previous_leo} to {leo}")
    return res
