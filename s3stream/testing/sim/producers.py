"""Idempotent producers in the simulation: what each simulated producer sent, and what its retries must get.

A simulated producer (a producer id per partition, as Kafka's sequences are per partition) sends batches with
increasing sequence numbers and sometimes bumps its epoch (a restarted producer instance). A *retry* resends one
of its recent batches with the same records (the same ``sim`` identities), so a retry written a second time
shows up as a record read twice, and a retry acknowledged elsewhere than its original as a record that moved.

When the engine must deduplicate a retry (:func:`must_dedupe`): the original was acknowledged and every record
of it must still be readable, and so was every later batch of the producer in the same epoch, fewer than
:data:`~s3stream.base.producer.MAX_BATCHES_PER_PRODUCER` of them, with no epoch bump since. Then the retry must
be acknowledged at the original's offsets (a refusal, OutOfOrderSequence or ProducerFenced, is a finding). In
every other case (a batch lost with a crash or replaced in a takeover, a gap, an older epoch) the typed
refusals are expected, and an acknowledged retry's records must be where it says, once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from s3stream.base.producer import MAX_BATCHES_PER_PRODUCER, ProducerBatch
from s3stream.testing.sim.model import Append, PartModel

__all__ = ["SimProducer", "must_dedupe"]


@dataclass(slots=True)
class SimProducer:
    """One producer id's client-side state on one partition."""

    producer_id: int
    epoch: int = 0
    seq: int = 0
    sent: list[Append] = field(default_factory=list)  # every batch sent (not retries), oldest first

    def next_batch(self, count: int) -> ProducerBatch:
        batch = ProducerBatch(self.producer_id, self.epoch, self.seq, count)
        self.seq += count
        return batch

    def bump(self) -> None:
        """A new producer instance: the next epoch, sequences from 0 (the old epoch's retries are fenced)."""
        self.epoch += 1
        self.seq = 0

    def retriable(self) -> list[Append]:
        """The batches a retry may resend: the last few (one more than the log remembers) whose records were
        not legitimately removed (retention, DeleteRecords, compaction)."""
        return self.sent[-(MAX_BATCHES_PER_PRODUCER + 1):]


def must_dedupe(producer: SimProducer, original: Append, part: PartModel) -> bool:
    """Whether the log must still remember ``original`` (see the module docstring)."""
    batch = original.producer
    if batch is None or batch.producer_epoch != producer.epoch or original.status != "acked":
        return False
    index = producer.sent.index(original)
    later = producer.sent[index:]
    if len(later) > MAX_BATCHES_PER_PRODUCER:
        return False
    for append in later:
        if append.status != "acked" or any(r.ident not in part.must for r in append.records):
            return False
    return True
