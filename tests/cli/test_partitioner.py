"""Kafka's default partitioner: murmur2 pinned to Kafka's own test vectors (``UtilsTest.testMurmur2``)."""

from __future__ import annotations

import pytest

from s3stream.policy.partitioner import Partitioner, murmur2, partition_for_key, to_positive

# org.apache.kafka.common.utils.UtilsTest#testMurmur2
KAFKA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("key", "expected"), KAFKA_VECTORS)
def test_murmur2_matches_kafka(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


@pytest.mark.parametrize(("key", "expected"), KAFKA_VECTORS)
def test_partition_for_key_is_to_positive_mod_n(key: bytes, expected: int) -> None:
    for n in (1, 2, 3, 7, 12, 100):
        assert partition_for_key(key, n) == (expected & 0x7FFFFFFF) % n


def test_partition_for_key_vectors() -> None:
    # toPositive(-973932308) = 1173551340 -> % 3 = 0, % 7 = 3, % 10 = 0
    assert to_positive(-973932308) == 1173551340
    assert [partition_for_key(b"21", n) for n in (3, 7, 10)] == [0, 3, 0]
    # toPositive(479470107) = 479470107 -> % 4 = 3
    assert partition_for_key(b"abc", 4) == 3


def test_to_positive_is_not_abs() -> None:
    assert to_positive(-(2**31)) == 0
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(5) == 5


def test_murmur2_covers_every_tail_length_and_stays_in_int32() -> None:
    for n in range(40):
        h = murmur2(bytes(range(n)))
        assert -(2**31) <= h < 2**31
    assert murmur2(b"abcd") != murmur2(b"abce")


def test_partitioner_keyed_and_round_robin() -> None:
    choose = Partitioner(3)
    assert [choose(None) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert choose(b"21") == partition_for_key(b"21", 3)
    assert choose(None) == 1  # keyed records do not advance the round-robin
    with pytest.raises(ValueError):
        Partitioner(0)
    with pytest.raises(ValueError):
        partition_for_key(b"x", 0)
