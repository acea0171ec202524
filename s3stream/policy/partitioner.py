"""Kafka's default partitioner: where a producer puts a record when no partition is given.

* A keyed record goes to ``toPositive(murmur2(key)) % partitions``, exactly as Kafka's
  ``BuiltInPartitioner.partitionForKey`` (``Utils.murmur2`` with seed ``0x9747b28c``;
  ``toPositive(n) = n & 0x7fffffff``), so a key lands on the same partition number as it would with a
  Kafka client producing to a topic with the same partition count.
* An unkeyed record goes round-robin over the partitions (the console producer's classic behaviour;
  Kafka's newer "sticky" batching is a throughput optimisation, not a placement contract).

Invariant: :func:`murmur2` returns Java's signed 32-bit ``int`` result (tests pin Kafka's own vectors).
"""

from __future__ import annotations

import struct

__all__ = ["Partitioner", "murmur2", "partition_for_key", "to_positive"]

_MASK = 0xFFFFFFFF
_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_WORDS = struct.Struct("<I")


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2(data)``: the 32-bit MurmurHash2 of ``data`` as a signed Java int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    tail = length & ~3
    for (k,) in _WORDS.iter_unpack(memoryview(data)[:tail]):
        k = (k * _M) & _MASK
        k ^= k >> _R
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``, which overflows on MIN_VALUE)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for ``key`` among ``partitions``."""
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    return to_positive(murmur2(key)) % partitions


class Partitioner:
    """Picks partitions for a stream of records: keyed by murmur2, unkeyed round-robin from 0."""

    def __init__(self, partitions: int) -> None:
        if partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {partitions}")
        self.partitions = partitions
        self._next = 0

    def __call__(self, key: bytes | None) -> int:
        if key is not None:
            return partition_for_key(key, self.partitions)
        chosen = self._next
        self._next = (chosen + 1) % self.partitions
        return chosen
