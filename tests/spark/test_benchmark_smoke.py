"""Smoke run of ``benchmarks.spark_compaction`` on the tier's session (tiny data)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.benchmark]


def test_spark_compaction_benchmark_smoke(spark: Any, tmp_path: Path) -> None:
    from benchmarks.spark_compaction import SparkBenchConfig, run, write_results
    from benchmarks.spark_model import Costs, crossover_groups, crossover_partitions, spark_seconds

    cfg = SparkBenchConfig(partitions=2, segments=2, records=500, record_bytes=128, keys=100, master="local[2]",
                           seed=1, quick=True)
    work = tmp_path / "work"
    work.mkdir()
    result = run(cfg, work, spark=spark)
    assert result["identical"], result["problems"]
    assert result["inprocess"]["rounds"] == 2 and result["spark"]["runs"][0]["partitions"] == 2
    path = write_results(result, tmp_path / "out")
    assert json.loads(path.read_text())["model"]["crossover"][0]["cores"] == 2
    assert "Crossover" in path.with_suffix(".md").read_text()

    cheap_tasks = Costs(inproc_group_s=1.0, map_group_s=0.1, rewrite_group_s=0.9, driver_partition_s=0.01,
                        job_overhead_s=2.0, task_overhead_s=0.05)
    assert spark_seconds(cheap_tasks, 64, 1, 64) < 64 * 1.0
    assert crossover_partitions(cheap_tasks, 1, 64) is not None
    assert crossover_partitions(cheap_tasks, 1, 1) is None  # one core never beats the single cleaner
    assert crossover_groups(cheap_tasks, 16) is not None
