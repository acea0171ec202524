"""ApiVersions (key 18): advertise exactly the implemented APIs and versions (:func:`all_apis`).

An ApiVersions request of a version this server does not know is answered by the server itself with a v0
response carrying UNSUPPORTED_VERSION and this same table (KIP-511), so the client retries with v0..v3.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16

from s3stream.apps.kafka.api import ApiSpec, RequestContext
from s3stream.apps.kafka.broker import Broker
from s3stream.apps.kafka.wire import response_class

__all__ = ["APIS", "api_versions_response"]


def api_versions_response(version: int, error: ErrorCode = ErrorCode.none) -> Any:
    """The ApiVersions response of ``version`` listing :func:`all_apis`."""
    from s3stream.apps.kafka.handlers import all_apis

    cls = response_class(18, version)
    entry_cls = _nested(cls, "ApiVersion")
    keys = tuple(entry_cls(api_key=i16(s.api_key), min_version=i16(s.min_version), max_version=i16(s.max_version))
                 for s in all_apis())
    kwargs: dict[str, Any] = {"error_code": error, "api_keys": keys}
    if "throttle_time" in cls.__dataclass_fields__:
        kwargs["throttle_time"] = datetime.timedelta(0)
    return cls(**kwargs)


def _nested(cls: type[Any], name: str) -> type[Any]:
    import sys

    return getattr(sys.modules[cls.__module__], name)  # type: ignore[no-any-return]


async def _handle(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    return api_versions_response(ctx.api_version)


APIS = [ApiSpec(18, "ApiVersions", 0, 4, _handle, before_auth=True)]
