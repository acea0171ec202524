"""The workload actions of the simulation: appends through every API, and idempotent producers' batches, retries
and epoch bumps, with the model learning each append's outcome (acknowledged, refused, failed, unknown)."""

from __future__ import annotations

import functools
from concurrent.futures import Future

import pyarrow as pa

from s3stream.base.errors import BufferFull, OutOfOrderSequence, ProducerFenced, S3StreamError
from s3stream.base.producer import ProducerBatch
from s3stream.base.records import HEADER_TYPE, AppendResult, Record
from s3stream.partition.log import PartitionLog
from s3stream.testing.sim.model import Append, AuditFailure, PartModel, SimRecord
from s3stream.testing.sim.process import SimProcess
from s3stream.testing.sim.producers import SimProducer, must_dedupe
from s3stream.testing.sim.world import BUGS, SimWorld

__all__ = ["Workload"]


class Workload(SimWorld):
    """Appends and producer retries (a mixin of :class:`~.runner.Simulation`)."""

    def _records(self, part: PartModel, aid: int, n: int) -> tuple[list[SimRecord], list[Record]]:
        """``n`` new records for ``part`` (each named by its ``sim`` header), as the model and the API see them."""
        now = self.clock.now_ms()
        recs: list[SimRecord] = []
        records: list[Record] = []
        for i in range(n):
            ident = f"a{aid}.{i}"
            if part.compact:
                k: bytes | None = b"k%d" % self.rng.randrange(6)
            else:
                k = None if self.rng.random() < 0.5 else b"x%d" % self.rng.randrange(1000)
            tombstone = part.compact and self.rng.random() < 0.12
            ts = now - self.rng.choice([0, 0, 0, 5, 700])
            value = None if tombstone else f"{ident}:".encode() * self.rng.choice([1, 4, 30])
            recs.append(SimRecord(ident, k, tombstone, ts))
            records.append(Record(k, value, ts, [("sim", ident.encode())]))
        return recs, records

    def _new_aid(self) -> int:
        aid = self.next_aid
        self.next_aid += 1
        return aid

    def _append(self, p: SimProcess, *, blocking: bool, arrow: bool = False, produce: bool = False) -> str:
        key = self.rng.choice(sorted(self.parts))
        plog = p.partition(*key)
        part = self._model_of(plog)  # a process that still sees a deleted incarnation writes there
        n = self.rng.choice([1, 1, 2, 3, 5, 12])
        ack = self.rng.choice(["wal", "s3", None])
        aid = self._new_aid()
        recs, records = self._records(part, aid, n)
        batch: ProducerBatch | None = None
        producer: SimProducer | None = None
        if produce:
            producer = self.rng.choice(self.producers[key])
            if len(producer.sent) >= 3 and all(a.status == "refused" for a in producer.sent[-3:]):
                producer.bump()  # as a Kafka producer does after OutOfOrderSequence (KIP-360)
            batch = producer.next_batch(n)
        append = Append(aid, p.name, p.incarnation, key, ack or self.settings["ack"], recs, producer=batch)
        part.add(append)
        if producer is not None:
            producer.sent.append(append)
        what = f"a{aid} {part.name} n={n} ack={ack or 'default'}{' arrow' if arrow else ''}"
        if batch is not None:
            what += f" producer {batch.producer_id}/{batch.producer_epoch} seq {batch.base_sequence}"
        return self._submit(plog, p, part, append, records, ack, blocking=blocking, arrow=arrow, what=what)

    def _model_of(self, plog: PartitionLog) -> PartModel:
        """The model of the incarnation ``plog`` writes (a process may see a deleted one for a while)."""
        part = self.models[(plog.topic_id, plog.partition)]
        if part is not self.parts.get((plog.topic, plog.partition)):
            self.count("stale_topic_writes")
        return part

    def _retry(self, p: SimProcess) -> str:
        """A producer resends one of its recent batches (the same records)."""
        key = self.rng.choice(sorted(k for k, prods in self.producers.items() if any(x.sent for x in prods)))
        part = self.parts[key]
        producer = self.rng.choice([x for x in self.producers[key] if x.sent])
        original = self.rng.choice(producer.retriable())
        assert original.producer is not None
        plog = p.partition(*key)
        if self._append_part.get(original.aid) is not part or self._model_of(plog) is not part:
            return f"a{original.aid}: another incarnation of {part.name}, not resent"
        if any(r.ident in part.gone for r in original.records):
            return f"a{original.aid}: removed since (retention, compaction), not resent"
        expected = must_dedupe(producer, original, part)
        part.retried(original)
        ack = self.rng.choice(["wal", "s3", None])
        retry = Append(self._new_aid(), p.name, p.incarnation, key, ack or self.settings["ack"], original.records,
                       producer=original.producer, retry_of=original)
        self._retries[retry.aid] = (producer, expected)
        records = [Record(r.key, None if r.tombstone else f"{r.ident}:".encode(), r.timestamp,
                          [("sim", r.ident.encode())]) for r in original.records]
        # the value differs from the original's (its length was drawn): the log must keep the original's
        batch = original.producer
        what = (f"a{retry.aid} retry of a{original.aid} ({original.status}) {part.name} ack={ack or 'default'} "
                f"producer {batch.producer_id}/{batch.producer_epoch} seq {batch.base_sequence}"
                f"{' must dedupe' if expected else ''}")
        return self._submit(plog, p, part, retry, records, ack, blocking=self.rng.random() < 0.3,
                            arrow=self.rng.random() < 0.5, what=what)

    def _bump_epoch(self) -> str:
        key = self.rng.choice(sorted(self.producers))
        producer = self.rng.choice(self.producers[key])
        producer.bump()
        return f"producer {producer.producer_id} of {self.parts[key].name}: epoch {producer.epoch}"

    def _submit(self, plog: PartitionLog, p: SimProcess, part: PartModel, append: Append, records: list[Record],
                ack: str | None, *, blocking: bool, arrow: bool, what: str) -> str:
        """Append ``records`` through the record or the Arrow API, blocking or not; the model learns the outcome."""
        if not blocking and self._touched is None:
            self._touched = {append.part}  # queued only: no step runs
        self._append_part[append.aid] = part
        batch = append.producer
        if blocking:
            try:
                result = (plog.append_arrow(_arrow_table(records), ack=ack, producer=batch) if arrow else
                          plog.append(records, ack=ack, producer=batch))
            except BufferFull:
                append.status, append.outcome = "refused", "BufferFull"
                self._settled_retry(p, append, None)
                return f"{what}: refused BufferFull"
            except S3StreamError as exc:
                append.status, append.outcome = _failed(exc), type(exc).__name__
                self._settled_retry(p, append, None)
                raise
            self._acked(p, p.incarnation, append, result)
            return f"{what}: acked at {result.base_offset}"
        try:
            future = (plog.append_arrow_async(_arrow_table(records), ack=ack, producer=batch) if arrow else
                      plog.append_async(records, ack=ack, producer=batch))
        except S3StreamError as exc:
            append.status, append.outcome = "refused", type(exc).__name__
            self._settled_retry(p, append, None)
            raise
        p.pending.append(append)
        future.add_done_callback(functools.partial(self._resolved, p, p.incarnation, append))
        return f"{what}: {'acked' if future.done() and future.exception() is None else 'queued'}"

    def _resolved(self, p: SimProcess, incarnation: int, append: Append, future: Future[AppendResult]) -> None:
        """An async append's future settled (in whichever step settled it)."""
        if append.status != "pending":
            return
        if append in p.pending:
            p.pending.remove(append)
        error = future.exception()
        if error is not None:
            append.status, append.outcome = _failed(error), type(error).__name__
            self._settled_retry(p, append, None)
            if p.incarnation == incarnation:
                self._learn(p, error)
            if isinstance(error, BUGS):
                self.problems.append(f"append a{append.aid} failed with {type(error).__name__}: {error}")
            return
        self._acked(p, incarnation, append, future.result())

    def _settled_retry(self, p: SimProcess, append: Append, result: AppendResult | None) -> None:
        """A producer's retry settled (``result`` None: refused or failed). One the log must deduplicate must
        get its original's offsets; a typed refusal of it is a finding."""
        known = self._retries.pop(append.aid, None)
        original = append.retry_of
        if known is None or original is None:
            return
        producer, expected = known
        part = self._append_part[append.aid]
        self.trace.append(f"  retry a{append.aid} of a{original.aid}: "
                          f"{append.outcome if result is None else f'acked at {result.base_offset}'}")
        # still (no crash or takeover since), and from the partition's writer (a node that has not learned yet
        # that another took the partition over serves its own stale producer state: its acks are replaced)
        expected = expected and must_dedupe(producer, original, part) and part.writer == append.proc
        if result is None:
            if expected and append.outcome in ("OutOfOrderSequence", "ProducerFenced"):
                self.problems.append(f"{p.name}: retry a{append.aid} of the acknowledged a{original.aid} (at "
                                     f"{original.base}, among its producer's last batches) refused with "
                                     f"{append.outcome}")
            return
        where = part.must.get(original.records[0].ident)  # the original's, or an earlier retry's that wrote it
        if expected and result.base_offset != where:
            self.problems.append(f"{p.name}: retry a{append.aid} of a{original.aid} acknowledged at "
                                 f"{result.base_offset}, the original's records are at {where}")
        if where is not None and result.base_offset == where:
            self.count("producer_dedupes")
            if append.ack == "s3" and original.ack == "wal":
                original.ack = "s3"  # the retry's ack=s3 promises the original's records are in the bucket

    def _acked(self, p: SimProcess, incarnation: int, append: Append, result: AppendResult) -> None:
        part = self._append_part.get(append.aid) or self.parts[append.part]
        if append.retry_of is not None:
            self._settled_retry(p, append, result)
            part.retried(append.retry_of)  # a takeover since it was sent may have let its records go
        if p.incarnation == incarnation and p.fenced:
            self.problems.append(f"{p.name}#{incarnation} acknowledged append a{append.aid} ({append.ack}) at "
                                 f"{result.base_offset} after it learned it was fenced")
        if result.last_offset - result.base_offset + 1 != len(append.records):
            self.problems.append(f"append a{append.aid} of {len(append.records)} records acknowledged as "
                                 f"{result.base_offset}..{result.last_offset}")
        self.count("acked_records", len(append.records))
        try:
            part.acked(append, result.base_offset)
        except AuditFailure as exc:
            self.problems.append(str(exc))


def _failed(exc: BaseException) -> str:
    """An append's status after ``exc``: a producer's typed refusal wrote nothing, anything else may have."""
    return "refused" if isinstance(exc, (OutOfOrderSequence, ProducerFenced)) else "failed"


def _arrow_table(records: list[Record]) -> pa.Table:
    """``records`` as the Arrow API takes them (key, value, timestamp, headers)."""
    return pa.table({
        "key": pa.array([r.key for r in records], type=pa.binary()),
        "value": pa.array([r.value for r in records], type=pa.binary()),
        "timestamp": pa.array([r.timestamp for r in records], type=pa.int64()),
        "headers": pa.array([[{"key": k, "value": v} for k, v in r.headers or ()] for r in records],
                            type=HEADER_TYPE),
    })
