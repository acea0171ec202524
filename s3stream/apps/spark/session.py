"""A correctly configured local SparkSession, and registering the data source on any session.

:func:`local_session` is for development, tests and single-machine jobs. Before the JVM starts it sets,
unless already set in the environment:

* ``SPARK_LOCAL_IP=127.0.0.1``: Spark binds to loopback instead of guessing an interface (on machines
  whose host name does not resolve it otherwise fails or warns);
* ``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON``: this interpreter, so workers import the same s3stream;
* ``PYTHONPATH``: gains the directory holding the ``s3stream`` package when it is not installed
  (a source checkout), so workers find it and the ``pyspark_s3stream`` auto-registration module.

and it configures the session: UI off, few shuffle partitions, session time zone UTC, and
``spark.sql.python.filterPushdown.enabled=true`` (the data source pushes filters down). It then
registers the data source explicitly (:func:`register`), which also works where Spark's automatic
``pyspark_*`` discovery cannot see the package. On a cluster, build the session as usual and call
:func:`register` (or install s3stream with its ``spark`` extra on every node; see ``docs/spark.md``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DEFAULT_CONF", "local_session", "prepare_environment", "register"]

#: Settings of :func:`local_session` (a caller's ``conf`` overrides them).
DEFAULT_CONF: Mapping[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.python.filterPushdown.enabled": "true",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.python.worker.reuse": "true",
}


def prepare_environment() -> None:
    """Set SPARK_LOCAL_IP, PYSPARK_PYTHON, PYSPARK_DRIVER_PYTHON and PYTHONPATH (see the module docstring)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    root = str(Path(__file__).resolve().parents[2])
    if (Path(root) / "pyspark_s3stream").is_dir():  # a source checkout: workers must see it on their path
        paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        if root not in paths:
            os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])


def register(spark: SparkSession) -> None:
    """Register the ``s3stream`` data source on ``spark`` (idempotent)."""
    from s3stream.apps.spark.source import S3StreamDataSource

    spark.dataSource.register(S3StreamDataSource)


def local_session(app_name: str = "s3stream", *, master: str = "local[2]", conf: Mapping[str, str] | None = None,
                  log_level: str = "WARN") -> SparkSession:
    """A local SparkSession configured for s3stream, with the data source registered.

    Args:
        app_name: the Spark application name.
        master: the Spark master (``local[N]`` for N worker threads).
        conf: extra Spark settings, overriding :data:`DEFAULT_CONF`.
        log_level: the JVM's log level once started.
    """
    prepare_environment()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**DEFAULT_CONF, **dict(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    register(spark)
    return spark
