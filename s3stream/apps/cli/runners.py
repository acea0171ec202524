"""``s3stream serve`` and ``s3stream quickstart``: the long-running and the guided commands.

Both are thin: the loop lives in :mod:`s3stream.apps.serve` (:class:`~s3stream.apps.serve.ServeLoop`), the Kafka
listener in :mod:`s3stream.apps.kafka.server` (its own event loop thread, beside the maintenance loop) and the
tour in :mod:`s3stream.apps.quickstart`, so tests and other front ends drive them without a terminal.
``serve`` checks every listener flag (addresses, TLS files, SASL mechanisms) before it opens the store, prints
the bootstrap address on stderr, and stops on SIGINT or SIGTERM (the handlers only set an event; the Kafka
listener then stops, then the store closes).
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.logging import RichHandler

from s3stream.apps.cli.common import OptionsOpt, UrlOpt, err_console, open_cli_store, out_console, parse_pairs
from s3stream.apps.kafka.config import DEFAULT_PORT
from s3stream.base.allocator import tune_allocator
from s3stream.base.errors import InvalidConfig

if TYPE_CHECKING:
    from s3stream.apps.kafka.config import BrokerConfig
    from s3stream.store import Store

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


def _broker_config(listen: str, advertised: str | None, kafka_options: list[str] | None,
                   ssl_files: tuple[Path | None, Path | None, Path | None], sasl_users: Path | None,
                   sasl_mechanisms: str | None) -> BrokerConfig:
    """The Kafka listener's settings from serve's flags; InvalidConfig for any bad one, before the store opens."""
    from s3stream.apps.kafka.config import BrokerConfig, parse_listener
    from s3stream.apps.kafka.security import MECHANISMS, parse_mechanisms, server_ssl_context

    host, port = parse_listener(listen, what="--listen")
    config = BrokerConfig(host=host, port=port)
    if advertised:
        a_host, a_port = parse_listener(advertised, what="--advertised-listener")
        config = replace(config, advertised_host=a_host, advertised_port=a_port)
    elif host in ("0.0.0.0", "::", ""):  # wildcard: advertise a name clients can reach, as Kafka does
        config = replace(config, advertised_host=socket.getfqdn())
    config = config.with_options(parse_pairs(kafka_options, flag="--kafka-option"))
    certfile, keyfile, cafile = ssl_files
    if certfile is not None:
        config = replace(config, ssl_context=server_ssl_context(certfile, keyfile, cafile))
    elif keyfile is not None or cafile is not None:
        raise InvalidConfig("--ssl-keyfile and --ssl-cafile need --ssl-certfile", key="ssl.certfile")
    if sasl_mechanisms is not None:
        config = replace(config, sasl_enabled_mechanisms=parse_mechanisms(sasl_mechanisms))
    elif sasl_users is not None and not config.sasl_enabled_mechanisms:
        config = replace(config, sasl_enabled_mechanisms=MECHANISMS)
    if sasl_users is not None:
        try:  # fail before the store opens; the server reads it when it starts
            sasl_users.open("rb").close()
        except OSError as exc:
            raise InvalidConfig(f"cannot read the SASL users file {sasl_users}: {exc.strerror or exc}",
                                key="sasl.users.file") from None
        config = replace(config, sasl_users_file=str(sasl_users))
    mechanisms = parse_mechanisms(config.sasl_enabled_mechanisms)
    if mechanisms and not config.sasl_users_file:
        raise InvalidConfig("--sasl-mechanisms needs --sasl-users FILE", key="sasl.users.file")
    if config.sasl_users_file and not mechanisms:
        raise InvalidConfig("--sasl-users needs at least one mechanism in --sasl-mechanisms",
                            key="sasl.enabled.mechanisms")
    if "PLAIN" in mechanisms and config.ssl_context is None:
        err_console().print("[yellow]warning: SASL PLAIN without TLS sends passwords in clear text; "
                            "add --ssl-certfile or use SCRAM only[/]")
    return replace(config, sasl_enabled_mechanisms=mechanisms)


def _describe(config: BrokerConfig) -> str:
    """The listener's security for humans (``SASL_SSL (PLAIN, SCRAM-SHA-256)``), never a secret."""
    tls = config.ssl_context is not None
    if config.sasl_enabled_mechanisms:
        return f"{'SASL_SSL' if tls else 'SASL_PLAINTEXT'} ({', '.join(config.sasl_enabled_mechanisms)})"
    return "SSL" if tls else "PLAINTEXT"


def serve(
    metrics_port: Annotated[int, typer.Option(
        "--metrics-port", min=0, max=65535, help="Port of /metrics (0: any free port).")] = 9100,
    metrics_host: Annotated[str, typer.Option(
        "--metrics-host", help="Address to bind /metrics to.")] = "127.0.0.1",
    no_metrics: Annotated[bool, typer.Option("--no-metrics", help="Do not serve /metrics.")] = False,
    gc_interval_ms: Annotated[int, typer.Option(
        "--gc-interval-ms", min=1, help="How often garbage collection runs.")] = 60_000,
    once: Annotated[bool, typer.Option(
        "--once", help="Run one iteration of every task, then exit (no Kafka listener).")] = False,
    listen: Annotated[str, typer.Option(
        "--listen", metavar="HOST:PORT",
        help="Address of the Kafka listener (port 0: any free port).")] = f"127.0.0.1:{DEFAULT_PORT}",
    advertised_listener: Annotated[str | None, typer.Option(
        "--advertised-listener", metavar="HOST:PORT", show_default=False,
        help="The address clients are told to connect to (default: --listen; this host's name when "
             "--listen is a wildcard address).")] = None,
    no_kafka: Annotated[bool, typer.Option(
        "--no-kafka", help="Do not run the Kafka listener (maintenance and metrics only).")] = False,
    kafka_option: Annotated[list[str] | None, typer.Option(
        "--kafka-option", "-k", metavar="KEY=VALUE", show_default=False,
        help="A Kafka server setting (e.g. auto.create.topics.enable=false, kafka.acks.all=wal, "
             "num.partitions=3); repeatable.")] = None,
    ssl_certfile: Annotated[Path | None, typer.Option(
        "--ssl-certfile", dir_okay=False, show_default=False,
        help="PEM certificate chain: the listener speaks TLS.")] = None,
    ssl_keyfile: Annotated[Path | None, typer.Option(
        "--ssl-keyfile", dir_okay=False, show_default=False,
        help="PEM private key (unencrypted), if not in --ssl-certfile.")] = None,
    ssl_cafile: Annotated[Path | None, typer.Option(
        "--ssl-cafile", dir_okay=False, show_default=False,
        help="PEM CA certificates: clients must present a certificate they signed.")] = None,
    sasl_users: Annotated[Path | None, typer.Option(
        "--sasl-users", dir_okay=False, show_default=False,
        help="Clients must log in with SASL as one of these users: a file of user:password lines (# comments; "
             "keep it chmod 600).")] = None,
    sasl_mechanisms: Annotated[str | None, typer.Option(
        "--sasl-mechanisms", metavar="LIST", show_default=False,
        help="SASL mechanisms, comma-separated (default with --sasl-users: PLAIN,SCRAM-SHA-256,SCRAM-SHA-512).")]
        = None,
    url: UrlOpt = None,
    option: OptionsOpt = None,
) -> None:
    """Serve Kafka clients and run the store's background work (flush, seal, retention, GC) and metrics."""
    from s3stream.apps.serve import ServeLoop

    _configure_logging()
    kafka = None if no_kafka or once else _broker_config(
        listen, advertised_listener, kafka_option, (ssl_certfile, ssl_keyfile, ssl_cafile), sasl_users,
        sasl_mechanisms)
    if kafka is not None:
        tune_allocator(request_buffers=True)  # requests' blocks reused, not mmapped afresh (see the module)
    stop = threading.Event()
    if once:
        stop.set()
    with open_cli_store(url, option, writes=True) as store, _kafka_listener(store, kafka):
        loop = ServeLoop(store, metrics_port=None if no_metrics else metrics_port, metrics_host=metrics_host,
                         gc_interval_ms=gc_interval_ms)
        if not once:
            err_console().print("serving; press Ctrl-C (or send SIGTERM) to stop")
        with _stop_on_signals(stop):
            loop.run(stop)
    err_console().print(f"stopped after {loop.iterations} iteration(s); store closed")


@contextmanager
def _kafka_listener(store: Store, config: BrokerConfig | None) -> Iterator[None]:
    """The Kafka server over ``store`` while inside (nothing when ``config`` is None); stopped before the store."""
    if config is None:
        yield
        return
    from s3stream.apps.kafka.server import KafkaServerThread

    server = KafkaServerThread(store, config)
    host, port = server.start()
    try:
        err_console().print(f"Kafka listener on {host}:{port}, {_describe(server.server.config)}; "
                            f"bootstrap.servers={server.bootstrap}")
        yield
    finally:
        server.stop()


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
