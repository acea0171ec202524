"""Maintenance passes on demand: ``retention run``, ``delete-records``, ``clean run``, ``gc run``.

Each runs one pass of what ``s3stream serve`` runs periodically and prints what it did. They open the
store as a writer (``delete-records`` moves a log start; retention may roll an active segment it owns;
the cleaner writes segments), so point them at a store no other process is serving, or prefer letting
``serve`` do the work.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from s3stream.apps.cli.common import OptionsOpt, UrlOpt, err_console, open_cli_store, out_console

__all__ = ["clean_app", "delete_records", "gc_app", "retention_app"]

retention_app = typer.Typer(help="Retention (cleanup.policy=delete, rules RET-1..9).", no_args_is_help=True,
                            add_completion=False)
clean_app = typer.Typer(help="Key compaction (the cleaner).", no_args_is_help=True, add_completion=False)
gc_app = typer.Typer(help="Garbage collection of unreferenced objects.", no_args_is_help=True, add_completion=False)


def _spinner(text: str) -> Progress:
    progress = Progress(SpinnerColumn(), TextColumn(text), TimeElapsedColumn(), console=err_console(),
                        transient=True)
    progress.add_task(text, total=None)
    return progress


@retention_app.command("run")
def retention_run(url: UrlOpt = None, option: OptionsOpt = None) -> None:
    """One retention pass over every partition, at the store's clock."""
    with open_cli_store(url, option, writes=True) as store, _spinner("retention pass"):
        report = store.run_retention()
    table = Table(title="retention pass")
    for col in ("partitions checked", "partitions changed", "segments deleted", "bytes deleted", "seconds"):
        table.add_column(col, justify="right")
    table.add_row(str(report.partitions_checked), str(report.partitions_changed), str(report.segments_deleted),
                  str(report.bytes_deleted), f"{report.duration_s:.3f}")
    out_console().print(table)
    for reason, (segments, nbytes) in sorted(report.by_reason.items()):
        out_console().print(f"  {reason}: {segments} segments, {nbytes} bytes")


def delete_records(
    topic: Annotated[str, typer.Argument(help="Topic name.")],
    partition: Annotated[int, typer.Argument(min=0, help="Partition number.")],
    offset: Annotated[str, typer.Argument(
        help="New log start offset; 'end' (or -1, written after '--') means the log end.")],
    url: UrlOpt = None,
    option: OptionsOpt = None,
) -> None:
    """Move a partition's log start offset (Kafka's DeleteRecords); retention then drops whole segments."""
    target = -1 if offset.strip().lower() in ("end", "-1") else _offset(offset)
    with open_cli_store(url, option, writes=True) as store:
        start = store.partition(topic, partition).delete_records(target)
    out_console().print(f"{topic}-{partition}: log start offset is now {start}")


def _offset(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not an offset (an integer >= 0, or 'end')") from None
    if value < 0:
        raise typer.BadParameter(f"{text!r} is not an offset (an integer >= 0, or 'end')")
    return value


@clean_app.command("run")
def clean_run(url: UrlOpt = None, option: OptionsOpt = None) -> None:
    """One cleaner pass: clean the dirtiest eligible compacted partition and print the round's stats."""
    with open_cli_store(url, option, writes=True) as store, _spinner("cleaning the dirtiest partition"):
        report = store.run_cleaner()
    if not report.enabled:
        out_console().print("the cleaner is disabled (log.cleaner.enable=false)")
        return
    r = report.cleaned
    if r is None:
        out_console().print(f"nothing to clean ({report.candidates} compacted partitions checked)")
    else:
        table = Table(title=f"cleaned {r.log_id}" + (" (aborted: inputs changed)" if r.aborted else ""))
        for name in ("first dirty", "new checkpoint", "map full", "records read", "records kept", "records removed",
                     "bytes read", "bytes written", "segments in/out", "seconds"):
            table.add_column(name, justify="right")
        table.add_row(str(r.first_dirty), str(r.end_offset), str(r.map_full), str(r.records_read),
                      str(r.records_kept), str(r.records_removed), str(r.bytes_read), str(r.bytes_written),
                      f"{r.segments_in}/{r.segments_out}", f"{r.duration_s:.3f}")
        out_console().print(table)
    if report.retention_segments_deleted:
        out_console().print(f"retention on compacted topics deleted {report.retention_segments_deleted} segments")
    for log_id, why in sorted(report.uncleanable.items()):
        err_console().print(f"[yellow]uncleanable: {log_id}: {why}[/]")


@gc_app.command("run")
def gc_run(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be deleted; delete nothing.")] = False,
    url: UrlOpt = None,
    option: OptionsOpt = None,
) -> None:
    """Delete objects no manifest references, once their grace periods have passed."""
    with open_cli_store(url, option) as store, _spinner("garbage collection"):
        report = store.collect_garbage(dry_run=dry_run)
    verb = "would delete" if dry_run else "deleted"
    summary = report.summary()
    if not any(summary.values()):
        out_console().print("nothing to collect")
    for kind, count in summary.items():
        if count:
            out_console().print(f"{verb} {count} {kind.replace('_', ' ')} object(s)")
