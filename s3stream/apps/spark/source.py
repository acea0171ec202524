"""The ``s3stream`` Spark data source: ``spark.read``/``readStream``/``write``/``writeStream`` entry point.

``DataSource.name()`` is ``"s3stream"``. Spark finds the class either through
:func:`s3stream.apps.spark.session.register` (``spark.dataSource.register``) or automatically through the
top-level module ``pyspark_s3stream`` (Spark registers every installed ``pyspark_*`` module's
``DefaultSource`` when a session first uses a Python data source). Options: :mod:`s3stream.apps.spark.options`;
output schema: :mod:`s3stream.apps.spark.schema`.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from s3stream.apps.spark.batch import BatchReader, PushdownBatchReader, pushdown_planner_calling
from s3stream.apps.spark.options import parse_read_options, parse_write_options
from s3stream.apps.spark.schema import spark_ddl
from s3stream.base.errors import InvalidConfig

__all__ = ["S3StreamDataSource"]


class S3StreamDataSource(DataSource):
    """Kafka-style topics of an s3stream store as a Spark source and sink."""

    @classmethod
    def name(cls) -> str:
        return "s3stream"

    def schema(self) -> str:
        value = str(self.options.get("includeHeaders", "false"))  # Spark's options are case-insensitive
        return spark_ddl(include_headers=value.strip().lower() == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = parse_read_options(self.options, streaming=False)
        # only where the session enables pushdown: elsewhere Spark refuses a reader with pushFilters
        return PushdownBatchReader(opts) if opts.push_filters and pushdown_planner_calling() else BatchReader(opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from s3stream.apps.spark.stream import StreamReader

        return StreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from s3stream.apps.spark.writer import BatchWriter

        _append_only(overwrite)
        return BatchWriter(parse_write_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from s3stream.apps.spark.writer import StreamWriter

        _append_only(overwrite)
        return StreamWriter(parse_write_options(self.options), schema)


def _append_only(overwrite: bool) -> None:
    if overwrite:
        raise InvalidConfig("the s3stream sink only appends (like Kafka's): use mode('append') or "
                            "outputMode('append')", key="mode")
