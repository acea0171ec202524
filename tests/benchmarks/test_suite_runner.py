"""The suite's runner, cost model, report and plots (fake workloads), and one real end-to-end run.

Unit tests check arithmetic against hand-computed numbers and output shape; the end-to-end test
(marked ``benchmark``) runs every real workload at tiny sizes on the ``file`` target and checks the
result files' shape. No performance number is asserted anywhere.
"""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from benchmarks.cli import app
from benchmarks.core.result import Series, WorkloadResult
from benchmarks.suite import registry
from benchmarks.suite.context import ALL_WORKLOADS, MiB, SuiteContext, SuiteParams
from benchmarks.suite.costmodel import (
    MB,
    MONTH_S,
    S3_STANDARD,
    GiB,
    monthly_cost,
    parse_price,
    price_table,
    requests_per_gib,
    suite_costs,
    wal_objects_per_gib,
)
from benchmarks.suite.plots import write_plots
from benchmarks.suite.references import PUBLISHED, references
from benchmarks.suite.registry import WorkloadUnavailable, load_workload, parse_workloads
from benchmarks.suite.report import compute_ratios, render_markdown
from benchmarks.suite.runner import SuiteError, WorkloadFailed, run_suite, suite_params, suite_slug

ROOT = Path(__file__).resolve().parents[2]

RAW = {"disk_mb_per_s": 100.0, "fsync_p50_ms": 0.5, "fsync_p99_ms": 1.0, "put_mb_per_s": 200.0,
       "put_p50_ms": 50.0, "put_p99_ms": 100.0, "get_mb_per_s": 400.0}


# ---------------------------------------------------------------- fakes


def _ingest(ctx: SuiteContext | None = None) -> WorkloadResult:
    if ctx is not None:
        with ctx.progress.phase("fake ingest", seconds=0.01):
            assert ctx.raw["put_p50_ms"] > 0 and "details" in ctx.raw
    r = WorkloadResult("ingest")
    for name, value, unit in [("ack_wal_mb_per_s", 50.0, "MB/s"), ("ack_wal_p50_ms", 1.0, "ms"),
                              ("ack_wal_p99_ms", 2.0, "ms"), ("ack_s3_mb_per_s", 20.0, "MB/s"),
                              ("ack_s3_p50_ms", 200.0, "ms"), ("ack_s3_p99_ms", 250.0, "ms"),
                              ("put_per_gib", 100.0, "PUT/GiB")]:
        r.figure(name, value, unit)
    r.baseline = {"naive_mb_per_s": 25.0, "naive_p99_ms": 5.0, "naive_put_per_gib": 1000.0}
    r.latencies_ms = {"ack=wal": [0.5, 1.0, 2.0, 3.0], "ack=s3": [150.0, 200.0, 250.0], "naive": [1.0, 5.0]}
    r.series = [Series("ack=wal", "MB/s", [1.0, 2.0], [49.0, 51.0]), Series("naive", "MB/s", [1.0, 2.0], [25.0, 25.0])]
    r.requests = {"PUT": 100, "GET": 10, "HEAD": 0, "LIST": 2, "DELETE": 0}
    r.payload_bytes = GiB
    r.notes = ["fake ingest"]
    return r


def _e2e(ctx: SuiteContext | None = None) -> WorkloadResult:
    r = WorkloadResult("e2e")
    r.figure("e2e_p50_ms", 300.0, "ms")
    r.figure("e2e_p99_ms", 450.0, "ms")
    r.figure("produce_p99_ms", 250.0, "ms")
    r.latencies_ms = {"e2e": [100.0, 300.0, 450.0], "produce": [200.0, 250.0]}
    r.series = [Series("e2e p99", "ms", [1.0, 2.0], [440.0, 450.0]), Series("produce", "MB/s", [1.0, 2.0], [5.0, 5.0])]
    return r


def _catchup(ctx: SuiteContext | None = None) -> WorkloadResult:
    r = WorkloadResult("catchup")
    r.figure("catchup_mb_per_s", 200.0, "MB/s")
    r.figure("catchup_get_per_gib", 8.0, "GET/GiB")
    r.baseline = {"naive_catchup_mb_per_s": 50.0, "naive_catchup_get_per_gib": 900.0}
    return r


def _workload_dicts() -> dict[str, dict[str, Any]]:
    return {w.name: w.as_dict() for w in (_ingest(), _e2e(), _catchup())}


def _fake_result() -> dict[str, Any]:
    params = SuiteParams(target="file", workloads=("ingest", "e2e", "catchup"))
    workloads = _workload_dicts()
    refs = [r.as_dict() for r in references(params, RAW)]
    return {"slug": "file", "target": {"spec": "file", "kind": "file"}, "machine": {"cores": 2},
            "versions": {"s3stream": "0.1.0", "git_commit": "abc123"}, "parameters": params.as_dict(),
            "raw_limits": {**RAW, "details": {}}, "raw_units": {"disk_mb_per_s": "MB/s"}, "workloads": workloads,
            "ratios": [r.as_dict() for r in compute_ratios(RAW, workloads, refs)], "references": refs,
            "costs": suite_costs(workloads), "images": {"latency-ingest": "file/latency-ingest.png"},
            "notes": ["a note"], "started_at": "2026-11-22T00:00:00+00:00", "wall_seconds": 1.0}


# ---------------------------------------------------------------- cost model


def test_monthly_cost_matches_hand_computed_numbers() -> None:
    rate = 1000 * GiB / MB / MONTH_S   # exactly 1000 GiB per 30-day month
    cost = monthly_cost(mb_per_s=rate, write_per_gib={"put": 100, "get": 10, "head": 5, "list": 2, "delete": 50},
                        read_get_per_gib=20, prices=S3_STANDARD, retention_days=7, consumers=2)
    assert cost.put == pytest.approx(0.5)                         # 1000 GiB x 100 PUT x $0.005/1000
    assert cost.get == pytest.approx(0.02)                        # 1000 x (10 + 2 x 20) x $0.0004/1000
    assert cost.other_requests == pytest.approx(0.012)            # HEAD 0.002 + LIST 0.01 + DELETE 0
    assert cost.storage == pytest.approx(1000 * 7 / 30 * 0.023)   # 233.3 GiB retained x $0.023
    assert cost.total == pytest.approx(0.5 + 0.02 + 0.012 + 1000 * 7 / 30 * 0.023)
    # 10 MB/s for 30 days = 25,920,000,000,000 bytes = 24,139.79 GiB; at 100 PUT/GiB: $12.07
    ten = monthly_cost(mb_per_s=10, write_per_gib={"put": 100}, read_get_per_gib=0, prices=S3_STANDARD)
    assert ten.put == pytest.approx(12.07, rel=1e-3)
    assert ten.storage == pytest.approx(10e6 * 7 * 86400 / GiB * 0.023, rel=1e-9)   # $129.6
    assert ten.storage == pytest.approx(129.58, rel=1e-3)


def test_suite_costs_price_s3stream_and_naive_per_scenario() -> None:
    workloads = _workload_dicts()
    costs = suite_costs(workloads)
    assert costs["prices"] == S3_STANDARD
    assert costs["requests_per_gib"]["s3stream_write"] == {"put": 100.0, "get": 10.0, "head": 0.0, "list": 2.0,
                                                           "delete": 0.0}
    assert costs["requests_per_gib"]["s3stream_read_get"] == 8.0
    assert costs["requests_per_gib"]["naive_write_put"] == 1000.0
    assert costs["requests_per_gib"]["naive_read_get"] == 900.0    # catch-up's naive read GET/GiB
    measured, reference = costs["scenarios"]
    assert (measured["mb_per_s"], reference["mb_per_s"]) == (50.0, 10.0)
    gib = 10 * MB * MONTH_S / GiB
    assert reference["s3stream"]["put"] == pytest.approx(gib * 100 * 0.005 / 1000)
    assert reference["s3stream"]["get"] == pytest.approx(gib * (10 + 8) * 0.0004 / 1000)
    assert reference["naive"]["put"] == pytest.approx(gib * 1000 * 0.005 / 1000)
    assert reference["naive"]["get"] == pytest.approx(gib * 900 * 0.0004 / 1000)
    without_catchup = suite_costs({"ingest": workloads["ingest"]})
    assert without_catchup["requests_per_gib"]["naive_read_get"] == 1000.0   # one GET per object written
    assert without_catchup["requests_per_gib"]["s3stream_read_get"] == 0.0
    assert reference["naive"]["storage"] == reference["s3stream"]["storage"]
    assert reference["naive_over_s3stream_total"] == pytest.approx(reference["naive"]["total"]
                                                                   / reference["s3stream"]["total"])
    doubled = suite_costs(workloads, prices={"put": 0.01})["scenarios"][1]
    assert doubled["s3stream"]["put"] == pytest.approx(2 * reference["s3stream"]["put"])
    assert suite_costs({})["scenarios"] == []


def test_put_per_gib_is_rescaled_to_each_scenarios_rate() -> None:
    # 8 MiB every 250 ms: cut by size (128 per GiB) above 33.6 MB/s, by time (4 per second) below
    assert wal_objects_per_gib(50, 8 * MiB, 250) == 128
    assert wal_objects_per_gib(10, 8 * MiB, 250) == pytest.approx(4 * GiB / 10e6)   # 429.50
    workloads = _workload_dicts()
    workloads["ingest"]["requests"]["PUT"] = 160   # 160 PUT/GiB at 50 MB/s, 128 of them WAL objects
    measured, reference = suite_costs(workloads, flush_bytes=8 * MiB, flush_interval_ms=250)["scenarios"]
    assert measured["s3stream_put_per_gib"] == pytest.approx(160)
    assert reference["s3stream_put_per_gib"] == pytest.approx(461.4967, rel=1e-6)   # 160 - 128 + 429.50
    gib = 10 * MB * MONTH_S / GiB
    assert reference["s3stream"]["put"] == pytest.approx(gib * 461.4967 * 0.005 / 1000, rel=1e-6)
    assert reference["naive"]["put"] == pytest.approx(gib * 1000 * 0.005 / 1000)   # one object per append


def test_prices_parse_and_reject_bad_input() -> None:
    assert parse_price("put=0.01") == ("put", 0.01)
    assert price_table({"storage": 0.0125})["storage"] == 0.0125
    for bad in ("put", "nope=1", "get=abc", "get=-1", "=3"):
        with pytest.raises(ValueError):
            parse_price(bad)
    assert requests_per_gib({"PUT": 10}, GiB // 2) == {"put": 20.0}
    assert requests_per_gib({"PUT": 10}, 0) == {}


# ---------------------------------------------------------------- ratios, references, report, plots


def test_ratios_against_raw_limits_baseline_and_references() -> None:
    workloads = _workload_dicts()
    refs = [r.as_dict() for r in references(SuiteParams(target="file"), RAW)]
    ratios = {r.key: r for r in compute_ratios(RAW, workloads, refs)}
    assert ratios["ingest_vs_raw"].ratio == pytest.approx(50 / 100)               # min(disk 100, PUT 200)
    assert ratios["ack_wal_p99_vs_fsync_p99"].ratio == pytest.approx(2.0)
    assert ratios["ack_s3_p99_vs_put_p99"].ratio == pytest.approx(2.5)
    assert ratios["catchup_vs_raw_get"].ratio == pytest.approx(0.5)
    assert ratios["e2e_e2e_p99_ms_vs_warpstream_e2e_p99"].ratio == pytest.approx(450 / 900)
    assert ratios["e2e_produce_p99_ms_vs_warpstream_produce_p99"].ratio == pytest.approx(250 / 500)
    assert ratios["ingest_ack_s3_p99_ms_vs_model_ack_s3_bound"].against_value == pytest.approx(250 + 50)
    assert ratios["ingest_ack_wal_mb_per_s_vs_naive_mb_per_s"].ratio == pytest.approx(2.0)
    assert ratios["ingest_put_per_gib_vs_naive_put_per_gib"].ratio == pytest.approx(0.1)
    assert ratios["catchup_catchup_mb_per_s_vs_naive_catchup_mb_per_s"].ratio == pytest.approx(4.0)
    assert ratios["ingest_vs_raw"].better == "higher" and ratios["ack_wal_p99_vs_fsync_p99"].better == "lower"
    # missing workloads and figures are skipped, not errors
    assert compute_ratios({}, {}, refs) == []
    assert all(r.source.startswith("https://") for r in PUBLISHED)


def test_markdown_renders_every_section_from_a_result() -> None:
    md = render_markdown(_fake_result())
    for text in ("# s3stream benchmark suite: `file`", "## Raw limits", "## Workload: ingest", "## Workload: e2e",
                 "## Workload: catchup", "## Reference lines", "## Cost model (S3 Standard)", "## Notes",
                 "Naive baseline side by side", "raw fsync p99", "WarpStream: end-to-end latency p99 900 ms",
                 "docs.warpstream.com", "automq.com", "aws.amazon.com/s3/pricing", "![latency-ingest](file/latency-"
                 "ingest.png)", "`abc123`", "| total |"):
        assert text in md, text


def test_plots_write_non_empty_pngs(tmp_path: Path) -> None:
    images = write_plots(_fake_result(), tmp_path / "file", "file")
    assert set(images) == {"latency-ingest", "latency-e2e", "throughput-ingest", "throughput-e2e",
                           "requests-per-gib", "costs"}
    for rel in images.values():
        png = tmp_path / rel
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000


# ---------------------------------------------------------------- registry


def test_registry_parses_names_and_reports_unavailable_workloads(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_workloads("all") == ALL_WORKLOADS == tuple(registry.WORKLOADS)
    assert parse_workloads("mixed, ingest,ingest") == ("ingest", "mixed")
    with pytest.raises(WorkloadUnavailable, match="unknown workload"):
        parse_workloads("ingest,bogus")
    with pytest.raises(WorkloadUnavailable, match="unknown workload"):
        load_workload("bogus")
    monkeypatch.setitem(registry.WORKLOADS, "e2e", ("benchmarks.suite.no_such_module", "run_e2e"))
    with pytest.raises(WorkloadUnavailable, match=r"cannot import benchmarks\.suite\.no_such_module"):
        load_workload("e2e")
    monkeypatch.setitem(registry.WORKLOADS, "e2e", ("benchmarks.suite.context", "run_e2e"))
    with pytest.raises(WorkloadUnavailable, match="has no function run_e2e"):
        load_workload("e2e")


def test_cli_rejects_unknown_workload_and_bad_price() -> None:
    runner = CliRunner()
    bad = runner.invoke(app, ["suite", "--target", "file", "--workloads", "ingest,bogus"])
    assert bad.exit_code == 2 and "unknown workload" in bad.output
    bad = runner.invoke(app, ["suite", "--target", "file", "--price", "put=cheap"])
    assert bad.exit_code == 2


# ---------------------------------------------------------------- runner (fake workloads, file target)


def _params(tmp_path: Path, **overrides: Any) -> SuiteParams:
    return suite_params("file", quick=True, raw_seconds=0.05, progress=False, out_dir=tmp_path / "out",
                        work_dir=tmp_path / "work", **overrides)


def test_run_suite_with_fake_workloads_writes_json_markdown_and_pngs(tmp_path: Path) -> None:
    params = _params(tmp_path, workloads=("ingest", "e2e", "catchup"), prices={"put": 0.01})
    console = io.StringIO()
    result = run_suite(params, Console(file=console, width=200),
                       workloads={"ingest": _ingest, "e2e": _e2e, "catchup": _catchup})
    assert suite_slug(params) == "file-ingest-e2e-catchup-quick"   # a partial run: never a full run's file
    assert suite_slug(_params(tmp_path)) == "file-quick"
    saved = json.loads((tmp_path / "out" / "file-ingest-e2e-catchup-quick.json").read_text())
    assert saved == json.loads(json.dumps(result, default=str))
    assert list(saved["workloads"]) == ["ingest", "e2e", "catchup"]
    assert saved["raw_limits"]["put_p99_ms"] > 0 and "put" in saved["raw_limits"]["details"]
    assert saved["costs"]["prices"]["put"] == 0.01
    assert {"ingest_vs_raw", "ack_wal_p99_vs_fsync_p99"} <= {r["key"] for r in saved["ratios"]}
    for rel in saved["images"].values():
        assert (tmp_path / "out" / rel).stat().st_size > 0
    md = (tmp_path / "out" / "file-ingest-e2e-catchup-quick.md").read_text()
    assert "## Workload: catchup" in md
    assert "ingest" in console.getvalue() and "raw limits" in console.getvalue()
    assert not any((tmp_path / "work").iterdir()), "the scratch directory must be removed"


def test_run_suite_rejects_non_finite_figures_and_names_a_failing_workload(tmp_path: Path) -> None:
    def nan_workload(ctx: SuiteContext) -> WorkloadResult:
        r = _ingest()
        r.figures["ack_wal_p99_ms"] = math.nan   # bypasses WorkloadResult.figure's own check
        return r

    def broken(ctx: SuiteContext) -> WorkloadResult:
        raise RuntimeError("disk on fire")

    quiet = Console(file=io.StringIO())
    with pytest.raises(SuiteError, match="ack_wal_p99_ms is not a finite number"):
        run_suite(_params(tmp_path, workloads=("ingest",)), quiet, workloads={"ingest": nan_workload})
    with pytest.raises(WorkloadFailed, match="workload 'e2e' failed: RuntimeError: disk on fire"):
        run_suite(_params(tmp_path, workloads=("ingest", "e2e")), quiet, workloads={"ingest": _ingest, "e2e": broken})
    assert not (tmp_path / "out").exists()
    assert not any((tmp_path / "work").iterdir())


# ---------------------------------------------------------------- the real thing


@pytest.mark.benchmark
def test_suite_cli_runs_every_workload_and_writes_files_of_the_documented_shape(tmp_path: Path) -> None:
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "benchmarks", "suite", "--target", "file", "--quick", "--duration", "0.5",
           "--raw-seconds", "0.1", "--partitions", "2", "--producers", "2", "--batch-records", "50",
           "--segment-mib", "1", "--catchup-mib", "4", "--compaction-mib", "2", "--retention-segments", "20",
           "--recovery-entries", "200", "--out-dir", str(out), "--work-dir", str(tmp_path / "work"), "--no-progress"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    result = json.loads((out / "file-quick.json").read_text())
    assert list(result["workloads"]) == list(ALL_WORKLOADS)
    for name, w in result["workloads"].items():
        assert w["figures"], name
        assert all(math.isfinite(v) for v in [*w["figures"].values(), *w["baseline"].values()]), name
    assert {"cores", "cpu_model"} <= result["machine"].keys() and result["versions"]["s3stream"]
    ratios = {r["key"] for r in result["ratios"]}
    assert {"ingest_vs_raw", "ack_wal_p99_vs_fsync_p99", "ack_s3_p99_vs_put_p99", "catchup_vs_raw_get",
            "e2e_e2e_p99_ms_vs_warpstream_e2e_p99", "e2e_produce_p99_ms_vs_warpstream_produce_p99",
            "ingest_put_per_gib_vs_naive_put_per_gib"} <= ratios
    assert all(math.isfinite(r["ratio"]) for r in result["ratios"])
    assert len(result["costs"]["scenarios"]) == 2 and "naive" in result["costs"]["scenarios"][0]
    assert {"latency-ingest", "latency-e2e", "requests-per-gib", "costs"} <= result["images"].keys()
    for rel in result["images"].values():
        assert (out / rel).stat().st_size > 0
    md = (out / "file-quick.md").read_text()
    for name in ALL_WORKLOADS:
        assert f"## Workload: {name}" in md
    assert not any((tmp_path / "work").iterdir())
