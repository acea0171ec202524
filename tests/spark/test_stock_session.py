"""``format("s3stream")`` on a stock SparkSession, as ``spark-submit`` gives one.

The session is built in a subprocess (one SparkContext per process, and the tier's own session sets
``spark.sql.python.filterPushdown.enabled``): a plain ``SparkSession.builder`` with only a master, no
``register()``; Spark finds the source through ``pyspark_s3stream`` on the path, as after ``pip install``.
Filter pushdown is off there (Spark's default), so the source must not offer it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .kit import expected, fill, open_at

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]

_SCRIPT = r"""
import json, sys
from pyspark.sql import SparkSession

spark = SparkSession.builder.master("local[1]").getOrCreate()
try:
    df = spark.read.format("s3stream").option("url", sys.argv[1]).option("subscribe", "orders").load()
    rows = df.where("partition = 1 AND offset >= 20").select("partition", "offset", "value").collect()
    print(json.dumps({"pushdown": spark.conf.get("spark.sql.python.filterPushdown.enabled"),
                      "columns": df.columns, "rows": [[r[0], r[1], r[2].decode()] for r in rows]}))
finally:
    spark.stop()
"""


def test_batch_read_with_filters_on_a_stock_session(store_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    if shutil.which("java") is None:
        pytest.skip("Java is not installed: the Spark tier needs a JVM (Java 17)")
    url = f"file://{store_dir}"
    with open_at(url, store_dir / "_wal") as store:
        fill(store, "orders", 2, 25)
        want = [[p, o, v.decode()] for p, o, _k, v, *_ in expected(store, "orders") if p == 1 and o >= 20]
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", _SCRIPT, url], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["pushdown"] == "false"  # Spark's default: the session really is a stock one
    assert "headers" not in out["columns"]
    assert sorted(out["rows"]) == want
