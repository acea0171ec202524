"""Smoke test of the Kafka benchmark: a tiny quick run on the `file` target through the command line, result files
of the documented shape, every record read back and verified (its figures say nothing at this size)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import kafka as bench
from benchmarks.cli import invoke
from benchmarks.core.result import schema

pytestmark = pytest.mark.benchmark


def test_kafka_benchmark_writes_verified_results_of_the_documented_shape(tmp_path: Path) -> None:
    out, work = tmp_path / "results", tmp_path / "work"
    code = invoke(["kafka", "--quick", "--mib", "4", "--e2e-seconds", "1", "--out-dir", str(out),
                   "--work-dir", str(work)])
    assert code in (0, 1)  # 1: a target missed (not judged at this size)
    result = json.loads((out / "kafka-file-quick.json").read_text())
    assert result["schema"] == schema("kafka") and result["slug"] == "file-quick"
    assert result["problems"] == []  # every read matched what was written, count and CRC32C per partition
    total = 4 * (1 << 20) // 1024
    for path in ("kafka", "api"):
        produced = result["produce"][path]
        assert produced["records"] == total and produced["mb_per_s"] > 0
    assert result["produce"]["kafka"]["producer"]["produce_requests"] > 0
    assert set(result["catchup"]) == {"kafka_cold", "kafka_warm", "read_arrow_cold", "read_arrow_warm",
                                      "read_arrow_api_topic"}
    for read in result["catchup"].values():
        assert read["verified"] and read["records"] == total and read["payload_bytes"] == total * 1024
    e2e = result["e2e"]
    assert e2e["rate_mb_per_s"] == pytest.approx(result["produce"]["kafka"]["mb_per_s"] / 2, rel=1e-3)
    for path in ("kafka", "api"):
        run = e2e[path]
        assert run["records"] > 0 and run["e2e"]["count"] == run["records"] and run["e2e"]["p99_ms"] > 0
    figures = {f["name"]: f for f in result["figures"]}
    assert set(figures) == {"kafka_produce_mb_per_s", "kafka_catchup_cold_mb_per_s", "kafka_added_e2e_p99_ms"}
    assert result["passed"] == (code == 0) == all(f["passed"] for f in figures.values())
    assert "## End to end at half load" in (out / "kafka-file-quick.md").read_text()
    assert not any(work.iterdir())  # the scratch directory is gone


def test_bad_shapes_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="partitions"):
        bench.make_config(partitions=0)
    with pytest.raises(ValueError, match="record-bytes"):
        bench.make_config(record_bytes=8)
    assert invoke(["kafka", "--server-option", "no.such.option=1", "--out-dir", str(tmp_path)]) == 2
    assert not any(tmp_path.iterdir())
