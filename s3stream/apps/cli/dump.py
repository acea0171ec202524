"""``s3stream dump KEY``: print a segment or WAL object's metadata and verify its checksums (``DumpLogSegments``).

``KEY`` is an object key relative to the store root (``logs/<topic id>/0/segments/...parquet``,
``wal/<node>/...wal``), or a local file path: a path inside the ``file://`` store given by ``--url`` is
read as that store's key (so the manifest cross-check runs), any other existing file is read directly.
Only the object store is opened, never the full store, so dumping has no side effects on the data.

Output (stdout): the metadata, one row per row group or chunk, the checks with their outcome, and with
``--records`` every record as a JSON line (:mod:`s3stream.apps.cli.jsonl`; ``log`` names the partition).
A failed check exits 1 with one red line listing what failed, after everything else is printed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from s3stream.apps.cli.common import UrlOpt, err_console, out_console, resolve_url
from s3stream.apps.cli.jsonl import table_to_jsonl
from s3stream.apps.cli.objects import ObjectReport, inspect_object
from s3stream.base.errors import CorruptData, InvalidRequest
from s3stream.objectstore.protocol import ObjectStore

__all__ = ["dump"]

_MARK = {True: "[green]ok[/]", False: "[red]FAILED[/]", None: "[yellow]skipped[/]"}


def _store_key(arg: str, url: str) -> str | None:
    """The store key an absolute path names inside a ``file://`` store root, else None."""
    from s3stream.objectstore.url import parse_store_url

    parsed = parse_store_url(url)
    if parsed.scheme != "file":
        return None
    try:
        rel = Path(arg).resolve().relative_to(Path(parsed.bucket_or_path).resolve())
    except ValueError:
        return None
    return rel.as_posix()


def _read(arg: str, url: str | None) -> tuple[bytes, str, str | None, ObjectStore | None]:
    """``(data, source, key, store)`` of the object ``arg`` names (see the module docstring)."""
    from s3stream.objectstore.url import display_url, open_object_store

    resolved = resolve_url(url)
    path = Path(arg)
    key: str | None = arg
    if path.is_absolute():
        key = _store_key(arg, resolved)
        if key is None:
            if not path.is_file():
                raise InvalidRequest(f"{arg}: no such file")
            return path.read_bytes(), arg, None, None
    assert key is not None
    err_console().print(f"[dim]store: {escape(display_url(resolved))}[/]")
    store = open_object_store(resolved)
    try:
        return store.get(key), key, key, store
    except BaseException:
        store.close()
        raise


def _render(report: ObjectReport) -> None:
    console = out_console()
    console.print(f"[bold]{report.kind} object[/] {escape(report.source)}")
    meta = Table(show_header=False, box=None, padding=(0, 2))
    for name, value in report.metadata.items():
        meta.add_row(name, str(value))
    console.print(meta)
    if report.parts:
        parts = Table(title=report.parts_title, title_justify="left")
        for col in report.parts[0]:
            parts.add_column(col, justify="left" if col in ("log", "bytes", "status") else "right")
        for row in report.parts:
            parts.add_row(*(escape(str(v)) for v in row.values()))
        console.print(parts)
    for check in report.checks:
        detail = f" ({escape(check.detail)})" if check.detail else ""
        console.print(f"  {_MARK[check.ok]}  {escape(check.name)}{detail}")


def _as_json(report: ObjectReport) -> str:
    return json.dumps({"kind": report.kind, "source": report.source, "metadata": report.metadata,
                       report.parts_title.replace(" ", "_"): report.parts,
                       "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in report.checks]},
                      indent=2)


def dump(
    key: Annotated[str, typer.Argument(help="Object key (relative to the store root) or a local file path.")],
    records: Annotated[bool, typer.Option("--records", help="Also print every record as a JSON line.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the metadata as one JSON document.")] = False,
    url: UrlOpt = None,
) -> None:
    """Print a segment (.parquet) or WAL object (.wal): metadata, row groups/chunks, checksums verified."""
    data, source, store_key, store = _read(key, url)
    try:
        report = inspect_object(data, source=source, key=store_key, objstore=store)
    finally:
        if store is not None:
            store.close()
    if as_json:
        typer.echo(_as_json(report))
    else:
        _render(report)
    if records:
        out = typer.get_text_stream("stdout")
        for fixed, table in report.records:
            out.write(table_to_jsonl(table, fixed))
        out.flush()
    failed = report.failed
    if failed:
        raise CorruptData(f"{len(failed)} check(s) failed: " + "; ".join(f"{c.name}: {c.detail}" for c in failed),
                          source=source)
