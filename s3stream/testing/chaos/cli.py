"""``python -m s3stream.chaos SCENARIO ...``: real processes on SeaweedFS, SIGKILLed and audited.

Scenarios: ``kill`` (a writer SIGKILLed and restarted, ``--ack wal|s3|both``), ``server-kill`` (the S3
server SIGKILLed under an ``ack=wal`` and an ``ack=s3`` writer), ``claimers`` (two nodes fencing each other),
``maintenance`` (writer, cleaner and retention processes, any of them SIGKILLed), ``all`` (each of them).
It prints one summary line per scenario and writes every result to ``--out`` as JSON; the exit status is 1
when any audit found a lost, duplicated or changed record (or another broken invariant).
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from s3stream.testing.chaos.harness import Bench
from s3stream.testing.chaos.scenarios import run_claimers, run_kill, run_maintenance, run_server_kill

__all__ = ["main", "run_scenarios"]

SCENARIOS = ("kill", "server-kill", "claimers", "maintenance", "all")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m s3stream.chaos", description=__doc__.split("\n\n")[0])
    p.add_argument("scenario", choices=SCENARIOS)
    p.add_argument("--ack", choices=("wal", "s3", "both"), default="both",
                   help="ack mode of the writers (kill, claimers, maintenance; default both)")
    p.add_argument("--cycles", type=int, default=100, help="SIGKILL/restart cycles of the kill scenario (100)")
    p.add_argument("--server-cycles", type=int, default=5, help="server kills (server-kill; default 5)")
    p.add_argument("--claim-cycles", type=int, default=30, help="rounds of the claimers scenario (30)")
    p.add_argument("--maintenance-cycles", type=int, default=30, help="kills of the maintenance scenario (30)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workdir", type=Path, default=None, help="where the server, WALs and side logs go "
                                                               "(default: a temporary directory, kept)")
    p.add_argument("--out", type=Path, default=None, help="write the results here as JSON")
    return p


def run_scenarios(args: argparse.Namespace, bench: Bench) -> list[dict[str, Any]]:
    """Run what ``args`` asks for on ``bench``, printing one line per scenario."""
    acks = ("wal", "s3") if args.ack == "both" else (args.ack,)
    todo: list[tuple[str, Any]] = []
    want = SCENARIOS[:-1] if args.scenario == "all" else (args.scenario,)
    for name in want:
        if name == "kill":
            todo += [(f"kill-{a}", lambda a=a: run_kill(bench, ack=a, cycles=args.cycles, seed=args.seed))
                     for a in acks]
        elif name == "server-kill":
            todo.append(("server-kill", lambda: run_server_kill(bench, cycles=args.server_cycles, seed=args.seed)))
        elif name == "claimers":
            todo += [(f"claimers-{a}", lambda a=a: run_claimers(bench, ack=a, cycles=args.claim_cycles,
                                                                seed=args.seed)) for a in acks]
        else:
            todo += [(f"maintenance-{a}", lambda a=a: run_maintenance(bench, ack=a, cycles=args.maintenance_cycles,
                                                                      seed=args.seed)) for a in acks]
    results: list[dict[str, Any]] = []
    for _name, fn in todo:
        res = fn()
        results.append(res)
        final = res["final_audit"]
        print(f"{res['scenario']}: {'ok' if res['ok'] else 'FAILED'} - kills {sum(res['kills'].values())} "
              f"{res['kills']}, acknowledged {final['acked_records']} records in {final['acked_appends']} appends, "
              f"checked {final['checked_records']}, lost {final['lost']}, duplicated {final['duplicated']}, "
              f"changed {final['changed']}, {res['audits']} audits, {res['seconds']} s", flush=True)
        for problem in final["problems"] + res["checkpoint_audits"]["problems"]:
            print(f"  {problem}", flush=True)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="s3stream-chaos-"))
    started = time.perf_counter()
    bench = Bench(workdir, args.seed)
    try:
        bench.start()
        results = run_scenarios(args, bench)
    finally:
        bench.close()
    elapsed = time.perf_counter() - started
    ok = all(r["ok"] for r in results)
    print(f"{len(results)} scenarios: {'all ok' if ok else 'FAILURES'} in {elapsed:.1f} s (work dir {workdir})")
    if args.out is not None:
        doc = {"command": "python -m s3stream.chaos " + shlex.join(sys.argv[1:] if argv is None else argv),
               "ok": ok, "seconds": round(elapsed, 1), "seed": args.seed, "python": platform.python_version(),
               "results": results}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return 0 if ok else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
