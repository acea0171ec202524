"""What every ``s3stream`` command shares: the store options, opening the store, output, and errors.

Vocabulary:

* **store URL** (``--url``, env ``S3STREAM_URL``): where the data lives; by default the embedded store
  ``file://<user data dir>/s3stream/data``. It is echoed on stderr only through
  :func:`~s3stream.objectstore.url.display_url`, so nothing secret-looking is ever printed.
* **option** (``--option KEY=VALUE``, repeatable): a :class:`~s3stream.base.settings.StoreSettings` field
  or a Kafka broker-level synonym, validated by the store (unknown names raise ``InvalidConfig``).

Invariants:

* Every :class:`~s3stream.base.errors.S3StreamError` that escapes a command becomes exactly one red line on
  stderr and exit code 1 (:class:`ErrorHandlingGroup`); only bugs show a traceback.
* Data goes to stdout, everything for humans (store in use, summaries, progress) to stderr, so
  ``s3stream consume t | jq`` stays clean.
* Consoles are created per call: ``CliRunner`` swaps ``sys.stdout``/``sys.stderr`` between runs.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import platformdirs
import typer
from rich.console import Console
from rich.markup import escape

from s3stream.base.errors import CorruptData, Fenced, InvalidConfig, S3StreamError

if TYPE_CHECKING:
    from s3stream.store import Store

__all__ = [
    "EXIT_ERROR",
    "ErrorHandlingGroup",
    "OptionsOpt",
    "UrlOpt",
    "default_store_url",
    "err_console",
    "one_line",
    "open_cli_store",
    "out_console",
    "parse_pairs",
    "report_error",
    "resolve_url",
]

_PIPE_WIDTH = 200

#: Exit code of a command that failed with an :class:`S3StreamError`.
EXIT_ERROR = 1

UrlOpt = Annotated[str | None, typer.Option(
    "--url", envvar="S3STREAM_URL", show_default=False,
    help="Store URL: file:///ABS/DIR, s3://BUCKET/PREFIX?endpoint_url=...&region=..., memory://NAME. "
         "Default: the embedded store file://<user data dir>/s3stream/data.")]
OptionsOpt = Annotated[list[str] | None, typer.Option(
    "--option", "-o", metavar="KEY=VALUE", show_default=False,
    help="A store setting (e.g. flush.interval.ms=100, ack=s3, log.retention.hours=1); repeatable.")]


def err_console() -> Console:
    """A console on the current stderr (never wraps long lines, so an error stays one line)."""
    return Console(stderr=True, soft_wrap=True, highlight=False)


def out_console() -> Console:
    """A console on the current stdout, for tables and reports meant to be read.

    When stdout is not a terminal (a pipe, a file, a test), lines may be wide: truncating table
    cells there would lose the keys and numbers a script came for.
    """
    console = Console(highlight=False)
    return console if console.is_terminal else Console(highlight=False, width=_PIPE_WIDTH)


def one_line(text: str) -> str:
    """``text`` with newlines and runs of blanks collapsed, so a message is a single line."""
    return " ".join(text.split())


def report_error(exc: S3StreamError) -> None:
    """Print ``exc`` as one red line on stderr (its kind decides the prefix)."""
    if isinstance(exc, CorruptData):
        prefix = "corrupt data"
    elif isinstance(exc, Fenced):
        prefix = "fenced"
    else:
        prefix = "error"
    message = one_line(str(exc)) or type(exc).__name__
    err_console().print(f"[bold red]{prefix}:[/] [red]{escape(message)}[/]")


class ErrorHandlingGroup(typer.core.TyperGroup):
    """The root command group: turns S3StreamError from any subcommand into one red line and exit 1."""

    def invoke(self, ctx: Any) -> Any:  # typer's Context class lives in a private module
        try:
            return super().invoke(ctx)
        except S3StreamError as exc:
            report_error(exc)
            raise typer.Exit(EXIT_ERROR) from None


def default_store_url() -> str:
    """``file://<user data dir>/s3stream/data``: the embedded store of this user."""
    return (platformdirs.user_data_path() / "s3stream" / "data").as_uri()


def resolve_url(url: str | None) -> str:
    """``url``, or the embedded default store when it is None or empty."""
    return url if url else default_store_url()


def parse_pairs(items: Iterable[str] | None, *, flag: str) -> dict[str, str]:
    """``["k=v", ...]`` -> ``{"k": "v"}``; a malformed or repeated item raises InvalidConfig naming it."""
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InvalidConfig(f"{flag} {item!r}: expected KEY=VALUE", key=key or item)
        if key in out:
            raise InvalidConfig(f"{flag} {key!r} given twice", key=key)
        out[key] = value
    return out


@contextmanager
def open_cli_store(url: str | None, options: Iterable[str] | None, *, writes: bool = False,
                   **extra: Any) -> Iterator[Store]:
    """Open the store for one command (announcing it on stderr) and close it when the command ends.

    Args:
        url: the store URL (None: the embedded default).
        options: ``KEY=VALUE`` store settings.
        writes: the command appends records (produce, serve). Other commands get a private, empty
            local WAL directory (unless ``wal_dir`` is given): opening the shared one would replay a
            WAL an earlier process left, claim its partitions (epoch commits, fence objects) and then
            serve a stale writer's view instead of reading what other processes commit.
        extra: passed to :func:`s3stream.open_store` (``clock``, ``object_store``).
    """
    from s3stream.base.settings import StoreSettings, setting_name
    from s3stream.objectstore.url import display_url
    from s3stream.store import open_store

    resolved = resolve_url(url)
    settings = parse_pairs(options, flag="--option")
    StoreSettings.from_options(settings)  # reject unknown names first: never let one reach a parameter
    err_console().print(f"[dim]store: {escape(display_url(resolved))}[/]")
    with ExitStack() as stack:
        kwargs: dict[str, Any] = {**settings, **extra}
        if not writes and not any(setting_name(k) == "wal_dir" for k in settings):
            kwargs["wal_dir"] = stack.enter_context(tempfile.TemporaryDirectory(prefix="s3stream-reader-"))
        store = stack.enter_context(open_store(resolved, **kwargs))
        yield store
