"""docs/RELIABILITY.md quotes the recorded runs; they are full-sized and hide no failure.

The figures section is generated from the JSON the runs wrote (``docs/reliability/sim-run.json`` from
``python -m s3stream.sim ... --out``, ``docs/reliability/chaos-run.json`` from ``python -m s3stream.chaos all
... --out``), never typed by hand: regenerate it with ``python -m tests.test_reliability_doc`` after a new
recorded run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.sim.test_sim import REGRESSIONS

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "RELIABILITY.md"
SIM_RUN = ROOT / "docs" / "reliability" / "sim-run.json"
CHAOS_RUN = ROOT / "docs" / "reliability" / "chaos-run.json"
_BLOCK = re.compile(r"(<!-- BEGIN GENERATED: figures -->\n)(.*?)(<!-- END GENERATED: figures -->)", re.S)
#: issue 27's acceptance: seeds, and SIGKILL/restart cycles of writers per ack mode
MIN_SEEDS = 10_000
MIN_KILL_CYCLES = 100
_AUDIT_BAD = ("lost", "duplicated", "changed", "reused_offsets", "acked_after_fenced", "log_end_back")


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _n(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def _kinds(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {_n(n)}" for name, n in sorted(counts.items())) or "none"


def render_sim(run: dict[str, Any]) -> str:
    commit = run["git_commit"][:10] + (" (with uncommitted changes)" if run["git_dirty"] else "")
    rows = [
        "**Deterministic simulation**",
        "",
        "| | |",
        "|---|---|",
        f"| Command | `{run['command']}` |",
        f"| Seeds | {_n(run['seeds'])} ({run['first_seed']}..{run['last_seed']}), {run['steps']} actions each |",
        f"| Passed / failed | {_n(run['passed'])} / {_n(run['failed'])} |",
        f"| Actions run | {_n(sum(run['actions'].values()))} ({_kinds(run['actions'])}) |",
        f"| Object-store faults injected | {_kinds(run['object_store_faults'])} |",
        f"| Disk faults injected | {_kinds(run['disk_faults'])} |",
        f"| Crash points fired | {_kinds(run['crash_points_fired'])} |",
        f"| Acknowledged records / record checks by the auditor | {_n(run['acked_records'])} / "
        f"{_n(run['acked_records_checked'])} |",
        f"| Wall time | {_n(run['wall_time_s'])} s on {run['jobs']} worker processes, commit {commit} |",
    ]
    if run["failures"]:
        rows += ["", "Failing seeds of this run (each is either fixed since, and kept in `tests/sim/test_sim.py`'s "
                 "`REGRESSIONS`, or listed as open under *What the runs found*):", ""]
        rows += [f"- seed {f['seed']}: {f['failure']} (`{f['reproduce']}`)" for f in run["failures"]]
    return "\n".join(rows) + "\n"


def render_chaos(run: dict[str, Any]) -> str:
    rows = [
        "**Real processes on SeaweedFS**",
        "",
        f"Command: `{run['command']}` (seed {run['seed']}, {_n(run['seconds'])} s).",
        "",
        "| Scenario | Ack | Cycles | Kills | Acknowledged records | Checked | Removed by retention or compaction "
        "| Replaced by design (`ack=wal` takeover) | Lost | Duplicated | Changed |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in run["results"]:
        a = r["final_audit"]
        kills = sum(r["kills"].values())
        rows.append(f"| {r['scenario']} | {r.get('ack') or 'both'} | {_n(r['cycles'])} | {_n(kills)} "
                    f"| {_n(a['acked_records'])} | {_n(a['checked_records'])} | {_n(a['removed_legitimately'])} "
                    f"| {_n(a['replaced_by_design'])} | {_n(a['lost'])} | {_n(a['duplicated'])} | {_n(a['changed'])} |")
    return "\n".join(rows) + "\n"


def render() -> str:
    return render_sim(_load(SIM_RUN)) + "\n" + render_chaos(_load(CHAOS_RUN))


def test_the_recorded_simulation_is_full_sized_and_hides_no_failure() -> None:
    """At least 10,000 seeds; every seed that failed is fixed since (a regression seed) or named as open."""
    run = _load(SIM_RUN)
    assert run["seeds"] >= MIN_SEEDS and run["passed"] + run["failed"] == run["seeds"] == len(
        range(run["first_seed"], run["last_seed"] + 1))
    assert run["acked_records"] > 0 and run["acked_records_checked"] >= run["acked_records"]
    assert len(run["failures"]) == run["failed"]
    fixed = {seed for seed, _steps in REGRESSIONS}
    doc = DOC.read_text()
    for failure in run["failures"]:
        seed = failure["seed"]
        assert seed in fixed or f"seed {seed} (open)" in doc, f"seed {seed} failed: fix it or list it as open"


def test_the_recorded_sigkill_runs_meet_the_acceptance() -> None:
    run = _load(CHAOS_RUN)
    assert run["ok"]
    kills = {r["ack"]: r["cycles"] for r in run["results"] if r["scenario"].startswith("kill-")}
    assert kills.keys() == {"wal", "s3"} and min(kills.values()) >= MIN_KILL_CYCLES, kills
    for r in run["results"]:
        assert r["ok"] and r["final_audit"]["acked_records"] > 0, r["scenario"]
        for audit in (r["final_audit"], r["checkpoint_audits"]):
            assert all(audit[k] == 0 for k in _AUDIT_BAD), (r["scenario"], audit)


def test_the_figures_section_is_current() -> None:
    found = _BLOCK.search(DOC.read_text())
    assert found is not None, "docs/RELIABILITY.md lacks the GENERATED: figures markers"
    assert found.group(2) == render(), \
        "docs/RELIABILITY.md's figures are stale: run python -m tests.test_reliability_doc"


def main() -> None:
    text = DOC.read_text()
    found = _BLOCK.search(text)
    assert found is not None
    DOC.write_text(text[:found.start(2)] + render() + text[found.end(2):])


if __name__ == "__main__":
    main()
