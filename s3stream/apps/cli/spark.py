"""``s3stream spark compact|export|backfill``: the distributed jobs of :mod:`s3stream.apps.spark.jobs`.

Each command builds a SparkSession with :func:`s3stream.apps.spark.session.local_session` on ``--master``
(default ``local[*]``; on a cluster run the jobs through ``spark-submit`` and the importable functions
instead, see ``docs/spark.md``), runs the job against ``--url`` and prints a summary. pyspark is
imported only when a command runs; without it the commands fail with a one-line hint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from s3stream.apps.cli.common import OptionsOpt, UrlOpt, err_console, out_console, parse_pairs, resolve_url
from s3stream.base.errors import InvalidConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["app"]

app = typer.Typer(help="Distributed jobs on Spark (needs pyspark: the spark extra of s3stream).", no_args_is_help=True,
                  add_completion=False)

MasterOpt = Annotated[str, typer.Option("--master", help="Spark master URL (local[N], spark://..., yarn...).")]
ConfOpt = Annotated[list[str] | None, typer.Option("--conf", metavar="KEY=VALUE", show_default=False,
                                                   help="A Spark setting; repeatable.")]


def _session(master: str, conf: list[str] | None) -> SparkSession:
    try:
        from s3stream.apps.spark.session import local_session
    except ImportError as exc:
        raise InvalidConfig(f"pyspark is not installed ({exc}); pip install 's3stream[spark]'") from None
    err_console().print(f"[dim]spark: {master}[/]")
    return local_session("s3stream-cli", master=master, conf=parse_pairs(conf, flag="--conf"))


@app.command("compact")
def compact_cmd(
    topics: Annotated[list[str], typer.Argument(help="Topic(s) to compact.")],
    url: UrlOpt = None,
    option: OptionsOpt = None,
    partition: Annotated[list[int] | None, typer.Option(
        "--partition", "-p", help="Only this partition; repeatable.")] = None,
    force: Annotated[bool, typer.Option(help="Clean below min.cleanable.dirty.ratio too.")] = False,
    master: MasterOpt = "local[*]",
    conf: ConfOpt = None,
) -> None:
    """Compact the eligible partitions of TOPICS with the cleaner's rules, as Spark tasks."""
    from s3stream.apps.spark.jobs import compact

    spark = _session(master, conf)
    report = compact(spark, resolve_url(url), topics, partitions=partition, force=force,
                     store_options=parse_pairs(option, flag="--option"))
    table = Table(title=f"spark compaction {report.job_id}")
    for col in ("topic", "partition", "status", "segments in", "segments out", "records read", "records kept",
                "checkpoint", "map full"):
        table.add_column(col, justify="left" if col in ("topic", "status") else "right")
    for o in report.outcomes:
        table.add_row(o.topic, str(o.partition), o.status, str(o.segments_in), str(o.segments_out),
                      str(o.records_read), str(o.records_kept), str(o.checkpoint), "yes" if o.map_full else "no")
    out_console().print(table)
    err_console().print(f"{len(report.cleaned)} partition(s) cleaned, {len(report.skipped)} not eligible")


@app.command("export")
def export_cmd(
    topic: Annotated[str, typer.Argument(help="Topic to export.")],
    path: Annotated[str, typer.Argument(help="Output path or URI (a directory of Parquet files).")],
    url: UrlOpt = None,
    fmt: Annotated[str, typer.Option("--format", help="Spark output format.")] = "parquet",
    mode: Annotated[str, typer.Option(
        help="Spark save mode: errorifexists, overwrite, append, ignore.")] = "errorifexists",
    read: Annotated[list[str] | None, typer.Option("--read", metavar="KEY=VALUE",
                                                   help="A read option (startingOffsets=...); repeatable.")] = None,
    master: MasterOpt = "local[*]",
    conf: ConfOpt = None,
) -> None:
    """Write TOPIC's records to PATH, partitioned by partition."""
    from s3stream.apps.spark.jobs import export

    spark = _session(master, conf)
    export(spark, resolve_url(url), topic, path, format=fmt, mode=mode,
           read_options=parse_pairs(read, flag="--read"))
    err_console().print(f"exported {topic} to {path}")


@app.command("backfill")
def backfill_cmd(
    topic: Annotated[str, typer.Argument(help="Topic to append to.")],
    path: Annotated[str, typer.Argument(
        help="Input path or URI (columns value, and key/partition/timestamp/headers).")],
    url: UrlOpt = None,
    fmt: Annotated[str, typer.Option("--format", help="Spark input format.")] = "parquet",
    keep_partitions: Annotated[bool, typer.Option(help="Use the input's partition column.")] = True,
    master: MasterOpt = "local[*]",
    conf: ConfOpt = None,
) -> None:
    """Append the table at PATH to TOPIC."""
    from s3stream.apps.spark.jobs import backfill

    spark = _session(master, conf)
    backfill(spark, resolve_url(url), topic, path, format=fmt, keep_partitions=keep_partitions)
    err_console().print(f"backfilled {topic} from {path}")
