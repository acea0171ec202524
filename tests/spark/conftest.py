"""Fixtures of the Spark tier: ONE local[2] SparkSession for the whole session, and stores on disk.

The session is built by :func:`s3stream.apps.spark.session.local_session` (the factory users get). It starts
after the local S3 servers' credentials are in the environment, because Spark's Python workers inherit
the JVM's environment from when it started. The tier is skipped, with the reason, only when pyspark or
Java is missing. ``memory://`` stores cannot be used with Spark (executors are other processes), so the
tests use ``file://`` directories (and SeaweedFS where marked).
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_COUNTER = itertools.count()


@pytest.fixture(scope="session")
def spark(s3_test_credentials: None) -> Iterator[Any]:
    """The tier's SparkSession (local[2], UI off, filter pushdown on, the data source registered)."""
    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 's3stream[spark]')")
    if shutil.which("java") is None:
        pytest.skip("Java is not installed: the Spark tier needs a JVM (Java 17)")
    from s3stream.apps.spark.session import local_session

    session = local_session("s3stream-tests", master="local[2]",
                            conf={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"},
                            log_level="ERROR")
    yield session
    session.stop()


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    """A fresh directory for a ``file://`` store (its WAL directory lives beside it)."""
    path = tmp_path / f"store-{next(_COUNTER)}"
    path.mkdir()
    return path
