"""What a Kafka API handler is: the request context it gets, the reply it gives, and its advertised versions.

A handler is ``async def handle(broker, ctx, request) -> Reply``. It runs on the server's event loop, one
request of a connection at a time in arrival order, so work it *starts* before returning (an append queued
with ``append_arrow_async``) keeps the order the client sent. A reply that must wait (an acks=all produce,
a long-poll fetch) is returned as :class:`Later`: the server goes on reading the connection's next requests
and writes every response in request order. ``None`` sends no response (Produce with acks=0).

Blocking store calls never run on the loop: ``await broker.run_blocking(fn, ...)``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from s3stream.apps.kafka.broker import Broker

__all__ = ["ApiSpec", "Handler", "Later", "Reply", "RequestContext", "Session"]


@dataclass(slots=True)
class Session:
    """Per-connection state: who the peer is and whether SASL authentication is done."""

    peer: str
    tls: bool = False
    sasl_mechanism: str | None = None
    #: set once SASL succeeded (or at once when the listener has no SASL)
    principal: str | None = None
    authenticated: bool = True
    #: mechanism-specific state between SaslAuthenticate rounds (SCRAM's first message)
    sasl_state: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RequestContext:
    """The request header's fields and the connection's session."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    session: Session


@dataclass(frozen=True, slots=True)
class Later:
    """A reply that is not ready yet; the server awaits it while it reads the connection's next requests."""

    reply: Awaitable[Any | None]


Reply: TypeAlias = "Any | Later | None"
Handler = Callable[["Broker", RequestContext, Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class ApiSpec:
    """One implemented API: the versions ApiVersions advertises (kio's range, clamped) and its handler.

    ``before_auth`` APIs are served before SASL authentication completes (ApiVersions, SaslHandshake,
    SaslAuthenticate); every other request on an unauthenticated connection closes it.
    """

    api_key: int
    name: str
    min_version: int
    max_version: int
    handler: Handler
    before_auth: bool = False
