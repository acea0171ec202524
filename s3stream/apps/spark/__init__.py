"""s3stream on Spark: the ``s3stream`` data source (batch and streaming reads, writes) and distributed jobs.

pyspark is optional: ``import s3stream`` never imports this package, and this package imports pyspark only
when one of the Spark-facing names below is used. Modules:

* pure, no pyspark: ``options`` (option parsing), ``schema`` (output schema), ``planning`` (snapshot ->
  read tasks), ``snapshot`` (read-only manifest snapshots), ``segio``/``tasks`` (executor reads),
  ``positions`` (start/end offsets), ``staging`` (executor writes), ``publish`` (the driver's commit
  of a write), ``compaction`` (the compaction job's tasks);
* Spark-facing: ``source`` (the DataSource), ``batch``, ``stream``, ``pushdown``, ``writer``,
  ``jobs`` (compact, export, backfill), ``session`` (local session factory, registration).

Usage::

    from s3stream.apps.spark import local_session
    spark = local_session()
    df = spark.read.format("s3stream").option("url", url).option("subscribe", "orders").load()

See ``docs/spark.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from s3stream.apps.spark.jobs import backfill, compact, export
    from s3stream.apps.spark.session import local_session, register
    from s3stream.apps.spark.source import S3StreamDataSource

__all__ = ["S3StreamDataSource", "backfill", "compact", "export", "local_session", "register"]

_LAZY = {
    "S3StreamDataSource": "s3stream.apps.spark.source",
    "backfill": "s3stream.apps.spark.jobs",
    "compact": "s3stream.apps.spark.jobs",
    "export": "s3stream.apps.spark.jobs",
    "local_session": "s3stream.apps.spark.session",
    "register": "s3stream.apps.spark.session",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 's3stream.apps.spark' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
