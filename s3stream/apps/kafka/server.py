"""The asyncio Kafka server: the listener, its connections, and dispatch to the API handlers.

Each accepted connection is a :class:`~.connection.Connection` (framing without copies, arrival-order
dispatch, in-order responses, the per-connection limits). Per connection, requests are *started* one at a
time in arrival order (so appends keep the client's order) and responses are written in the same order,
while replies that wait (:class:`~.api.Later`: an acks=all produce, a long-poll fetch) let the next requests
start: pipelining without reordering, bounded by ``max.inflight.requests.per.connection``. A frame over
``socket.request.max.bytes``, a header or body that does not parse, a version outside the advertised range,
or a request before SASL authentication closes that connection only (as Kafka does); the server and other
connections go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import threading
from typing import Any

from s3stream.apps.kafka.api import ApiSpec
from s3stream.apps.kafka.broker import Broker
from s3stream.apps.kafka.config import BrokerConfig
from s3stream.apps.kafka.connection import Connection
from s3stream.apps.kafka.handlers import all_apis
from s3stream.base.errors import InvalidConfig
from s3stream.store import Store

__all__ = ["KafkaServer", "KafkaServerThread"]

log = logging.getLogger(__name__)


class KafkaServer:
    """One Kafka listener over an open store (the caller closes the store after :meth:`stop`)."""

    def __init__(self, store: Store, config: BrokerConfig | None = None) -> None:
        self.config = config or BrokerConfig()
        self.broker = Broker(store, self.config)
        self.apis: dict[int, ApiSpec] = {spec.api_key: spec for spec in all_apis()}
        self.connections: set[Connection] = set()
        self._server: asyncio.Server | None = None
        self._request_counters: dict[tuple[int, int], Any] = {}
        self._latencies: dict[str, Any] = {}
        self.address: tuple[str, int] | None = None

    async def start(self) -> tuple[str, int]:
        """Bind (port 0 picks a free one), start the components; return the bound ``(host, port)``."""
        cfg = self.config
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(lambda: Connection(self), cfg.host, cfg.port,
                                                    ssl=cfg.ssl_context, reuse_address=True)
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
        # The data path allocates ~1000 objects per produced batch, so the cyclic collector runs often; each full
        # collection walked the whole startup heap (imports, schemas, the store): ~60 ms with every thread
        # stopped, ~10% of a produce run. Frozen, that heap is skipped (refcounting still frees it).
        gc.freeze()
        log.info("Kafka listener on %s:%d (advertised %s:%d)", host, port, *self.config.advertised)
        return self.address

    async def serve_forever(self) -> None:
        assert self._server is not None, "start() first"
        await self._server.serve_forever()

    async def stop(self) -> None:
        """Stop accepting, close every connection, close the components."""
        if self._server is not None:
            self._server.close()
        tasks = [task for conn in list(self.connections) for task in conn.tasks]
        for conn in list(self.connections):
            conn.abort()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
        await self.broker.close()
        gc.unfreeze()

    # -- metrics (the labelled children, looked up once) ------------------------------------------------

    def count_request(self, key: int, version: int) -> None:
        counter = self._request_counters.get((key, version))
        if counter is None:
            counter = self._request_counters[(key, version)] = self.broker.metrics.requests.labels(
                self.apis[key].name, str(version))
        counter.inc()

    def latency(self, api: str) -> Any:
        found = self._latencies.get(api)
        if found is None:
            found = self._latencies[api] = self.broker.metrics.latency.labels(api)
        return found


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
