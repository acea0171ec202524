"""Servers bind to 127.0.0.1 unless told otherwise: the metrics endpoint of ``serve`` (ServeLoop and the CLI
flag), the Kafka listener (BrokerConfig, a listener without a host, ``serve --listen``), ``local-stack``,
and the S3 servers the tests and benchmarks start. Checked on the sockets actually bound, not only on the
defaults' text."""

from __future__ import annotations

import inspect
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer

import s3stream
from s3stream.apps import servers
from s3stream.apps.cli import app
from s3stream.apps.kafka.config import BrokerConfig, parse_listener
from s3stream.apps.kafka.server import KafkaServerThread
from s3stream.apps.serve import ServeLoop

LOOPBACK = "127.0.0.1"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[s3stream.Store]:
    with s3stream.open_store((tmp_path / "data").as_uri(), wal_dir=str(tmp_path / "wal"), probe=False) as opened:
        yield opened


def _commands(group: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every leaf command under ``group`` (typer's click, whichever module provides it: duck-typed)."""
    ctx = type(group).context_class(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        if hasattr(command, "list_commands"):
            yield from _commands(command, f"{prefix}{name} ")
        else:
            yield f"{prefix}{name}", command


def test_every_cli_address_option_defaults_to_loopback() -> None:
    """Any option naming a host, listener or bind address, on any command, defaults to 127.0.0.1."""
    found: dict[str, Any] = {}
    for name, command in _commands(typer.main.get_command(app)):
        for param in command.params:
            if param.param_type_name == "option" and any(w in opt for opt in param.opts
                                                         for w in ("host", "listen", "bind")):
                found[f"{name} {param.opts[0]}"] = param.default
    assert "serve --metrics-host" in found
    for where, default in found.items():
        if default is None:
            continue  # unset: the component's own default applies (checked below)
        host = parse_listener(default)[0] if ":" in str(default) else str(default)
        assert host == LOOPBACK, (where, default)


def test_the_metrics_endpoint_binds_loopback(store: s3stream.Store) -> None:
    assert inspect.signature(ServeLoop).parameters["metrics_host"].default == LOOPBACK
    loop = ServeLoop(store, metrics_port=0)
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop,))
    thread.start()
    try:
        for _ in range(400):
            if loop.metrics_address is not None:
                break
            threading.Event().wait(0.025)
        httpd = loop._httpd
        assert httpd is not None
        bound = httpd.socket.getsockname()
        assert bound[0] == LOOPBACK
        with socket.create_connection((LOOPBACK, bound[1]), timeout=5):
            pass
    finally:
        stop.set()
        thread.join(30)


def test_the_kafka_listener_binds_loopback(store: s3stream.Store) -> None:
    assert BrokerConfig().host == LOOPBACK
    for listener in (":9092", "PLAINTEXT://:9092", "[]:9092"):
        assert parse_listener(listener) == (LOOPBACK, 9092)
    with KafkaServerThread(store, BrokerConfig(port=0)) as server:
        assert server.address is not None and server.address[0] == LOOPBACK
        sockets = server.server._server.sockets  # type: ignore[union-attr]
        assert sockets and all(s.getsockname()[0] == LOOPBACK for s in sockets)
        assert server.bootstrap.startswith(f"{LOOPBACK}:")


def test_the_test_s3_servers_bind_loopback(tmp_path: Path) -> None:
    command = servers._weed_command("weed", tmp_path, dict.fromkeys(servers._WEED_COMPONENTS, 1))
    assert f"-ip={LOOPBACK}" in command and f"-ip.bind={LOOPBACK}" in command
    assert not any("0.0.0.0" in part for part in command)
    with servers.moto_server() as endpoint:
        assert endpoint.startswith(f"http://{LOOPBACK}:")
