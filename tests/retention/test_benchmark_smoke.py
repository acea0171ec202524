"""Smoke test of the retention benchmark: ``python -m benchmarks.retention --quick`` on a tiny setting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import retention


@pytest.mark.benchmark
def test_quick_run_counts_requests_and_writes_results(tmp_path: Path) -> None:
    argv = ["--profile", "lan", "--quick", "--partitions", "4", "--segments", "6", "--out-dir", str(tmp_path)]
    assert retention.main(argv) == 0
    result = json.loads((tmp_path / "retention-lan-quick.json").read_text())
    assert (tmp_path / "retention-lan-quick.md").read_text().startswith("# Retention benchmark: lan (quick)")
    assert result["problems"] == []
    deleting, steady = result["deleting_pass"], result["steady_state_pass"]
    assert deleting["segments_deleted"] == 4 * 3 and deleting["partitions_changed"] == 4
    assert deleting["requests"]["manifest_commits"] == 4  # one commit per changed partition
    assert deleting["requests"]["by_kind"]["DELETE"] == 0  # physical deletion is GC's job, later
    assert steady["segments_deleted"] == 0 and steady["requests"]["manifest_commits"] == 0
    assert steady["requests"]["by_kind"]["PUT"] == 0
    # steady state: one manifest probe per partition, a topic-index probe and the topic document; no LIST
    assert steady["requests"]["by_kind_and_family"].get("GET manifest") == 4
    assert steady["requests"]["by_kind"]["LIST"] == 0
    warm = result["warm_deleting_pass"]  # another quarter (1 of 6 per partition) expired
    assert warm["segments_deleted"] == 4 and warm["requests"]["manifest_commits"] == 4
    assert warm["requests"]["by_kind_and_family"].get("LIST manifest") is None  # caches are warm
