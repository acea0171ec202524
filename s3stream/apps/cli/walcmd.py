"""``s3stream wal quarantine DIRECTORY [--dry-run]``: move the damaged part of a local WAL aside.

A store refuses to open a node's local WAL holding damage a crash does not explain (``LocalWalCorrupt``,
whose message names the directory), because records acknowledged after the damage may be only there.
This is the operator's explicit step (docs/operations.md, "The local WAL is damaged"): it keeps the
entries before the damage, moves the rest under ``DIRECTORY/quarantine/`` (nothing is deleted), and
prints what it kept and moved. It needs no store: only the directory, which no process may be using.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from s3stream.apps.cli.common import out_console
from s3stream.write.localwal import quarantine_wal

__all__ = ["app"]

app = typer.Typer(help="The local write-ahead log of a writing node.", no_args_is_help=True, add_completion=False)


@app.command("quarantine")
def quarantine(
    directory: Annotated[Path, typer.Argument(help="The node's WAL directory, as the error named it.")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would move; change nothing.")] = False,
) -> None:
    """Keep a damaged local WAL's entries before the damage; move the rest aside so the store opens again."""
    report = quarantine_wal(directory, dry_run=dry_run)
    out = out_console()
    if report.damage is None:
        out.print(f"no damage: {escape(report.directory)} opens as it is; nothing to do")
        return
    verb = "would move" if dry_run else "moved"
    out.print(f"damage: {escape(report.damage)}")
    out.print(f"kept: local WAL entries below seq {report.kept_below_seq} (replayed at the next open)")
    if report.cut is not None:
        out.print(f"{'would cut' if dry_run else 'cut'}: {escape(report.cut)} at byte {report.cut_at} "
                  f"(a full copy {'would go' if dry_run else 'went'} to {escape(str(report.moved_to))})")
    if report.moved:
        out.print(f"{verb}: {escape(', '.join(report.moved))} to {escape(str(report.moved_to))}")
    out.print("records of the moved entries that the bucket already holds are kept; the others are lost")
