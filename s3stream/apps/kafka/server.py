"""The asyncio Kafka server: framing, per-connection ordering, limits, and dispatch to the API handlers.

Per connection, requests are *started* one at a time in arrival order (so appends keep the client's
order) and responses are written in the same order, while replies that wait (:class:`~.api.Later`: an
acks=all produce, a long-poll fetch) let the next requests start: pipelining without reordering, bounded by
``max.inflight.requests.per.connection``. A frame over ``socket.request.max.bytes``, a header or body that
does not parse, a version outside the advertised range, or a request before SASL authentication closes
that connection only (as Kafka does); the server and other connections go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import threading
from collections.abc import Awaitable
from typing import Any

from kio.schema.errors import ErrorCode

from s3stream.apps.kafka.api import ApiSpec, Later, RequestContext, Session
from s3stream.apps.kafka.broker import Broker
from s3stream.apps.kafka.config import BrokerConfig
from s3stream.apps.kafka.handlers import all_apis
from s3stream.apps.kafka.handlers.api_versions import api_versions_response
from s3stream.apps.kafka.wire import (
    API_VERSIONS_KEY,
    MalformedFrame,
    encode_response,
    peek_api,
    read_header_only,
    read_request,
    request_class,
)
from s3stream.base.errors import InvalidConfig
from s3stream.store import Store

__all__ = ["KafkaServer", "KafkaServerThread"]

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_CLOSE = object()


class KafkaServer:
    """One Kafka listener over an open store (the caller closes the store after :meth:`stop`)."""

    def __init__(self, store: Store, config: BrokerConfig | None = None) -> None:
        self.config = config or BrokerConfig()
        self.broker = Broker(store, self.config)
        self._apis: dict[int, ApiSpec] = {spec.api_key: spec for spec in all_apis()}
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.address: tuple[str, int] | None = None

    async def start(self) -> tuple[str, int]:
        """Bind (port 0 picks a free one), start the components; return the bound ``(host, port)``."""
        cfg = self.config
        try:
            self._server = await asyncio.start_server(self._on_connection, cfg.host, cfg.port, ssl=cfg.ssl_context,
                                                      limit=1 << 20, reuse_address=True)
        except OSError as exc:
            raise InvalidConfig(f"cannot listen on {cfg.host}:{cfg.port}: {exc.strerror or exc} (choose another "
                                "--listen address or port, 0 for any free one)", key="listen") from exc
        host, port = self._server.sockets[0].getsockname()[:2]
        self.address = (host, port)
        if cfg.advertised_port is None and cfg.port == 0:  # tell clients the port actually bound
            from dataclasses import replace

            self.config = replace(cfg, advertised_port=port)
            self.broker.config = self.config
        await self.broker.start()
        log.info("Kafka listener on %s:%d (advertised %s:%d)", host, port, *self.config.advertised)
        return self.address

    async def serve_forever(self) -> None:
        assert self._server is not None, "start() first"
        await self._server.serve_forever()

    async def stop(self) -> None:
        """Stop accepting, close every connection, close the components."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        await self.broker.close()

    # -- connections -------------------------------------------------------------------------------

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        metrics = self.broker.metrics
        if len(self._connections) >= self.config.max_connections:
            metrics.connections_rejected.labels("max_connections").inc()
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        metrics.connections_total.inc()
        metrics.connections.inc()
        peer = writer.get_extra_info("peername")
        session = Session(peer=f"{peer[0]}:{peer[1]}" if peer else "?",
                          tls=writer.get_extra_info("sslcontext") is not None,
                          authenticated=not self.config.sasl_enabled_mechanisms)
        replies: asyncio.Queue[Any] = asyncio.Queue(self.config.max_inflight_requests_per_connection)
        sender = asyncio.create_task(self._send_loop(replies, writer, session))
        try:
            await self._read_loop(reader, replies, session)
        except MalformedFrame as exc:
            metrics.connections_rejected.labels("malformed").inc()
            log.warning("closing connection from %s: %s", session.peer, exc)
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            pass
        except asyncio.CancelledError:  # stop(): end quietly (a cancelled connection task makes 3.11's
            sender.cancel()             # streams callback log a spurious error)
        finally:
            with contextlib.suppress(asyncio.QueueFull):
                replies.put_nowait(_CLOSE)
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(sender, timeout=30)
            sender.cancel()
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            metrics.connections.dec()
            self._connections.discard(task)

    async def _read_loop(self, reader: asyncio.StreamReader, replies: asyncio.Queue[Any], session: Session) -> None:
        idle_s = self.config.connections_max_idle_ms / 1000.0
        limit = self.config.socket_request_max_bytes
        while True:
            head = await asyncio.wait_for(reader.readexactly(4), idle_s)
            (size,) = _SIZE.unpack(head)
            if size < 0 or size > limit:
                raise MalformedFrame(f"a request of {size} bytes (socket.request.max.bytes is {limit})")
            frame = await reader.readexactly(size)
            self.broker.metrics.bytes_in.inc(size + 4)
            started = asyncio.get_running_loop().time()
            api, correlation, reply = await self._dispatch(frame, session)
            await replies.put((api, correlation, reply, started))

    async def _dispatch(self, frame: bytes, session: Session) -> tuple[str, int, Any]:
        key, version, correlation = peek_api(frame)
        spec = self._apis.get(key)
        if key == API_VERSIONS_KEY and spec is not None and version > spec.max_version:
            read_header_only(frame, flexible=version >= 3)  # KIP-511: answer in v0 with what we support
            return spec.name, correlation, api_versions_response(0, ErrorCode.unsupported_version)
        if spec is None or not spec.min_version <= version <= spec.max_version:
            raise MalformedFrame(f"unsupported API {key} v{version} (see ApiVersions)")
        cls = request_class(key, version)
        if cls is None:
            raise MalformedFrame(f"no schema for API {key} v{version}")
        request = read_request(frame, cls)
        if not session.authenticated and not spec.before_auth:
            raise MalformedFrame(f"{spec.name} before SASL authentication")
        self.broker.metrics.requests.labels(spec.name, str(version)).inc()
        ctx = RequestContext(key, version, correlation, request.client_id, session)
        try:
            reply = await spec.handler(self.broker, ctx, request.body)
        except MalformedFrame:
            raise
        except Exception as exc:
            log.exception("%s v%d from %s failed", spec.name, version, session.peer)
            raise MalformedFrame(f"{spec.name} failed: {type(exc).__name__}") from exc
        return spec.name, correlation, reply

    async def _send_loop(self, replies: asyncio.Queue[Any], writer: asyncio.StreamWriter, session: Session) -> None:
        metrics = self.broker.metrics
        loop = asyncio.get_running_loop()
        while True:
            item = await replies.get()
            if item is _CLOSE:
                return
            api, correlation, reply, started = item
            if isinstance(reply, Later):
                try:
                    reply = await _await(reply.reply)
                except Exception:
                    log.exception("%s from %s failed; closing the connection", api, session.peer)
                    writer.close()
                    return
            if reply is None:  # acks=0
                continue
            data = encode_response(correlation, reply)
            writer.write(data)
            metrics.bytes_out.inc(len(data))
            metrics.latency.labels(api).observe(loop.time() - started)
            await writer.drain()


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


class KafkaServerThread:
    """A :class:`KafkaServer` on its own event loop in a daemon thread (tests, ``s3stream serve``)."""

    def __init__(self, store: Store, config: BrokerConfig | None = None) -> None:
        self.server = KafkaServer(store, config)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="kafka-server", daemon=True)
        self.address: tuple[str, int] | None = None

    @property
    def bootstrap(self) -> str:
        """``host:port`` for clients' ``bootstrap.servers``."""
        host, port = self.server.config.advertised
        return f"{host}:{port}"

    def start(self) -> tuple[str, int]:
        self._thread.start()
        try:
            self.address = asyncio.run_coroutine_threadsafe(self.server.start(), self._loop).result()
        except BaseException:
            self.stop()
            raise
        return self.address

    def run_coroutine(self, coro: Any, timeout: float | None = 60) -> Any:
        """Run ``coro`` on the server's loop and wait for its result (tests drive components this way)."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self.server.stop(), self._loop).result(60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(60)
        self._loop.close()

    def __enter__(self) -> KafkaServerThread:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
