"""A few hundred simulation seeds (marker ``sim``), and longer runs on demand (``slow``).

``test_ci_seeds`` is what CI runs: ``CI_SEEDS`` seeds of ``CI_STEPS`` actions each (about half a minute), and it
also checks that those seeds exercised what the simulator is for: every object-store fault kind, every disk fault
(a full disk, a failed fsync, a read-only disk, a flipped byte in the middle of a WAL that an open refused),
power losses, crashes at nearly every crash point, takeovers, idempotent producers' deduplicated retries, Arrow
appends, added partitions and recreated topics. A failure lists each failing seed with its one-line
reproduction.

``test_many_seeds`` runs ``S3STREAM_SIM_SEEDS`` seeds (from ``S3STREAM_SIM_START``, ``S3STREAM_SIM_STEPS``
actions each; ``S3STREAM_SIM_JOBS`` worker processes) and is skipped unless that variable is set (a long
recorded run uses it, or ``python -m s3stream.sim --seeds N --jobs J``).
"""

from __future__ import annotations

import os

import pytest

from s3stream.testing.sim import CRASH_POINTS, SimOptions, SimResult
from s3stream.testing.sim.cli import run_seeds

pytestmark = pytest.mark.sim

CI_SEEDS = 250
CI_STEPS = 40
CI_START = 10_000  # apart from the default suite's seeds


def _report(results: list[SimResult]) -> str:
    failed = [r for r in results if not r.ok]
    lines = [f"{len(failed)} of {len(results)} seeds failed:"]
    for r in failed[:20]:
        lines.append(f"  seed {r.seed}: {(r.failure or '').splitlines()[0]}\n    reproduce: {r.repro}")
    return "\n".join(lines)


def _totals(results: list[SimResult]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for r in results:
        for key, n in r.stats.items():
            totals[key] = totals.get(key, 0) + n
    return totals


@pytest.mark.timeout(900)
def test_ci_seeds() -> None:
    results = list(run_seeds(range(CI_START, CI_START + CI_SEEDS), SimOptions(steps=CI_STEPS)))
    assert all(r.ok for r in results), _report(results)
    totals = _totals(results)
    for kind in ("error", "throttle", "timeout_before", "lost_response", "precondition", "conflict409"):
        assert totals.get(f"fault:{kind}", 0) > 0, f"no {kind} fault injected: {totals}"
    for what in ("disk:full", "disk:fsync", "disk:read_only", "disk:flip", "wal_damage_refused", "power_losses",
                 "kills", "claims", "outages", "acked_records", "producer_dedupes", "topics_recreated",
                 "action:append arrow", "action:produce retry", "action:producer epoch", "action:add partitions"):
        assert totals.get(what, 0) > 0, f"nothing of {what}: {totals}"
    fired = {p for p in CRASH_POINTS if totals.get(f"crash_point:{p}", 0)}
    assert len(fired) >= len(CRASH_POINTS) - 2, f"crashes at only {sorted(fired)}"


@pytest.mark.slow
@pytest.mark.skipif("S3STREAM_SIM_SEEDS" not in os.environ, reason="set S3STREAM_SIM_SEEDS to run a long simulation")
@pytest.mark.timeout(0)
def test_many_seeds() -> None:
    start = int(os.environ.get("S3STREAM_SIM_START", "0"))
    count = int(os.environ["S3STREAM_SIM_SEEDS"])
    options = SimOptions(steps=int(os.environ.get("S3STREAM_SIM_STEPS", str(SimOptions().steps))))
    results = list(run_seeds(range(start, start + count), options,
                             jobs=int(os.environ.get("S3STREAM_SIM_JOBS", "1"))))
    assert all(r.ok for r in results), _report(results)
