"""``s3stream serve`` and ``s3stream quickstart``: the long-running and the guided commands.

Both are thin: the loop lives in :mod:`s3stream.apps.serve` (:class:`~s3stream.apps.serve.ServeLoop`) and the tour
in :mod:`s3stream.apps.quickstart`, so tests and other front ends drive them without a terminal.
``serve`` stops on SIGINT or SIGTERM (the handlers only set an event; the loop then closes cleanly).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Annotated

import typer
from rich.console import Console
from rich.logging import RichHandler

from s3stream.apps.cli.common import OptionsOpt, UrlOpt, err_console, open_cli_store, out_console, parse_pairs

__all__ = ["quickstart", "serve"]

_LOG_WIDTH = 200


@contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """Set ``stop`` on SIGINT/SIGTERM while inside (main thread only; elsewhere, nothing to install)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _configure_logging() -> None:
    """INFO logs of the store on stderr (wide lines when stderr is a file: logs are grepped, not read)."""
    root = logging.getLogger("s3stream")
    if not any(isinstance(h, RichHandler) for h in root.handlers):
        console = err_console()
        if not console.is_terminal:
            console = Console(stderr=True, highlight=False, width=_LOG_WIDTH)
        root.addHandler(RichHandler(console=console, show_path=False))
    root.setLevel(logging.INFO)


def serve(
    metrics_port: Annotated[int, typer.Option(
        "--metrics-port", min=0, max=65535, help="Port of /metrics (0: any free port).")] = 9100,
    metrics_host: Annotated[str, typer.Option(
        "--metrics-host", help="Address to bind /metrics to.")] = "127.0.0.1",
    no_metrics: Annotated[bool, typer.Option("--no-metrics", help="Do not serve /metrics.")] = False,
    gc_interval_ms: Annotated[int, typer.Option(
        "--gc-interval-ms", min=1, help="How often garbage collection runs.")] = 60_000,
    once: Annotated[bool, typer.Option("--once", help="Run one iteration of every task, then exit.")] = False,
    url: UrlOpt = None,
    option: OptionsOpt = None,
) -> None:
    """Run the store's background work (flush, seal, retention, GC) and serve its Prometheus metrics."""
    from s3stream.apps.serve import ServeLoop

    _configure_logging()
    stop = threading.Event()
    if once:
        stop.set()
    with open_cli_store(url, option, writes=True) as store:
        loop = ServeLoop(store, metrics_port=None if no_metrics else metrics_port, metrics_host=metrics_host,
                         gc_interval_ms=gc_interval_ms)
        if not once:
            err_console().print("serving; press Ctrl-C (or send SIGTERM) to stop")
        with _stop_on_signals(stop):
            loop.run(stop)
    err_console().print(f"stopped after {loop.iterations} iteration(s); store closed")


def quickstart(
    records: Annotated[int, typer.Option("--records", "-n", min=1, help="Records to produce.")] = 20_000,
    keep: Annotated[bool, typer.Option("--keep", help="Keep the temporary store (prints its path).")] = False,
    url: Annotated[str | None, typer.Option(
        "--url", show_default=False, help="Run on this store instead of a fresh temporary one.")] = None,
    option: OptionsOpt = None,
) -> None:
    """A one-minute tour: create, produce, consume and verify, roll, and show what landed in the bucket."""
    from s3stream.apps.quickstart import run_quickstart
    from s3stream.base.settings import StoreSettings

    settings = parse_pairs(option, flag="--option")
    StoreSettings.from_options(settings)
    if url:
        from s3stream.objectstore.url import display_url

        err_console().print(f"[dim]store: {display_url(url)}[/]")
    else:
        err_console().print("[dim]store: a fresh temporary embedded store[/]")
    run_quickstart(url, records=records, console=out_console(), keep=keep, options=settings)
