"""``s3stream topic ...``: create, list, describe, alter and delete topics (like ``kafka-topics``/``kafka-configs``).

Config keys are Kafka's topic config names (``segment.bytes``, ``cleanup.policy``, ``retention.ms`` ...);
the store validates them, so a wrong key or value fails with one line naming the key. ``describe``
shows per-partition offsets, segment counts and bytes, and the effective config with the keys set on
the topic marked ``*`` (the rest are defaults); ``--json`` prints the same as one JSON document.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from s3stream.apps.cli.common import OptionsOpt, UrlOpt, err_console, open_cli_store, out_console, parse_pairs
from s3stream.base.errors import InvalidRequest

__all__ = ["app"]

app = typer.Typer(help="Create, list, describe, alter and delete topics.", no_args_is_help=True,
                  add_completion=False)

ConfigOpt = Annotated[list[str] | None, typer.Option(
    "--config", "-c", metavar="KEY=VALUE", show_default=False,
    help="A topic config, Kafka name (e.g. segment.bytes=1048576); repeatable.")]


@app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="Topic name (Kafka's rules: \\[a-zA-Z0-9._-], at most 249).")],
    partitions: Annotated[int, typer.Option("--partitions", "-p", min=1, help="Number of partitions.")] = 1,
    config: ConfigOpt = None,
    url: UrlOpt = None,
    option: OptionsOpt = None,
) -> None:
    """Create a topic."""
    configs = parse_pairs(config, flag="--config")
    with open_cli_store(url, option) as store:
        store.create_topic(name, partitions=partitions, config=configs)
    err_console().print(f"created topic {name!r} with {partitions} partition(s)")


@app.command("list")
def list_topics(url: UrlOpt = None, option: OptionsOpt = None) -> None:
    """Print the names of the live topics, one per line."""
    with open_cli_store(url, option) as store:
        names = store.list_topics()
    for name in names:
        typer.echo(name)


def _partition_table(info: dict[str, Any]) -> Table:
    table = Table(title=f"topic {info['name']} (id {info['topic_id']}, {info['partitions']} partitions)",
                  title_justify="left")
    for col in ("partition", "log start", "log end", "records*", "segments", "sealed", "bytes"):
        table.add_column(col, justify="right")
    for p in info["partition_info"]:
        span = p["log_end_offset"] - p["log_start_offset"]
        table.add_row(str(p["partition"]), str(p["log_start_offset"]), str(p["log_end_offset"]), str(span),
                      str(p["segments"]), str(p["sealed_segments"]), f"{p['size_bytes']:,}")
    table.caption = "*records = log end - log start (compaction can leave gaps)"
    return table


def _config_table(info: dict[str, Any]) -> Table:
    table = Table(title="config (* = set on the topic, others are defaults)", title_justify="left")
    table.add_column("")
    table.add_column("key")
    table.add_column("value")
    overrides = info["overrides"]
    for key in sorted(info["config"]):
        table.add_row("*" if key in overrides else "", key, str(info["config"][key]))
    return table


@app.command("describe")
def describe(
    name: Annotated[str, typer.Argument(help="Topic name.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document instead of tables.")] = False,
    url: UrlOpt = None,
    option: OptionsOpt = None,
) -> None:
    """Show a topic: offsets, segments and bytes per partition; the effective config (overrides marked)."""
    with open_cli_store(url, option) as store:
        info = store.describe_topic(name)
    if as_json:
        typer.echo(json.dumps(info, indent=2, sort_keys=True))
        return
    console = out_console()
    console.print(_partition_table(info))
    console.print(_config_table(info))


@app.command("alter")
def alter(
    name: Annotated[str, typer.Argument(help="Topic name.")],
    config: ConfigOpt = None,
    delete_config: Annotated[list[str] | None, typer.Option(
        "--delete-config", "-d", metavar="KEY", show_default=False,
        help="Reset a config key to its default; repeatable.")] = None,
    url: UrlOpt = None,
    option: OptionsOpt = None,
) -> None:
    """Set or reset config keys of a topic; takes effect at the next retention/cleaner pass."""
    updates: dict[str, object | None] = dict(parse_pairs(config, flag="--config"))
    for key in delete_config or ():
        if key in updates:
            raise InvalidRequest(f"config {key!r} is both set (--config) and deleted (--delete-config)")
        updates[key] = None
    if not updates:
        raise InvalidRequest("nothing to alter: give --config KEY=VALUE and/or --delete-config KEY")
    with open_cli_store(url, option) as store:
        store.alter_topic_config(name, updates)
    err_console().print(escape(f"altered topic {name!r}: " + ", ".join(
        f"{k}={v}" if v is not None else f"{k} (default)" for k, v in sorted(updates.items()))))


@app.command("delete")
def delete(
    name: Annotated[str, typer.Argument(help="Topic name.")],
    url: UrlOpt = None,
    option: OptionsOpt = None,
) -> None:
    """Delete a topic (its objects are garbage-collected after file.delete.delay.ms)."""
    with open_cli_store(url, option) as store:
        store.delete_topic(name)
    err_console().print(f"deleted topic {name!r}")
