"""The ``s3stream`` command (entry point ``s3stream.apps.cli:main``), built with typer and rich.

Commands, one module each (names follow Kafka's tools where Kafka has one)::

    s3stream topic create|list|describe|alter|delete     topics.py     (kafka-topics, kafka-configs)
    s3stream produce TOPIC < input                       produce.py    (kafka-console-producer)
    s3stream consume TOPIC > output.jsonl                consume.py    (kafka-console-consumer)
    s3stream dump KEY                                    dump.py       (kafka-dump-log)
    s3stream manifest show TOPIC PARTITION               manifests.py
    s3stream serve                                       runners.py -> s3stream.apps.serve
    s3stream quickstart                                  runners.py -> s3stream.apps.quickstart
    s3stream local-stack                                 localstack.py -> s3stream.apps.localstack
    s3stream retention run | delete-records | clean run | gc run   maintenance.py
    s3stream spark compact|export|backfill               spark.py (pyspark imported on use)
    s3stream wal quarantine DIRECTORY                    walcmd.py     (move local WAL damage aside)

Every command takes ``--url`` (default: the embedded store under the user data directory) and
repeatable ``--option KEY=VALUE`` store settings (:mod:`s3stream.apps.cli.common`). Errors raised by the
store print one red line and exit 1; usage errors exit 2 (click). See ``docs/cli.md``.
"""

from __future__ import annotations

import typer

from s3stream.apps.cli import localstack, maintenance, manifests, spark, topics, walcmd
from s3stream.apps.cli.common import ErrorHandlingGroup
from s3stream.apps.cli.consume import consume
from s3stream.apps.cli.dump import dump
from s3stream.apps.cli.produce import produce
from s3stream.apps.cli.runners import quickstart, serve
from s3stream.base.allocator import tune_allocator

__all__ = ["app", "main"]

app = typer.Typer(
    name="s3stream", cls=ErrorHandlingGroup, no_args_is_help=True, add_completion=False,
    pretty_exceptions_enable=False,
    help="s3stream: Kafka-style partitions whose data lives in S3-compatible object storage.")
app.add_typer(topics.app, name="topic")
app.command("produce")(produce)
app.command("consume")(consume)
app.command("dump")(dump)
app.add_typer(manifests.app, name="manifest")
app.command("serve")(serve)
app.command("quickstart")(quickstart)
app.command("local-stack")(localstack.local_stack)
app.add_typer(maintenance.retention_app, name="retention")
app.command("delete-records")(maintenance.delete_records)
app.add_typer(maintenance.clean_app, name="clean")
app.add_typer(maintenance.gc_app, name="gc")
app.add_typer(spark.app, name="spark")
app.add_typer(walcmd.app, name="wal")


def main() -> None:
    """Run the ``s3stream`` command line (console-script entry point)."""
    tune_allocator()
    app()
