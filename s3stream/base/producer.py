"""Idempotent producers (KIP-98): who wrote a batch, and the sequence numbers that make retries harmless.

A Kafka client with idempotence on stamps each batch with its producer id, epoch and the sequence number of
the batch's first record (one sequence per record, per partition). The log keeps, per producer id, its
epoch and the last five batches' sequence ranges and offsets: a retried batch gets its original offsets
back instead of being written twice; a gap in the sequence is OutOfOrderSequence; an older epoch is
ProducerFenced.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NO_PRODUCER_ID", "ProducerBatch"]

NO_PRODUCER_ID = -1


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
        return (self.base_sequence + self.record_count - 1) % (1 << 31)
