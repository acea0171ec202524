"""One client connection: frames in, requests dispatched in arrival order, responses out in the same order.

Reading is an asyncio ``BufferedProtocol`` (plain or TLS transports alike): the transport receives straight
into this connection's buffer, and a frame larger than that buffer straight into a bytearray of its own, so
a 1 MB produce request is never copied between arrival and parsing (no ``StreamReader``, no task wake-up per
chunk). Complete frames queue for the *dispatcher*, which starts them one at a time in arrival order (a
handler's append keeps the client's order); replies queue for the *sender*, which awaits each
:class:`~.api.Later` in turn and writes every response in request order, spliced from kio's header bytes and
the record buffers a fetch returns (:func:`~.wire.encode_response_chunks`).

Limits: a frame over ``socket.request.max.bytes`` or that does not parse closes the connection after the
responses already due; ``max.inflight.requests.per.connection`` frames, or ``max.inflight.bytes.per.connection``
bytes of them, taken and not yet answered pause reading (pipelining without unbounded memory); no bytes in or
out for ``connections.max.idle.ms`` with nothing in progress closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from s3stream.apps.kafka.api import Later, RequestContext, Session
from s3stream.apps.kafka.handlers.api_versions import api_versions_response
from s3stream.apps.kafka.wire import (
    API_VERSIONS_KEY,
    MalformedFrame,
    encode_response_chunks,
    peek_api,
    read_header_only,
    read_request,
    request_class,
)

if TYPE_CHECKING:
    from s3stream.apps.kafka.server import KafkaServer

__all__ = ["Connection"]

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
#: the receive buffer: small requests are parsed from it in place; a larger frame gets a buffer of its own
RECV_BYTES = 256 * 1024
_COMPACT_BELOW = 16 * 1024  # free space left at the end of the buffer before its contents move to the front
_CLOSE = object()


class Connection(asyncio.BufferedProtocol):
    """The protocol instance of one accepted connection (see the module docstring)."""

    def __init__(self, server: KafkaServer) -> None:
        self._server = server
        cfg = server.config
        self._max_frame = cfg.socket_request_max_bytes
        self._max_inflight = cfg.max_inflight_requests_per_connection
        self._max_inflight_bytes = cfg.max_inflight_bytes_per_connection
        # read again well below the bounds, not one pause and one resume per request
        self._resume_at = self._max_inflight - 1 - self._max_inflight // 4
        self._resume_bytes = self._max_inflight_bytes - self._max_inflight_bytes // 4
        self._idle_s = cfg.connections_max_idle_ms / 1000.0
        self._metrics = server.broker.metrics
        self._buf = bytearray(RECV_BYTES)
        self._view = memoryview(self._buf)
        self._start = self._end = 0  # unparsed bytes of self._buf
        self._big: memoryview | None = None  # the frame being received into its own buffer
        self._big_got = 0
        self._outstanding = 0  # frames taken and not yet answered
        self._outstanding_bytes = 0  # their sizes
        self._reading_paused = False
        self._write_paused: asyncio.Future[None] | None = None
        self._taking = True  # False once the connection takes no more frames (bad input, EOF, closing)
        self._frames: asyncio.Queue[Any] = asyncio.Queue()
        self._replies: asyncio.Queue[Any] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._last_active = self._loop.time()
        self._idle: asyncio.TimerHandle | None = None
        self._counted = False
        self.session = Session(peer="?")

    # -- transport callbacks -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        server = self._server
        if len(server.connections) >= server.config.max_connections:
            self._metrics.connections_rejected.labels("max_connections").inc()
            self._taking = False
            transport.close()
            return
        server.connections.add(self)
        self._counted = True
        self._metrics.connections_total.inc()
        self._metrics.connections.inc()
        peer = transport.get_extra_info("peername")
        self.session = Session(peer=f"{peer[0]}:{peer[1]}" if peer else "?",
                               tls=transport.get_extra_info("sslcontext") is not None,
                               authenticated=not server.config.sasl_enabled_mechanisms)
        self._tasks = [self._loop.create_task(self._dispatch_loop()), self._loop.create_task(self._send_loop())]
        self._idle = self._loop.call_later(self._idle_s, self._check_idle)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._big is not None:
            return self._big[self._big_got:]
        if len(self._buf) - self._end < _COMPACT_BELOW and self._start:
            self._compact()
        if self._end == len(self._buf):  # full of frames not taken yet (a transport that reads while paused)
            self._view.release()
            self._buf.extend(bytes(len(self._buf)))
            self._view = memoryview(self._buf)
        return self._view[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        self._last_active = self._loop.time()
        if self._big is not None:
            self._big_got += nbytes
            if self._big_got == len(self._big):
                frame = self._big.toreadonly()  # kio's parser takes read-only buffers
                self._big = None
                self._deliver(frame, len(frame))
            else:
                return
        else:
            self._end += nbytes
        self._take_frames()

    def eof_received(self) -> bool:
        self._stop_taking()
        # keep a plain transport open: the responses already due are still sent, then it closes (TLS cannot)
        return not self.session.tls

    def pause_writing(self) -> None:
        if self._write_paused is None:
            self._write_paused = self._loop.create_future()

    def resume_writing(self) -> None:
        waiter, self._write_paused = self._write_paused, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self._taking = False
        self.resume_writing()
        if self._idle is not None:
            self._idle.cancel()
        for task in self._tasks:
            task.cancel()
        if self._counted:
            self._counted = False
            self._metrics.connections.dec()
            self._server.connections.discard(self)

    # -- framing -----------------------------------------------------------------------------------

    def _compact(self) -> None:
        """Move the unparsed bytes to the front of the buffer."""
        n = self._end - self._start
        self._buf[:n] = self._view[self._start:self._end]
        self._start, self._end = 0, n

    def _take_frames(self) -> None:
        """Queue every complete frame in the buffer (while under the in-flight bound)."""
        buf, view = self._buf, self._view
        while self._taking and not self._full():
            start = self._start
            available = self._end - start
            if available < 4:
                break
            (size,) = _SIZE.unpack_from(buf, start)
            if size < 0 or size > self._max_frame:
                self._malformed(MalformedFrame(f"a request of {size} bytes (socket.request.max.bytes is "
                                               f"{self._max_frame})"))
                return
            if available - 4 < size:
                if size + 4 > len(buf):  # receive the rest of this frame straight into a buffer of its own
                    big = bytearray(size)
                    got = available - 4
                    big[:got] = view[start + 4:self._end]
                    self._big, self._big_got = memoryview(big), got
                    self._start = self._end = 0
                break
            self._start = start + 4 + size
            self._deliver(bytes(view[start + 4:self._start]), size)
        if self._start == self._end:
            self._start = self._end = 0
        if self._full() and not self._reading_paused and self._transport is not None:
            self._reading_paused = True
            self._transport.pause_reading()

    def _full(self) -> bool:
        """At a bound of frames in flight (one frame is always taken, however large)."""
        return self._outstanding >= self._max_inflight or (
            self._outstanding_bytes >= self._max_inflight_bytes and self._outstanding > 0)

    def _deliver(self, frame: bytes | memoryview, size: int) -> None:
        self._outstanding += 1
        self._outstanding_bytes += size
        self._metrics.bytes_in.inc(size + 4)
        self._frames.put_nowait((frame, size, self._loop.time()))

    def _answered(self, size: int) -> None:
        """One response was written (or needs none): take the frames waiting, read again when paused."""
        self._outstanding -= 1
        self._outstanding_bytes -= size
        self._last_active = self._loop.time()
        if self._reading_paused and self._outstanding <= self._resume_at and (
                self._outstanding_bytes <= self._resume_bytes):
            self._take_frames()
            if not self._full() and self._transport is not None and self._taking:
                self._reading_paused = False
                self._transport.resume_reading()

    def _stop_taking(self) -> None:
        """Take no more frames; the dispatcher finishes those queued, the sender their responses, then close."""
        if self._taking:
            self._taking = False
            self._frames.put_nowait(_CLOSE)
            if not self._reading_paused and self._transport is not None and not self._transport.is_closing():
                self._reading_paused = True
                with contextlib.suppress(Exception):
                    self._transport.pause_reading()

    def _malformed(self, exc: MalformedFrame) -> None:
        self._metrics.connections_rejected.labels("malformed").inc()
        log.warning("closing connection from %s: %s", self.session.peer, exc)
        self._stop_taking()

    def _check_idle(self) -> None:
        idle_for = self._loop.time() - self._last_active
        if self._outstanding == 0 and idle_for >= self._idle_s and self._transport is not None:
            self._stop_taking()
            return
        self._idle = self._loop.call_later(max(self._idle_s - idle_for, self._idle_s / 10), self._check_idle)

    # -- dispatch and responses --------------------------------------------------------------------

    async def _dispatch_loop(self) -> None:
        server = self._server
        try:
            while (item := await self._frames.get()) is not _CLOSE:
                frame, size, started = item
                api, correlation, reply = await dispatch(server, frame, self.session)
                self._replies.put_nowait((api, correlation, reply, size, started))
        except MalformedFrame as exc:
            self._malformed(exc)
        self._replies.put_nowait(_CLOSE)

    async def _send_loop(self) -> None:
        transport = self._transport
        assert transport is not None
        metrics = self._metrics
        latency = self._server.latency
        try:
            while (item := await self._replies.get()) is not _CLOSE:
                api, correlation, reply, size, started = item
                if isinstance(reply, Later):
                    try:
                        reply = await reply.reply
                    except Exception:
                        log.exception("%s from %s failed; closing the connection", api, self.session.peer)
                        break
                if reply is not None:  # None: acks=0, no response
                    chunks = encode_response_chunks(correlation, reply)
                    metrics.bytes_out.inc(sum(len(c) for c in chunks))  # counted before the client can see it
                    latency(api).observe(self._loop.time() - started)
                    # one send for the whole response: a write per chunk was a syscall per batch (Python 3.11
                    # joins the chunks first, 3.12+ sends them with one sendmsg)
                    transport.writelines(chunks)
                self._answered(size)
                if self._write_paused is not None:
                    await self._write_paused
        finally:
            transport.close()

    def abort(self) -> None:
        """Close at once (the server stops)."""
        if self._transport is not None:
            self._transport.abort()

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        return self._tasks


async def dispatch(server: KafkaServer, frame: bytes | memoryview, session: Session) -> tuple[str, int, Any]:
    """Parse one request and run its handler; ``(API name, correlation id, reply)``. MalformedFrame on bad input."""
    key, version, correlation = peek_api(frame)
    spec = server.apis.get(key)
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
    server.count_request(key, version)
    ctx = RequestContext(key, version, correlation, request.client_id, session)
    try:
        reply = await spec.handler(server.broker, ctx, request.body)
    except MalformedFrame:
        raise
    except Exception as exc:
        log.exception("%s v%d from %s failed", spec.name, version, session.peer)
        raise MalformedFrame(f"{spec.name} failed: {type(exc).__name__}") from exc
    return spec.name, correlation, reply
