"""LatencyObjectStore: seeded, profile-shaped delays slept on the injected clock."""

from __future__ import annotations

import pytest

from s3stream.base.errors import InvalidRequest
from s3stream.base.ids import IdSource
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.testing import LATENCY_PROFILES, LatencyDist, LatencyObjectStore

from .support import SleepLog


def test_profiles_exist_with_ordered_percentiles() -> None:
    assert {"s3-standard", "s3-express", "lan"} <= set(LATENCY_PROFILES)
    std, express, lan = (LATENCY_PROFILES[n] for n in ("s3-standard", "s3-express", "lan"))
    assert 20 <= std.get.p50_ms <= 30 and 100 <= std.put.p99_ms <= 400
    assert express.get.p99_ms < 20 and lan.get.p50_ms <= 2
    assert express.put.p50_ms < std.put.p50_ms


def test_lognormal_quantiles_match_p50_and_p99() -> None:
    dist = LatencyDist(25, 150)
    assert dist.quantile_ms(0.5) == pytest.approx(25)
    assert dist.quantile_ms(0.99) == pytest.approx(150)
    ids = IdSource(3)
    samples = sorted(dist.sample_ms(ids) for _ in range(20_000))
    assert samples[10_000] == pytest.approx(25, rel=0.05)
    assert samples[19_800] == pytest.approx(150, rel=0.15)


def test_delays_are_seeded_and_slept_on_the_clock() -> None:
    def run(seed: int) -> list[float]:
        clock = SleepLog()
        store = LatencyObjectStore(MemoryObjectStore(), "s3-standard", clock=clock, ids=IdSource(seed))
        store.put("k", b"x" * 1000)
        store.get("k")
        store.head("k")
        list(store.list(""))
        store.delete("k")
        return clock.sleeps

    a, b = run(5), run(5)
    assert a == b and len(a) == 5
    assert a != run(6)
    assert all(0 < s < 5 for s in a)


def test_transfer_time_grows_with_size_and_time_scale_shrinks_delays() -> None:
    clock = SleepLog()
    store = LatencyObjectStore(MemoryObjectStore(), LATENCY_PROFILES["lan"], clock=clock, ids=IdSource(1))
    store.put("big", b"x" * 50_000_000)  # 50 MB at 500 MB/s: at least 0.1 s
    assert clock.sleeps[-1] >= 0.1
    scaled = LatencyObjectStore(MemoryObjectStore(), "lan", clock=clock, ids=IdSource(1), time_scale=0.01)
    scaled.put("big", b"x" * 50_000_000)
    assert clock.sleeps[-1] == pytest.approx(clock.sleeps[-2] * 0.01)


def test_list_pays_one_latency_per_page() -> None:
    inner = MemoryObjectStore()
    for i in range(2500):
        inner.put(f"k/{i:05d}", b"")
    clock = SleepLog()
    store = LatencyObjectStore(inner, "s3-express", clock=clock, ids=IdSource(0))
    assert len(list(store.list("k/"))) == 2500
    assert len(clock.sleeps) == 3


def test_unknown_profile_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="s3-standard"):
        LatencyObjectStore(MemoryObjectStore(), "s3-glacier")
