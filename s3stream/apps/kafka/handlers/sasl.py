"""SaslHandshake (17) and SaslAuthenticate (36): PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 logins.

SaslHandshake v0-v1 are advertised, because librdkafka (kcat's 2.0 included) turns SASL on only when v0 is
in the broker's range; but a v0 handshake, which raw unframed SASL tokens would follow (the framing of
:mod:`~s3stream.apps.kafka.server` carries only Kafka requests), is answered UNSUPPORTED_VERSION. Clients
send v1 whenever SaslAuthenticate is advertised. SaslAuthenticate v0-v2 carry the tokens; v1+ answer
``session_lifetime_ms`` 0 (no re-authentication required, KIP-368). The connection's progress lives in
``ctx.session``: ``sasl_mechanism`` after the handshake, ``sasl_state["scram"]`` between SCRAM rounds,
``authenticated`` and ``principal`` (``User:NAME``) at the end. Until then the server closes a connection
that sends anything but these two and ApiVersions.

A failed login (or a request out of order) is answered with its error code and a message free of
credentials; the session is then spent: any later SASL request on it closes the connection (clients
disconnect at once anyway, as they do with Kafka). The users are loaded when the server starts
(:class:`SaslAuthenticator` in ``STARTUP``), so a bad users file stops the start, not the first login.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from s3stream.apps.kafka.api import ApiSpec, RequestContext, Session
from s3stream.apps.kafka.broker import Broker
from s3stream.apps.kafka.security import (
    PLAIN,
    AuthenticationFailed,
    ScramExchange,
    Users,
    check_plain,
    load_users,
    parse_mechanisms,
)
from s3stream.apps.kafka.wire import MalformedFrame, response_class
from s3stream.base.errors import InvalidConfig

__all__ = ["APIS", "STARTUP", "SaslAuthenticator"]

log = logging.getLogger(__name__)

_SPENT = "spent"


class SaslAuthenticator:
    """The listener's enabled mechanisms and users (a server component; loads the users file once)."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self.mechanisms = parse_mechanisms(broker.config.sasl_enabled_mechanisms)
        self._users: Users | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        if self.mechanisms or self._broker.config.sasl_users_file:
            await self.users()

    async def users(self) -> Users:
        """The users (loaded on first call); InvalidConfig when SASL is half-configured or the file is bad."""
        async with self._lock:
            if self._users is None:
                path = self._broker.config.sasl_users_file
                if not self.mechanisms:
                    raise InvalidConfig("a SASL users file is given but no SASL mechanism is enabled "
                                        "(sasl.enabled.mechanisms)", key="sasl.enabled.mechanisms")
                if not path:
                    raise InvalidConfig("SASL is enabled but no users file is given (sasl.users.file)",
                                        key="sasl.users.file")
                self._users = await self._broker.run_blocking(load_users, path)
                log.info("SASL on the Kafka listener: %s; %d users", ", ".join(self.mechanisms), len(self._users))
            return self._users


STARTUP = (SaslAuthenticator,)


def _spend(broker: Broker, session: Session, api: str, code: ErrorCode) -> None:
    session.sasl_state = {_SPENT: True}
    broker.metrics.request_errors.labels(api, code.name).inc()
    broker.metrics.connections_rejected.labels("authentication").inc()


def _check_not_spent(session: Session) -> None:
    if session.sasl_state.get(_SPENT):
        raise MalformedFrame("a SASL request after a failed authentication")


async def _handshake(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    auth = broker.component(SaslAuthenticator)
    session = ctx.session
    _check_not_spent(session)
    cls = response_class(17, ctx.api_version)
    enabled = auth.mechanisms
    if ctx.api_version == 0:
        _spend(broker, session, "SaslHandshake", ErrorCode.unsupported_version)
        return cls(error_code=ErrorCode.unsupported_version, mechanisms=enabled)
    if not enabled or session.authenticated or session.sasl_mechanism is not None:
        _spend(broker, session, "SaslHandshake", ErrorCode.illegal_sasl_state)
        return cls(error_code=ErrorCode.illegal_sasl_state, mechanisms=enabled)
    if request.mechanism not in enabled:
        _spend(broker, session, "SaslHandshake", ErrorCode.unsupported_sasl_mechanism)
        return cls(error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=enabled)
    session.sasl_mechanism = request.mechanism
    return cls(error_code=ErrorCode.none, mechanisms=enabled)


def _auth_response(version: int, code: ErrorCode, message: str | None, data: bytes = b"") -> Any:
    cls = response_class(36, version)
    kwargs: dict[str, Any] = {"error_code": code, "error_message": message, "auth_bytes": data}
    if "session_lifetime" in cls.__dataclass_fields__:
        kwargs["session_lifetime"] = datetime.timedelta(0)
    return cls(**kwargs)


async def _authenticate(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    session = ctx.session
    _check_not_spent(session)
    mechanism = session.sasl_mechanism
    if session.authenticated or mechanism is None:
        _spend(broker, session, "SaslAuthenticate", ErrorCode.illegal_sasl_state)
        message = "already authenticated" if session.authenticated else "SaslAuthenticate before SaslHandshake"
        return _auth_response(ctx.api_version, ErrorCode.illegal_sasl_state, message)
    users = await broker.component(SaslAuthenticator).users()
    token = bytes(request.auth_bytes)
    try:
        if mechanism == PLAIN:
            user, reply = await broker.run_blocking(check_plain, users, token), b""
        else:
            exchange = session.sasl_state.get("scram")
            if not isinstance(exchange, ScramExchange):
                session.sasl_state["scram"] = ScramExchange(users, mechanism)
                return _auth_response(ctx.api_version, ErrorCode.none, None,
                                      session.sasl_state["scram"].first(token))
            user, reply = exchange.final(token)
    except AuthenticationFailed as exc:
        _spend(broker, session, "SaslAuthenticate", ErrorCode.sasl_authentication_failed)
        log.info("SASL %s authentication from %s failed: %s", mechanism, session.peer, exc)
        return _auth_response(ctx.api_version, ErrorCode.sasl_authentication_failed, str(exc))
    session.sasl_state = {}
    session.principal = f"User:{user}"
    session.authenticated = True
    log.debug("%s authenticated as %s with SASL %s", session.peer, session.principal, mechanism)
    return _auth_response(ctx.api_version, ErrorCode.none, None, reply)


APIS = [
    ApiSpec(17, "SaslHandshake", 0, 1, _handshake, before_auth=True),
    ApiSpec(36, "SaslAuthenticate", 0, 2, _authenticate, before_auth=True),
]
