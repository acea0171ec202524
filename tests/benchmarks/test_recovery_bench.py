"""The recovery benchmark at tiny sizes: the suite workload and the standalone command, shape and sanity only.

No timing is asserted; the request counts are, loosely: they are the point of the benchmark (issue 24), and
a regression to a request per entry would show at any size.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.recovery import run_recovery
from tests.benchmarks.test_suite_workloads_maint import check_figures, suite_context

pytestmark = pytest.mark.benchmark

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ("clean_close", "crash", "crash_no_trim_point")


def test_recovery_workload_on_file(tmp_path: Path) -> None:
    with suite_context(tmp_path) as ctx:
        ctx.params = replace(ctx.params, recovery_entries=400)
        result = run_recovery(ctx)
    check_figures(result, "recovery", {f"{s}_{f}" for s in SCENARIOS for f in (
        "open_s", "open_requests", "requests_per_partition", "entries_read", "second_open_requests")})
    f = result.figures
    assert f["clean_close_entries_read"] == 0 and f["clean_close_open_requests"] <= 4
    assert 0 < f["crash_entries_read"] < f["crash_no_trim_point_entries_read"] == 440
    for s in SCENARIOS:
        assert f[f"{s}_open_requests"] < 100 and f[f"{s}_second_open_requests"] <= 4, s
    assert result.baseline["crash_open_requests"] == result.baseline["crash_no_trim_point_open_requests"] == 440


def test_standalone_command_writes_results(tmp_path: Path) -> None:
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "benchmarks", "recovery", "--target", "file", "--entries", "200", "--partitions", "2",
           "--out-dir", str(out), "--work-dir", str(tmp_path)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    result = json.loads((out / "recovery-file.json").read_text())
    assert set(result["scenarios"]) == set(SCENARIOS)
    for s in result["scenarios"].values():
        assert not s["problems"] and s["open"]["requests"]["total"] == sum(s["open"]["requests"]["by_kind"].values())
    assert "| crash (SIGKILL) |" in (out / "recovery-file.md").read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # the scratch directory is gone
