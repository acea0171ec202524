"""One command line for every workload, one result model and one markdown writer, no module name repeated."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from benchmarks.cli import STANDALONE, SUITE_COMMANDS, app, invoke
from benchmarks.core.markdown import Markdown, render_result
from benchmarks.core.result import Figure, Run, schema
from benchmarks.suite.context import ALL_WORKLOADS
from benchmarks.suite.registry import WORKLOADS

ROOT = Path(__file__).resolve().parents[2]

EVERY_COMMAND = {"engine", "compaction", "retention", "recovery", "spark-compaction", "small-appends", "kafka", "suite",
                 "ingest", "e2e", "catchup", "mixed", "render", "summary"}


def test_help_lists_every_workload() -> None:
    env = {**os.environ, "COLUMNS": "200", "TERM": "dumb"}
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False, env=env)
    assert done.returncode == 0, done.stderr
    listed = set(re.findall(r"^\W*([a-z][a-z0-9-]*)\s{2,}\S", done.stdout, re.M))
    assert listed >= EVERY_COMMAND, EVERY_COMMAND - listed
    assert set(typer.main.get_command(app).commands) == EVERY_COMMAND  # type: ignore[attr-defined]
    # every suite workload is a command: its own (ingest, e2e, catchup, mixed) or a standalone workload's
    assert set(ALL_WORKLOADS) == set(WORKLOADS) <= set(SUITE_COMMANDS) | set(STANDALONE)


def test_every_suite_workload_is_the_top_level_module_of_its_name() -> None:
    for name, (module, _fn) in WORKLOADS.items():
        assert module == f"benchmarks.{name}"


def test_no_module_name_is_repeated_across_the_harness() -> None:
    names = [p.stem for p in (ROOT / "benchmarks").rglob("*.py") if p.stem not in ("__init__", "__main__")]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []


def test_usage_errors_exit_2_without_running(tmp_path: Path) -> None:
    assert invoke(["retention", "--profile", "nope", "--out-dir", str(tmp_path)]) == 2
    assert invoke(["recovery", "--entries", "1", "--partitions", "4", "--out-dir", str(tmp_path)]) == 2
    assert invoke(["no-such-workload"]) == 2
    assert not any(tmp_path.iterdir())


def test_every_document_has_the_envelope_and_the_writer_renders_it() -> None:
    figure = Figure.judge("read", "Sequential read", 60.0, "MB/s", 100.0, "raw ranged GET", at_least=0.5)
    doc = Run.start("example").document(
        slug="file-quick", target={"spec": "file", "kind": "file"}, machine={"cores": 2},
        parameters={"duration_s": 1.0, "work_dir": "/tmp/x"}, body={"raw": {"mb_per_s": 100.0}},
        figures=[figure], problems=["partition 0: 3 records, 4 acked"], notes=["a note"])
    assert list(doc)[:10] == ["schema", "benchmark", "slug", "started_at", "finished_at", "wall_seconds", "target",
                              "machine", "versions", "parameters"]
    assert doc["schema"] == schema("example") and doc["raw"] == {"mb_per_s": 100.0}
    assert doc["passed"] is False and doc["figures"][0]["name"] == "read"
    assert Figure.from_dict({**doc["figures"][0]}) == figure
    legacy = {**doc["figures"][0], "key": "read"}  # engine files before the result model
    del legacy["name"]
    assert Figure.from_dict(legacy) == figure
    body = Markdown().heading("Phases").table(["phase", "s"], [["raw", 1.5]])
    md = render_result(doc, "Example (quick)", body, verified="never shown")
    assert md.startswith("# Example (quick)\n")
    for text in ("| Target | `file` (file) |", "duration_s=1.0", "| Result | all 1 targets met; 1 wrong "
                 "result(s) |", "## Figures", "| Sequential read | 60.0 MB/s | 100 MB/s | raw ranged GET | 0.60 | "
                 "ratio >= 0.5 | PASS |", "## Phases", "## Correctness", "- partition 0: 3 records, 4 acked",
                 "## Notes", "- a note"):
        assert text in md, text
    assert "work_dir" not in md and "never shown" not in md


@pytest.mark.benchmark
def test_a_standalone_workload_writes_a_document_that_render_rewrites_identically(tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = ["retention", "--profile", "lan", "--quick", "--partitions", "2", "--segments", "4", "--out-dir", str(out),
            "--work-dir", str(tmp_path / "work")]
    assert invoke(argv) == 0
    path = out / "retention-lan-quick.json"
    doc = json.loads(path.read_text())
    assert doc["schema"] == schema("retention") and doc["benchmark"] == "retention" and doc["passed"] is True
    assert doc["target"]["latency_profile"] == "lan" and doc["parameters"]["partitions"] == 2
    markdown = path.with_suffix(".md").read_text()
    assert markdown.startswith("# Retention benchmark: lan (quick)") and "## Correctness" in markdown
    assert invoke(["render", str(path)]) == 0
    assert path.with_suffix(".md").read_text() == markdown
    assert json.loads(path.read_text()) == doc
    assert not any((tmp_path / "work").iterdir())
