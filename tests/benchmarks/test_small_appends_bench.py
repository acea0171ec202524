"""Smoke test of the small-appends workload: tiny counts on the `file` target, result files of the documented
shape (its figures' values say nothing on a shared machine with a few hundred appends)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import small_appends as bench
from benchmarks.core.result import schema

pytestmark = pytest.mark.benchmark


def test_small_appends_writes_result_files_of_the_documented_shape(tmp_path: Path) -> None:
    cfg = bench.make_config(quick=True, appends=320, window=32)
    code = bench.run_standalone("file", cfg, tmp_path / "results", tmp_path / "work")
    assert code in (0, 1)  # 1: a bound missed (not judged here)
    (path,) = (tmp_path / "results").glob("small-appends-file-quick.json")
    result = json.loads(path.read_text())
    assert result["schema"] == schema("small-appends")
    assert result["problems"] == []  # every acknowledged append was read back at its offset, in call order
    assert set(result["phases"]) == set(bench.PHASES)
    for phase in result["phases"].values():
        assert phase["appends"] > 0 and phase["appends_per_s"] > 0 and phase["cpu_us_per_append"] > 0
    assert {f["name"] for f in result["figures"]} == {"cpu_per_append_async", "appends_per_s_16_threads"}
    assert result["raw_limits"]["fsync"]["p50_ms"] > 0
    assert "Where the CPU goes" in path.with_suffix(".md").read_text()
    assert not any((tmp_path / "work").iterdir())  # the scratch directory is gone


def test_bad_shapes_are_usage_errors() -> None:
    with pytest.raises(ValueError, match="appends"):
        bench.make_config(appends=4)
    with pytest.raises(ValueError, match="window"):
        bench.make_config(window=0)
