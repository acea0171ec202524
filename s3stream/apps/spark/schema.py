"""The rows the Spark data source produces: Spark's Kafka-source schema, built column-wise from Arrow.

Columns (all nullable, as in Spark's Kafka source; ``headers`` only with ``includeHeaders``)::

    key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp,
    timestampType int, headers array<struct<key: string, value: binary>>

``timestampType`` is 0 for ``CreateTime`` and 1 for ``LogAppendTime`` (the topic's
``message.timestamp.type``). Record timestamps are milliseconds; Spark's ``timestamp`` is microseconds in
UTC, and Spark checks the Arrow schema of every returned batch against :data:`OUTPUT_SCHEMA` exactly
(``timestamp[us, tz=UTC]``, list items named ``element``). Conversion is a handful of Arrow kernels per
batch, never a loop over records.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from s3stream.base.records import HEADER_TYPE

__all__ = [
    "OUTPUT_HEADER_TYPE",
    "OUTPUT_SCHEMA",
    "TIMESTAMP_TYPES",
    "output_batches",
    "output_schema",
    "spark_ddl",
]

#: ``message.timestamp.type`` -> the ``timestampType`` column value (Kafka's TimestampType ids).
TIMESTAMP_TYPES = {"CreateTime": 0, "LogAppendTime": 1}

OUTPUT_HEADER_TYPE = pa.list_(pa.field("element", pa.struct([pa.field("key", pa.string()),
                                                             pa.field("value", pa.binary())])))
OUTPUT_SCHEMA = pa.schema([
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
    pa.field("headers", OUTPUT_HEADER_TYPE),
])

_DDL = ("key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp, "
        "timestampType int")
_HEADERS_DDL = ", headers array<struct<key: string, value: binary>>"


def spark_ddl(*, include_headers: bool = True) -> str:
    """The Spark schema as a DDL string (what ``DataSource.schema()`` returns)."""
    return _DDL + (_HEADERS_DDL if include_headers else "")


def output_schema(*, include_headers: bool = True) -> pa.Schema:
    """The Arrow schema of the produced batches (equal to Spark's conversion of :func:`spark_ddl`)."""
    return OUTPUT_SCHEMA if include_headers else OUTPUT_SCHEMA.remove(OUTPUT_SCHEMA.get_field_index("headers"))


def output_batches(table: pa.Table, *, topic: str, partition: int, timestamp_type: int,
                   include_headers: bool = True) -> list[pa.RecordBatch]:
    """Records (columns of ``RECORD_SCHEMA``) as output batches of one topic partition."""
    schema = output_schema(include_headers=include_headers)
    out: list[pa.RecordBatch] = []
    for batch in table.to_batches():
        n = batch.num_rows
        if n == 0:
            continue
        ts = pc.multiply(batch.column("timestamp").cast(pa.int64()), pa.scalar(1000, pa.int64()))
        columns = [
            batch.column("key"), batch.column("value"), pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n), batch.column("offset"),
            ts.cast(pa.timestamp("us", tz="UTC")), pa.repeat(pa.scalar(timestamp_type, pa.int32()), n),
        ]
        if include_headers:
            headers = batch.column("headers")
            columns.append(headers.cast(OUTPUT_HEADER_TYPE) if headers.type.equals(HEADER_TYPE)
                           else pa.nulls(n, OUTPUT_HEADER_TYPE))
        out.append(pa.RecordBatch.from_arrays(columns, schema=schema))
    return out
