"""What a seed decides before the first action: the simulation's random choices, store settings and topics.

Small values on purpose (segments of a few hundred bytes, WAL files of 2 KiB, flushes of a few KiB, grace
periods of seconds), so that a run of a hundred actions rolls, seals, uploads, compacts, retains and collects
many times; each seed draws its own combination, latency profile included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from s3stream.base.ids import IdSource

__all__ = ["ALTERS", "SimRandom", "SimTopic", "store_settings", "topics"]

T = TypeVar("T")


class SimRandom:
    """The simulation's own choices, from a seeded :class:`IdSource` (the injected randomness)."""

    def __init__(self, seed: int) -> None:
        self._ids = IdSource(seed)

    def random(self) -> float:
        return self._ids.random()

    def randrange(self, stop: int) -> int:
        return self._ids.randrange(stop)

    def randint(self, low: int, high: int) -> int:
        return low + self._ids.randrange(high - low + 1)

    def choice(self, items: Sequence[T]) -> T:
        return items[self._ids.randrange(len(items))]

    def sample(self, items: Sequence[T], k: int) -> list[T]:
        pool = list(items)
        return [pool.pop(self._ids.randrange(len(pool))) for _ in range(k)]


@dataclass(frozen=True, slots=True)
class SimTopic:
    name: str
    partitions: int
    config: dict[str, str]

    @property
    def compact(self) -> bool:
        return "compact" in self.config["cleanup.policy"]

    @property
    def delete(self) -> bool:
        return "delete" in self.config["cleanup.policy"]


def store_settings(rng: SimRandom) -> dict[str, Any]:
    flush_interval = rng.choice([20, 100, 400])
    return {
        "background": "manual", "probe": False, "ack": rng.choice(["wal", "wal", "s3"]),
        "flush_interval_ms": flush_interval, "flush_bytes": rng.choice([600, 4096, 1 << 20]),
        "buffer_bytes": rng.choice([6000, 64 << 10, 1 << 20]), "max_block_ms": rng.choice([800, 3000]),
        "upload_concurrency": rng.choice([1, 2, 3]), "upload_retry_backoff_ms": 20,
        "upload_retry_backoff_max_ms": rng.choice([100, 400]), "seal_concurrency": rng.choice([1, 2]),
        "cache_bytes": rng.choice([0, 20_000, 8 << 20]), "read_ahead_bytes": rng.choice([0, 64 << 10]),
        "orphan_min_age_ms": rng.choice([2000, 20_000]), "manifest_min_age_ms": rng.choice([1000, 20_000]),
        "commit_timeout_ms": 5000, "wal_file_bytes": rng.choice([2048, 64 << 10]),
        "segment_row_group_bytes": rng.choice([200, 1 << 20]),
    }


def topics(rng: SimRandom) -> list[SimTopic]:
    def common() -> dict[str, str]:
        return {"segment.bytes": str(rng.choice([300, 1500, 20_000])),
                "segment.ms": str(rng.choice([500, 5000, 60_000])),
                "file.delete.delay.ms": str(rng.choice([0, 2000, 30_000]))}

    return [
        SimTopic("d", 2, {**common(), "cleanup.policy": "delete",
                        "retention.ms": str(rng.choice([3000, 30_000, -1]))}),
        SimTopic("c", 1, {**common(), "cleanup.policy": "compact",
                        "min.cleanable.dirty.ratio": str(rng.choice([0.01, 0.3])),
                        "delete.retention.ms": str(rng.choice([0, 5000]))}),
        SimTopic("cd", 1, {**common(), "cleanup.policy": "compact,delete",
                         "retention.ms": str(rng.choice([5000, 60_000])),
                         "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "1000"}),
    ]


#: Config changes the simulation makes (key -> choices).
ALTERS: dict[str, tuple[str, ...]] = {
    "segment.bytes": ("200", "2000", "50000"), "segment.ms": ("300", "4000", "100000"),
    "retention.ms": ("2000", "20000", "-1"), "file.delete.delay.ms": ("0", "1000", "20000"),
    "min.cleanable.dirty.ratio": ("0.01", "0.5"), "delete.retention.ms": ("0", "3000"),
}
