"""Spark's auto-registration hook for the ``s3stream`` data source.

Spark imports every installed top-level module named ``pyspark_*`` that defines ``DefaultSource`` (a
``DataSource`` subclass) and registers it under ``DefaultSource.name()`` — here ``"s3stream"`` — so
``spark.read.format("s3stream")`` works once the package is installed with its ``spark`` extra.
"""

from s3stream.apps.spark.source import S3StreamDataSource as DefaultSource

__all__ = ["DefaultSource"]
