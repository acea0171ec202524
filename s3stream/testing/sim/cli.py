"""``python -m s3stream.sim --seeds N [--start S] [--steps K]``: run simulation seeds, report failures.

Each seed runs in this process, one after the other (``--jobs J`` spreads them over J worker processes). A
failing seed prints its finding and the one-line command that runs it again (with ``--trace``, which prints the
run's trace: every action, its outcome and the audit's view of each partition). The exit status is 1 when any
seed failed, 0 otherwise. ``--out FILE`` writes the run's summary as JSON (:func:`summary`): what ran, what
was injected and which crash points fired, how many acknowledged records the audits checked, the failures
with their reproductions, the wall time, and the git commit of the code (and whether its tree was dirty).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from s3stream.testing.sim.runner import SimOptions, SimResult, run_seed

__all__ = ["main", "run_seeds", "summary"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m s3stream.sim", description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=100, help="how many seeds to run (default 100)")
    p.add_argument("--start", type=int, default=0, help="the first seed (default 0)")
    steps = SimOptions().steps
    p.add_argument("--steps", type=int, default=steps, help=f"actions per seed (default {steps})")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (default 1: this one)")
    p.add_argument("--trace", action="store_true", help="print each seed's trace")
    p.add_argument("--no-object-faults", action="store_true", help="inject no object-store faults")
    p.add_argument("--no-disk-faults", action="store_true", help="inject no disk faults (and no power loss)")
    p.add_argument("--no-crashes", action="store_true", help="no kills and no crash points")
    p.add_argument("--no-fencing", action="store_true", help="no second writer process")
    p.add_argument("--out", type=Path, help="write the run's summary as JSON to this file")
    return p


def _options(args: argparse.Namespace) -> SimOptions:
    return SimOptions(steps=args.steps, object_faults=not args.no_object_faults, disk_faults=not args.no_disk_faults,
                      crashes=not args.no_crashes, fencing=not args.no_fencing)


def run_seeds(seeds: Sequence[int], options: SimOptions, *, jobs: int = 1) -> Iterator[SimResult]:
    """The result of each seed, in order (run in ``jobs`` worker processes when more than one)."""
    if jobs <= 1:
        for seed in seeds:
            yield run_seed(seed, options)
        return
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        yield from pool.map(run_seed, seeds, [options] * len(seeds), chunksize=max(1, len(seeds) // (jobs * 8)))


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    options = _options(args)
    seeds = range(args.start, args.start + args.seeds)
    started = time.perf_counter()
    failed: list[SimResult] = []
    totals: dict[str, int] = {}
    for result in run_seeds(seeds, options, jobs=args.jobs):
        for key, n in result.stats.items():
            totals[key] = totals.get(key, 0) + n
        if args.trace:
            print("\n".join(result.trace))
        if not result.ok:
            failed.append(result)
            print(f"seed {result.seed} FAILED: {result.failure}", flush=True)
            print(f"  reproduce: {result.repro}", flush=True)
        elif args.trace:
            print(f"seed {result.seed} ok (trace {result.trace_hash})", flush=True)
    elapsed = time.perf_counter() - started
    print(f"{len(seeds)} seeds ({args.start}..{args.start + len(seeds) - 1}, {args.steps} steps each): "
          f"{len(seeds) - len(failed)} passed, {len(failed)} failed in {elapsed:.1f} s", flush=True)
    if args.out is not None:
        out = summary(seeds, options, totals, failed, elapsed_s=elapsed, jobs=args.jobs,
                      argv=list(sys.argv[1:] if argv is None else argv))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=2) + "\n")
    return 1 if failed else 0


def summary(seeds: range, options: SimOptions, totals: dict[str, int], failed: list[SimResult], *,
            elapsed_s: float, jobs: int, argv: list[str]) -> dict[str, Any]:
    """The JSON summary of a run: the seeds' stats summed, grouped by kind (see the module docstring)."""
    def group(prefix: str) -> dict[str, int]:
        return {k.removeprefix(prefix): n for k, n in sorted(totals.items()) if k.startswith(prefix)}

    grouped = ("action:", "fault:", "disk:", "crash_point:")
    return {
        "command": "python -m s3stream.sim " + " ".join(argv),
        "seeds": len(seeds), "first_seed": seeds.start, "last_seed": seeds.stop - 1, "steps": options.steps,
        "options": {"object_faults": options.object_faults, "disk_faults": options.disk_faults,
                    "crashes": options.crashes, "fencing": options.fencing},
        "jobs": jobs, "passed": len(seeds) - len(failed), "failed": len(failed),
        "failures": [{"seed": r.seed, "failure": (r.failure or "").splitlines()[0], "reproduce": r.repro}
                     for r in failed],
        "actions": group("action:"), "object_store_faults": group("fault:"), "disk_faults": group("disk:"),
        "crash_points_fired": group("crash_point:"),
        "acked_records": totals.get("acked_records", 0),
        "acked_records_checked": totals.get("acked_records_checked", 0),
        "counters": {k: n for k, n in sorted(totals.items()) if not k.startswith(grouped)},
        "wall_time_s": round(elapsed_s, 1),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
    }


def _git(*args: str) -> str:
    """The output of a git command in this package's checkout ("" when git or the checkout is missing)."""
    root = Path(__file__).resolve().parents[3]
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
