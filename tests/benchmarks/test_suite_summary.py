"""The README table is generated from result files: every cell comes from the file, missing ones show '-'."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.suite.summary import HEADER, RAW_HEADER, summary_table


def _result() -> dict[str, object]:
    return {
        "target": {"spec": "latency:lan"},
        "workloads": {
            "ingest": {"figures": {"ack_wal_mb_per_s": 40.0, "ack_wal_p99_ms": 3.0, "ack_s3_p99_ms": 260.0,
                                   "put_per_gib": 140.0},
                       "baseline": {"naive_put_per_gib": 10486.0}},
            "compaction": {"figures": {"cleaner_mb_per_s": 300.0, "cleaner_vs_raw": 0.75},
                           "baseline": {"cleaner_mb_per_s": 30.0}},
        },
        "ratios": [{"key": "ingest_vs_raw", "ratio": 0.25}, {"key": "ack_wal_p99_vs_fsync_p99", "ratio": 1.5}],
        "costs": {"scenarios": [{"name": "reference rate", "s3stream": {"total": 220.4}, "naive": {"total": 1496.0}}]},
        "raw_limits": {"disk_mb_per_s": 257.0, "fsync_p99_ms": 0.316, "put_mb_per_s": 155.6, "put_p50_ms": 429.9,
                       "put_p99_ms": 725.8, "get_mb_per_s": 909.1, "get_p50_ms": 35.8},
    }


def test_rows_quote_the_result_file(tmp_path: Path) -> None:
    path = tmp_path / "latency-lan.json"
    path.write_text(json.dumps(_result()))
    table = summary_table([path])
    assert table.startswith(HEADER)
    lines = table.splitlines()
    row = lines[2]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[0] == "`latency:lan`"
    assert cells[1] == "40 (0.25)"
    assert cells[2] == "3 (1.50)"
    assert cells[3] == "260"
    assert cells[4] == "-"  # no e2e workload in this file
    assert cells[6] == "300 (0.75)"  # the cleaner's figure, not the baseline's entry of the same name
    assert cells[8] == "140 (10,486)"
    assert cells[9] == "220 (1,496)"
    assert "latency-lan.json" in cells[10]

    raw = lines[lines.index(RAW_HEADER.splitlines()[0]) + 2]
    assert [c.strip() for c in raw.strip("|").split("|")] == [
        "`latency:lan`", "257", "0.316", "156", "430 / 726", "909", "35.8 / -"]  # get_p99_ms is missing
