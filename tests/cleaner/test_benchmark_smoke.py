"""Smoke test of the compaction benchmark: ``python -m benchmarks.compaction --quick`` end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import compaction


@pytest.mark.benchmark
def test_quick_run_measures_every_phase_and_writes_results(tmp_path: Path) -> None:
    rc = compaction.main(["--quick", "--repeat", "1", "--out-dir", str(tmp_path / "out"),
                          "--work-dir", str(tmp_path)])
    result = json.loads((tmp_path / "out" / "compaction-quick.json").read_text())
    assert result["problems"] == []                  # the cleaner kept exactly the latest record per key
    assert rc == (0 if result["passed"] else 1)      # targets are judged, not asserted: the machine is shared
    assert (tmp_path / "out" / "compaction-quick.md").read_text().startswith("# Compaction benchmark (quick)")
    assert {f["name"] for f in result["figures"]} == {"cleaner_vs_raw", "cleaner_vs_baseline", "peak_rss_mib"}
    for phase in ("raw", "cleaner", "baseline"):
        assert result[phase]["mb_per_s"] > 0
    rnd = result["cleaner"]["round"]
    assert rnd["records_kept"] == result["raw"]["records_kept"] and rnd["segments_in"] == result["segments"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]      # the scratch store was removed
