"""The deterministic simulator (s3stream.testing.sim): determinism, reproductions, and seeds that found bugs.

The default suite runs a handful of seeds and every seed that once found a bug (each stays as a regression
test, with the steps it needed); ``test_sim_ci.py`` runs a few hundred (marker ``sim``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import s3stream
from s3stream.partition.log import PartitionLog
from s3stream.sim import main
from s3stream.testing.sim import CRASH_POINTS, SimOptions, run_seed

ROOT = Path(s3stream.__file__).resolve().parent.parent

#: Seeds that found bugs, with the steps they ran (fixed since; the message says what each found). Bugs the
#: simulator found before its choices took their present form are pinned by targeted tests instead:
#: tests/engine/test_takeover_back.py and tests/wal/test_wal_steps.py (each names its seed).
REGRESSIONS = {
    (10057, 40): "an upload landing above the fence of its epoch: the reopen refused (CorruptData), GC made it "
                 "readable again (tests/engine/test_takeover_back.py)",
    (30021, 150): "a WAL-namespace scan probed across an object GC had deleted and missed later ones: a takeover "
                  "lost ack=s3 records (tests/engine/test_walscan_cache.py)",
    (30104, 150): "a fence PUT that met a spurious 412 fenced one seq higher, leaving the free one to the fenced "
                  "node: a takeover lost an ack=s3 record (tests/engine/test_walscan_cache.py)",
    (30119, 150): "a namespace listing from a later seq was taken for knowledge from an earlier one: a reader "
                  "missed objects and an ack=s3 record (tests/engine/test_walscan_cache.py)",
    (40083, 300): "a reader trusted its cached manifest longer than GC kept the next version: it read a deleted "
                  "segment (tests/engine/test_stale_views.py)",
    (118, 60): "background=manual: a blocking producer retry whose original awaits the other ack path (the WAL's "
               "fsync, or a WAL object) waited forever (tests/engine/test_producer_duplicates_ack.py)",
    (123, 60): "the same as seed 118, another path (tests/engine/test_producer_duplicates_ack.py)",
    (1176, 60): "the simulator's own model: a producer retry that wrote records a takeover had let go was taken "
                "for a record moving (found by the first 10,000-seed run)",
    (7908, 50): "a producer retry deduplicated to an original whose WAL entry had failed (disk full) was "
                "acknowledged at offsets never written: a crash lost it (found by the 10,000-seed run)",
    (2837, 50): "the simulator's own model: a crash point that fired inside a close's upload was taken for a clean "
                "close, so the records only the local WAL held were looked for in the bucket",
    (9606, 50): "a fenced writer sealed offsets the new writer had sealed and the cleaner compacted: CorruptData "
                "instead of Fenced (tests/engine/test_fenced_seal.py)",
}


def test_the_same_seed_gives_the_same_trace() -> None:
    first = run_seed(7, SimOptions(steps=60))
    second = run_seed(7, SimOptions(steps=60))
    assert first.ok, first.failure
    assert first.trace == second.trace and first.trace_hash == second.trace_hash
    assert run_seed(8, SimOptions(steps=60)).trace_hash != first.trace_hash


def test_the_same_trace_in_another_process_with_another_hash_seed() -> None:
    """Nothing in a run depends on the interpreter (hash randomisation, addresses, the real clock)."""
    here = run_seed(21, SimOptions(steps=50))
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "s3stream.sim", "--seeds", "1", "--start", "21", "--steps", "50",
                          "--trace"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120, check=True)
    assert out.stdout.splitlines()[:len(here.trace)] == here.trace
    assert f"seed 21 ok (trace {here.trace_hash})" in out.stdout


@pytest.mark.parametrize("seed", range(5))
def test_a_few_seeds(seed: int) -> None:
    result = run_seed(seed, SimOptions(steps=60))
    assert result.ok, f"{result.failure}\nreproduce: {result.repro}"


@pytest.mark.sim
@pytest.mark.parametrize(("seed", "steps"), sorted(REGRESSIONS))
def test_seeds_that_found_bugs(seed: int, steps: int) -> None:
    result = run_seed(seed, SimOptions(steps=steps))
    assert result.ok, f"seed {seed} ({REGRESSIONS[seed, steps]}) fails again: {result.failure}\n{result.repro}"


def test_a_failing_seed_prints_a_one_line_reproduction(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """An engine that loses records (here: reads skip every record at offset 2) fails the audit, and the
    command line says how to run that seed again."""
    read_arrow = PartitionLog.read_arrow

    def lossy(self: PartitionLog, offset: int, **kw: int | None):  # type: ignore[no-untyped-def]
        table = read_arrow(self, offset, **kw)
        return table.filter([o != 2 for o in table.column("offset").to_pylist()])

    monkeypatch.setattr(PartitionLog, "read_arrow", lossy)
    assert main(["--seeds", "2", "--start", "0", "--steps", "40", "--no-fencing"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"seed 0 FAILED: .*acknowledged record .* missing at offset 2", out), out
    assert "  reproduce: python -m s3stream.sim --seeds 1 --start 0 --steps 40 --no-fencing --trace" in out
    assert "2 seeds (0..1, 40 steps each): 0 passed, 2 failed" in out


def test_every_crash_point_of_the_engine_is_armed() -> None:
    found: set[str] = set()
    for path in [*(ROOT / "s3stream").rglob("*.py"), *(ROOT / "cleaner").rglob("*.py")]:
        text = path.read_text()
        found.update(re.findall(r'\.hit\("([a-z_.]+)"\)', text))
        found.update(re.findall(r'crash_point="([a-z_.]+)"', text))
    assert found == set(CRASH_POINTS)
