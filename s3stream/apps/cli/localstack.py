"""``s3stream local-stack``: SeaweedFS plus ``s3stream serve`` on 127.0.0.1, in one command, no Docker.

Thin: the stack lives in :mod:`s3stream.apps.localstack` (:class:`~s3stream.apps.localstack.LocalStack`). This
command prints how to connect on stdout (the store URL, the credentials to export, the Kafka bootstrap address,
the metrics URL and example commands), progress on stderr, and stops everything on SIGINT (Ctrl-C) or SIGTERM:
the signal handlers only ask the stack to stop; stopping and reaping happen on the main thread, in ``finally``,
so an error or an interrupt during startup leaves nothing running either.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Annotated

import platformdirs
import typer
from rich.markup import escape

from s3stream.apps.cli.common import OptionsOpt, err_console, parse_pairs
from s3stream.apps.localstack import (
    DEFAULT_BUCKET,
    DEFAULT_KAFKA_PORT,
    DEFAULT_METRICS_PORT,
    DEFAULT_REGION,
    DEFAULT_S3_PORT,
    LocalStack,
    LocalStackError,
    LocalStackInfo,
)

__all__ = ["connection_text", "default_stack_dir", "local_stack"]


def default_stack_dir() -> Path:
    """``<user data dir>/s3stream/local-stack``: where the stack keeps its data between runs."""
    return platformdirs.user_data_path() / "s3stream" / "local-stack"


def connection_text(info: LocalStackInfo) -> str:
    """How to use a started stack: addresses, pids, logs, the exports and example commands (shell-quoted)."""
    exports = "\n".join(f"  export {k}={v}" for k, v in info.credentials_env().items())
    logs = info.directory
    listener = kafka = ""
    if info.kafka_bootstrap:
        listener = f"  Kafka listener   {info.kafka_bootstrap}   (bootstrap.servers, PLAINTEXT)\n"
        kafka = ("  Kafka clients (the topic is created on first use):\n"
                 f"  echo 'k1:v1' | kcat -b {info.kafka_bootstrap} -t demo -K: -P\n"
                 f"  kcat -b {info.kafka_bootstrap} -t demo -C -e\n\n")
    return (
        f"s3stream local stack is running (data in {logs})\n\n"
        f"  SeaweedFS S3     {info.endpoint_url}   pid {info.weed_pid}   log {logs / 'weed.log'}\n"
        f"  s3stream serve   {info.metrics_url}   pid {info.serve_pid}   log {logs / 'serve.log'}\n"
        f"{listener}\n"
        f"Connect from another shell:\n\n{exports}\n"
        f"  export S3STREAM_URL='{info.store_url}'\n\n"
        "  s3stream topic create demo --partitions 3\n"
        "  echo '{\"key\": \"k1\", \"value\": \"v1\"}' | s3stream produce demo --format jsonl\n"
        "  s3stream consume demo --from-beginning\n\n"
        "  From Python: s3stream.open_store(url), with the store URL above.\n\n"
        f"{kafka}"
        "Press Ctrl-C to stop (or send SIGTERM); the data stays in the directory.")


@contextmanager
def _on_stop_signals(callback: Callable[[], None]) -> Iterator[None]:
    """Call ``callback`` on SIGINT/SIGTERM while inside (main thread only; elsewhere nothing is installed)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        callback()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def local_stack(
    directory: Annotated[Path | None, typer.Option(
        "--dir", file_okay=False, show_default=False,
        help="Stack directory (data, logs, serve's WAL). Default: <user data dir>/s3stream/local-stack.")] = None,
    s3_port: Annotated[int, typer.Option(
        "--s3-port", "--port", min=0, max=55535,
        help="SeaweedFS S3 port (0: any free port; the port + 10000 must be free too).")] = DEFAULT_S3_PORT,
    metrics_port: Annotated[int, typer.Option(
        "--metrics-port", min=0, max=65535,
        help="Port of serve's /metrics (0: any free port).")] = DEFAULT_METRICS_PORT,
    kafka_port: Annotated[int, typer.Option(
        "--kafka-port", min=0, max=65535,
        help="Port of serve's Kafka listener on 127.0.0.1 (0: any free port).")] = DEFAULT_KAFKA_PORT,
    bucket: Annotated[str, typer.Option("--bucket", help="Bucket of the store.")] = DEFAULT_BUCKET,
    region: Annotated[str, typer.Option("--region", help="Region in the store URL.")] = DEFAULT_REGION,
    option: OptionsOpt = None,
) -> None:
    """Run SeaweedFS and `s3stream serve` (with its Kafka listener) on 127.0.0.1, no Docker, until Ctrl-C."""
    from s3stream.base.settings import StoreSettings

    StoreSettings.from_options(parse_pairs(option, flag="--option"))  # reject a bad option before starting
    stack = LocalStack(directory or default_stack_dir(), s3_port=s3_port, metrics_port=metrics_port,
                       kafka_port=kafka_port, bucket=bucket, region=region, serve_options=option or ())
    err = err_console()
    err.print(f"[dim]starting SeaweedFS and s3stream serve in {escape(str(stack.directory))} ...[/]")
    interrupted = threading.Event()

    def on_signal() -> None:
        interrupted.set()
        stack.request_stop()

    with _on_stop_signals(on_signal):
        try:
            info = stack.start()
            typer.echo(connection_text(info))
            problem = stack.wait()
        except LocalStackError:
            if not interrupted.is_set():
                raise
            problem = None  # Ctrl-C during startup: not an error
        finally:
            stack.stop()
    if problem is not None:
        raise LocalStackError(problem)
    err.print("stopped SeaweedFS and s3stream serve; nothing left running")
