"""Small helpers for handlers: kio messages whose fields differ between versions, and blocking handlers.

kio generates one frozen dataclass per (API, version); a field added in v5 simply does not exist in v4's
class. Handlers describe the newest shape once and :func:`build` drops what an older version lacks.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from s3stream.apps.kafka.api import RequestContext
    from s3stream.apps.kafka.broker import Broker

__all__ = ["blocking", "build", "has_field", "nested"]


def nested(cls: type[Any], name: str) -> type[Any]:
    """The nested entity class ``name`` generated in the same module as ``cls`` (same API and version)."""
    return getattr(sys.modules[cls.__module__], name)  # type: ignore[no-any-return]


def has_field(cls: type[Any], name: str) -> bool:
    """Whether this version of the message has field ``name``."""
    return name in cls.__dataclass_fields__


def build(cls: type[Any], **fields: Any) -> Any:
    """``cls(**fields)`` without the fields this version of the message does not have."""
    known = cls.__dataclass_fields__
    return cls(**{k: v for k, v in fields.items() if k in known})


def blocking(fn: Callable[[Broker, int, Any], Any]) -> Callable[[Broker, RequestContext, Any], Awaitable[Any]]:
    """A handler that runs ``fn(broker, api_version, request)`` (store calls, manifest commits) on the pool."""
    async def handle(broker: Broker, ctx: RequestContext, request: Any) -> Any:
        return await broker.run_blocking(fn, broker, ctx.api_version, request)

    return handle
