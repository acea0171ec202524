"""Idempotent producers (KIP-98): who wrote a batch, and the sequence numbers that make retries harmless.

A Kafka client with idempotence on stamps each batch with its producer id, epoch and the sequence number of
the batch's first record (one sequence per record, per partition). The log keeps, per producer id, its
epoch and the last five batches' sequence ranges and offsets: a retried batch gets its original offsets
back instead of being written twice; a gap in the sequence is OutOfOrderSequence; an older epoch is
ProducerFenced.

The rules are Kafka's current ones (``ProducerStateManager``/``ProducerAppendInfo`` since 2.5, KIP-360):

* a batch whose epoch and exact sequence range match one of the producer's last
  :data:`MAX_BATCHES_PER_PRODUCER` batches is a duplicate: its original offsets, nothing written;
* an epoch older than the producer's is ProducerFenced (Kafka's INVALID_PRODUCER_EPOCH);
* a newer epoch must start at sequence 0 (else OutOfOrderSequence), and forgets the older epoch's batches;
* in the same epoch the batch must continue the last one: ``base == last + 1`` (0 after ``2**31 - 1``),
  else OutOfOrderSequence (a retry older than the remembered batches included);
* a producer id the log holds no state for is accepted at any sequence (UnknownProducerId is never raised:
  Kafka stopped returning it for produce in 2.5).

Bounds (:class:`ProducerStateTable`): at most :data:`MAX_PRODUCERS_PER_PARTITION` producer ids per partition,
least recently appended evicted first, and an id whose last append is older than
:data:`PRODUCER_ID_EXPIRATION_MS` (Kafka's ``producer.id.expiration.ms`` default, one day, on the store's
clock) is dropped. A forgotten producer keeps working (its next batch is accepted as an unknown one); only
the dedupe of its retries is lost.

Everything here is pure (no I/O, no clock): the partition passes ``now_ms`` in, and persists
:class:`ProducerSnapshot` in its manifest and :class:`ProducerAppend` in its WAL entries and objects.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from s3stream.base.errors import CorruptData, InternalError, InvalidArgument, OutOfOrderSequence, ProducerFenced
from s3stream.base.records import AppendResult

__all__ = [
    "MAX_BATCHES_PER_PRODUCER",
    "MAX_PRODUCERS_PER_PARTITION",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "PRODUCER_ID_EXPIRATION_MS",
    "ProducerAppend",
    "ProducerBatch",
    "ProducerEntry",
    "ProducerSnapshot",
    "ProducerStateTable",
]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
#: Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN (a client has at most 5 requests in flight)
MAX_BATCHES_PER_PRODUCER = 5
#: producer ids remembered per partition (least recently appended evicted first): bounds the manifest
MAX_PRODUCERS_PER_PARTITION = 1000
#: Kafka's ``producer.id.expiration.ms`` default: an id idle this long is forgotten
PRODUCER_ID_EXPIRATION_MS = 86_400_000

_SEQ_MOD = 1 << 31
_INT64_MAX = (1 << 63) - 1
_EPOCH_MAX = (1 << 15) - 1


@dataclass(frozen=True, slots=True)
class ProducerBatch:
    """The idempotence fields of one produced batch: ``record_count`` records from ``base_sequence`` on."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def last_sequence(self) -> int:
        """The sequence of the batch's last record (sequences wrap at 2**31 - 1, as in Kafka)."""
        return (self.base_sequence + self.record_count - 1) % _SEQ_MOD

    def check(self) -> None:
        """InvalidArgument unless every field is in Kafka's range (ids and sequences from the network)."""
        ok = (type(self.producer_id) is int and 0 <= self.producer_id <= _INT64_MAX
              and type(self.producer_epoch) is int and 0 <= self.producer_epoch <= _EPOCH_MAX
              and type(self.base_sequence) is int and 0 <= self.base_sequence < _SEQ_MOD
              and type(self.record_count) is int and 1 <= self.record_count < _SEQ_MOD)
        if not ok:
            raise InvalidArgument(f"invalid producer batch {self}: producer_id >= 0, 0 <= epoch <= 32767, "
                                  "0 <= base_sequence < 2**31 and record_count >= 1 are required")


@dataclass(frozen=True, slots=True)
class ProducerAppend:
    """One producer batch at the offsets the log gave it: what is remembered and what the WAL carries."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    base_offset: int

    @classmethod
    def of(cls, batch: ProducerBatch, base_offset: int) -> ProducerAppend:
        return cls(batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.record_count, base_offset)

    @property
    def last_sequence(self) -> int:
        return (self.base_sequence + self.record_count - 1) % _SEQ_MOD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.record_count - 1

    @property
    def result(self) -> AppendResult:
        return AppendResult(self.base_offset, self.last_offset)

    def to_list(self) -> list[int]:
        """``[producer_id, epoch, base_sequence, record_count, base_offset]`` (WAL object indexes)."""
        return [self.producer_id, self.producer_epoch, self.base_sequence, self.record_count, self.base_offset]

    @classmethod
    def from_list(cls, raw: object, *, source: str) -> ProducerAppend:
        """The inverse of :meth:`to_list`; CorruptData for anything malformed (bytes from the bucket)."""
        if type(raw) is not list or len(raw) != 5 or any(type(v) is not int for v in raw):
            raise CorruptData(f"malformed producer batch {raw!r}", source=source)
        out = cls(*raw)
        if not out.valid():
            raise CorruptData(f"producer batch out of range: {raw!r}", source=source)
        return out

    def valid(self) -> bool:
        return (0 <= self.producer_id <= _INT64_MAX and 0 <= self.producer_epoch <= _EPOCH_MAX
                and 0 <= self.base_sequence < _SEQ_MOD and 1 <= self.record_count < _SEQ_MOD
                and 0 <= self.base_offset <= _INT64_MAX - self.record_count)


@dataclass(frozen=True, slots=True)
class ProducerEntry:
    """What a partition remembers of one producer id: its epoch and its last batches, oldest first."""

    producer_id: int
    producer_epoch: int
    batches: tuple[ProducerAppend, ...]
    last_append_ms: int

    def find(self, batch: ProducerBatch) -> ProducerAppend | None:
        """The remembered batch ``batch`` duplicates (same epoch and exact sequence range), or None."""
        if batch.producer_epoch != self.producer_epoch:
            return None
        last = batch.last_sequence
        for b in self.batches:
            if b.base_sequence == batch.base_sequence and b.last_sequence == last:
                return b
        return None


@dataclass(frozen=True, slots=True)
class ProducerSnapshot:
    """The producer state of a partition as of ``through_offset`` (every batch below it, none above).

    Immutable (the manifest holds it). JSON form (:meth:`to_json`), entries least recently appended first::

        {"through_offset": N,
         "entries": [[producer_id, epoch, last_append_ms, [[base_sequence, record_count, base_offset], ...]], ...]}
    """

    through_offset: int
    entries: tuple[ProducerEntry, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"through_offset": self.through_offset, "entries": [
            [e.producer_id, e.producer_epoch, e.last_append_ms,
             [[b.base_sequence, b.record_count, b.base_offset] for b in e.batches]] for e in self.entries]}

    @classmethod
    def from_json(cls, obj: object, *, source: str) -> ProducerSnapshot:
        """Parse and check :meth:`to_json`'s form; CorruptData naming ``source`` on any defect."""
        if not isinstance(obj, dict) or set(obj) != {"through_offset", "entries"}:
            raise CorruptData("producer snapshot must be an object of through_offset and entries", source=source)
        through, raw_entries = obj["through_offset"], obj["entries"]
        if type(through) is not int or not 0 <= through <= _INT64_MAX or type(raw_entries) is not list:
            raise CorruptData("producer snapshot: bad through_offset or entries", source=source)
        entries: list[ProducerEntry] = []
        seen: set[int] = set()
        for raw in raw_entries:
            entry = _entry_from_json(raw, source)
            if entry.producer_id in seen or any(b.last_offset >= through for b in entry.batches):
                raise CorruptData(f"producer snapshot: producer {entry.producer_id} is listed twice or has "
                                  f"a batch at or past through_offset {through}", source=source)
            seen.add(entry.producer_id)
            entries.append(entry)
        return cls(through, tuple(entries))


def _entry_from_json(raw: object, source: str) -> ProducerEntry:
    if type(raw) is not list or len(raw) != 4 or any(type(v) is not int for v in raw[:3]) or \
            type(raw[3]) is not list or not 1 <= len(raw[3]) <= MAX_BATCHES_PER_PRODUCER:
        raise CorruptData(f"malformed producer snapshot entry {raw!r}"[:200], source=source)
    pid, epoch, last_ms, raw_batches = raw
    batches: list[ProducerAppend] = []
    for b in raw_batches:
        if type(b) is not list or len(b) != 3:
            raise CorruptData(f"malformed producer snapshot batch {b!r}"[:200], source=source)
        batches.append(ProducerAppend.from_list([pid, epoch, *b], source=source))
    if any(nxt.base_offset <= prev.last_offset for prev, nxt in itertools.pairwise(batches)):
        raise CorruptData(f"producer {pid}: snapshot batches are not in offset order", source=source)
    return ProducerEntry(pid, epoch, tuple(batches), last_ms)


class ProducerStateTable:
    """The mutable producer state of one partition (see the module docstring); not thread-safe.

    The owner checks a batch (:meth:`check`) and, once the batch is written at its offsets, records it
    (:meth:`record`). :meth:`fork` gives an overlay that checks a whole round of batches in order without
    touching this table until they are written.
    """

    __slots__ = ("_entries", "_max_producers", "_parent", "through_offset")

    def __init__(self, entries: Iterable[ProducerEntry] = (), *, through_offset: int = 0,
                 max_producers: int = MAX_PRODUCERS_PER_PARTITION,
                 parent: ProducerStateTable | None = None) -> None:
        self._entries: dict[int, ProducerEntry] = {e.producer_id: e for e in entries}
        self._max_producers = max_producers
        self._parent = parent
        #: every batch below this offset is reflected here (batches below it are skipped by :meth:`replay`)
        self.through_offset = through_offset

    @classmethod
    def from_snapshot(cls, snapshot: ProducerSnapshot | None, *,
                      max_producers: int = MAX_PRODUCERS_PER_PARTITION) -> ProducerStateTable:
        if snapshot is None:
            return cls(max_producers=max_producers)
        return cls(snapshot.entries, through_offset=snapshot.through_offset, max_producers=max_producers)

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[ProducerEntry]:
        return iter(self._entries.values())

    def get(self, producer_id: int) -> ProducerEntry | None:
        entry = self._entries.get(producer_id)
        if entry is None and self._parent is not None:
            return self._parent.get(producer_id)
        return entry

    def fork(self) -> ProducerStateTable:
        """An overlay over this table: checks and records go to it, this table is unchanged."""
        return ProducerStateTable(max_producers=self._max_producers, parent=self,
                                  through_offset=self.through_offset)

    def check(self, batch: ProducerBatch) -> AppendResult | None:
        """The original offsets when ``batch`` is a duplicate; None when it may be appended.

        Raises ProducerFenced (an older epoch) or OutOfOrderSequence (a gap, a retry older than the
        remembered batches, or a new epoch not starting at 0).
        """
        entry = self.get(batch.producer_id)
        if entry is None:
            return None  # Kafka >= 2.5: an unknown producer may start at any sequence
        dup = entry.find(batch)
        if dup is not None:
            return dup.result
        pid = batch.producer_id
        if batch.producer_epoch < entry.producer_epoch:
            raise ProducerFenced(f"producer {pid} epoch {batch.producer_epoch} is older than the log's "
                                 f"epoch {entry.producer_epoch}: a newer instance of the producer took over")
        if batch.producer_epoch > entry.producer_epoch:
            if batch.base_sequence != 0:
                raise OutOfOrderSequence(f"producer {pid}: a new epoch {batch.producer_epoch} must start at "
                                         f"sequence 0, not {batch.base_sequence}")
            return None
        last = entry.batches[-1].last_sequence
        if batch.base_sequence != (last + 1) % _SEQ_MOD:
            raise OutOfOrderSequence(f"producer {pid} epoch {batch.producer_epoch}: sequence "
                                     f"{batch.base_sequence} does not follow {last}")
        return None

    def record(self, append: ProducerAppend, now_ms: int) -> None:
        """Remember ``append`` (written at its offsets); evicts the least recently appended ids over the cap."""
        entry = self.get(append.producer_id)
        if entry is not None and entry.producer_epoch == append.producer_epoch:
            if entry.batches and entry.batches[-1].base_offset >= append.base_offset:
                return  # already reflected (a replay of what the snapshot holds)
            batches = (*entry.batches[1 - MAX_BATCHES_PER_PRODUCER:], append) if \
                len(entry.batches) >= MAX_BATCHES_PER_PRODUCER else (*entry.batches, append)
        else:
            batches = (append,)
        self._entries.pop(append.producer_id, None)  # re-inserted last: dict order is recency order
        self._entries[append.producer_id] = ProducerEntry(append.producer_id, append.producer_epoch, batches,
                                                          now_ms)
        self.through_offset = max(self.through_offset, append.last_offset + 1)
        if self._parent is None:
            while len(self._entries) > self._max_producers:
                del self._entries[next(iter(self._entries))]

    def replay(self, appends: Iterable[ProducerAppend], now_ms: int) -> None:
        """Record ``appends`` (in offset order) that lie at or past :attr:`through_offset`."""
        for a in appends:
            if a.base_offset >= self.through_offset:
                self.record(a, now_ms)

    def expire(self, now_ms: int, max_age_ms: int = PRODUCER_ID_EXPIRATION_MS) -> int:
        """Forget ids whose last append is older than ``max_age_ms``; returns how many."""
        cutoff = now_ms - max_age_ms
        old = [pid for pid, e in self._entries.items() if e.last_append_ms < cutoff]
        for pid in old:
            del self._entries[pid]
        return len(old)

    def snapshot(self) -> ProducerSnapshot:
        """This table's state as an immutable value (entries least recently appended first)."""
        if self._parent is not None:
            raise InternalError("a forked producer table cannot be snapshotted")
        return ProducerSnapshot(self.through_offset, tuple(self._entries.values()))

    def copy(self) -> ProducerStateTable:
        """An independent copy (entries are immutable: the copy shares them)."""
        if self._parent is not None:
            raise InternalError("a forked producer table cannot be copied")
        return ProducerStateTable(self._entries.values(), through_offset=self.through_offset,
                                  max_producers=self._max_producers)
