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
    assert result["produce"]["kafka"]["warm_up"]["records"] == total // 4
    for path, reference in (("produce", result["produce"]["api"]), ("catchup", result["catchup"]["read_arrow_cold"])):
        ceiling = result["bounds"][path]
        assert 0 < ceiling["ceiling_mb_per_s"] <= ceiling["cores_ceiling_mb_per_s"]
        assert ceiling["ceiling_ratio"] == pytest.approx(ceiling["ceiling_mb_per_s"] / reference["mb_per_s"], rel=1e-2)
    main = result["bounds"]["catchup"]["client_main_thread_ceiling_mb_per_s"]
    assert main is None or main > 0  # None: the consumer's main thread took under 10 ms at this size
    assert result["bounds"]["e2e"]["server_busy_cores"] > 0 and result["bounds"]["e2e"]["server_cpu_ms_per_mb"] > 0
    assert set(result["catchup"]) == {"kafka_cold", "kafka_warm", "read_arrow_cold", "read_arrow_warm",
                                      "read_arrow_api_topic"}
    for read in result["catchup"].values():
        assert read["verified"] and read["records"] == total and read["payload_bytes"] == total * 1024
    e2e = result["e2e"]
    assert e2e["rate_mb_per_s"] == pytest.approx(result["produce"]["kafka"]["mb_per_s"] / 2, rel=1e-3)
    light = result["e2e_light"]
    assert light["rate_mb_per_s"] == pytest.approx(result["produce"]["kafka"]["mb_per_s"] / 8, rel=1e-3)
    for path in ("kafka", "api"):
        for run in (e2e[path], light[path]):
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


def test_the_ceilings_are_the_runs_cpu_seconds_spread_over_the_cores_and_the_consumers_main_thread() -> None:
    def part(server_s: float, client_s: float, main_s: float) -> dict[str, object]:
        return {"payload_bytes": 400_000_000, "cpu": {"cpu_s": server_s},
                "client_cpu": {"cpu_s": client_s, "by_role_s": {"MainThread": main_s}}}

    produce = {**part(3.0, 1.0, 0.8), "records": 400_000}
    body = {"produce": {"kafka": produce, "api": {"mb_per_s": 250.0}},
            "catchup": {"kafka_cold": part(1.0, 1.0, 0.5), "read_arrow_cold": {"mb_per_s": 1000.0}},
            "e2e": {"kafka": {"records": 2_000_000, "seconds": 30.0, "cpu": {"cpu_s": 24.0, "wall_s": 32.0}}}}
    out = bench.bounds(body, cores=2)
    # produce: 4 s of CPU for 400 MB on 2 cores -> 200 MB/s at best, 0.8 of the API's 250
    assert out["produce"]["cores_ceiling_mb_per_s"] == 200.0 and out["produce"]["ceiling_ratio"] == 0.8
    assert out["produce"]["client_main_thread_ceiling_mb_per_s"] is None
    # catch-up: 2 s on 2 cores -> 400 MB/s; the main thread's 0.5 s -> 800 MB/s; the lower one holds: 0.4
    assert out["catchup"]["cores_ceiling_mb_per_s"] == 400.0
    assert out["catchup"]["client_main_thread_ceiling_mb_per_s"] == 800.0
    assert out["catchup"]["ceiling_mb_per_s"] == 400.0 and out["catchup"]["ceiling_ratio"] == 0.4
    # end to end: 24 s of server CPU over the phase's 32 s for 2,000 MB; produce: 3 s for 400 MB
    assert out["e2e"]["server_busy_cores"] == 0.75 and out["e2e"]["server_cpu_ms_per_mb"] == 12.0
    assert out["e2e"]["produce_server_cpu_ms_per_mb"] == 7.5
