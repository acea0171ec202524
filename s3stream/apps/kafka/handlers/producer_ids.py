"""InitProducerId (key 22, v0-6): producer ids for idempotent producers; transactions are not supported.

* ``transactional_id`` null: a new producer id from :meth:`Store.allocate_producer_id
  <s3stream.store.Store.allocate_producer_id>` (unique across every server on the bucket) at epoch 0. This is
  what Kafka's broker does for a null transactional id, also on v3+ when the request carries the producer's
  current id and epoch (KIP-360): an idempotent producer bumps its epoch itself (Java, librdkafka) and asks
  the broker only when it needs a new id, so a fresh id is always a correct answer. As in Kafka, exactly one
  of ``producer_id``/``producer_epoch`` being -1 is INVALID_REQUEST.
* ``transactional_id`` set: TRANSACTIONAL_ID_AUTHORIZATION_FAILED. A transactional producer treats it as
  fatal at once with a message naming the cause ("Transactional Id authorization failed"), where
  COORDINATOR_NOT_AVAILABLE would make it retry until its timeout and then fail with a misleading one. An
  empty transactional id is INVALID_REQUEST, as in Kafka; so is a two-phase-commit request (v6).
* The bucket not answering (a block commit timing out, the store closing) is COORDINATOR_NOT_AVAILABLE, which
  every client retries.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i64

from s3stream.apps.kafka.api import ApiSpec, RequestContext
from s3stream.apps.kafka.broker import Broker
from s3stream.apps.kafka.errors import error_code
from s3stream.apps.kafka.wire import response_class
from s3stream.base.errors import Closed, S3StreamError

__all__ = ["APIS"]

_NONE = -1


def _response(version: int, error: ErrorCode, producer_id: int = _NONE, epoch: int = _NONE) -> Any:
    cls = response_class(22, version)
    kwargs: dict[str, Any] = {"throttle_time": datetime.timedelta(0), "error_code": error,
                              "producer_id": i64(producer_id), "producer_epoch": i16(epoch)}
    fields = cls.__dataclass_fields__
    if "ongoing_txn_producer_id" in fields:
        kwargs["ongoing_txn_producer_id"] = i64(_NONE)
        kwargs["ongoing_txn_producer_epoch"] = i16(_NONE)
    return cls(**kwargs)


def _refusal(request: Any) -> ErrorCode | None:
    """Why this request is not answered with a new id (see the module docstring), or None."""
    txn = request.transactional_id
    if txn is not None:
        return ErrorCode.invalid_request if txn == "" else ErrorCode.transactional_id_authorization_failed
    if getattr(request, "enable2_pc", False) or getattr(request, "keep_prepared_txn", False):
        return ErrorCode.invalid_request
    pid, epoch = int(getattr(request, "producer_id", _NONE)), int(getattr(request, "producer_epoch", _NONE))
    if (pid == _NONE) != (epoch == _NONE):
        return ErrorCode.invalid_request
    return None


async def _handle(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    refused = _refusal(request)
    if refused is not None:
        return _response(ctx.api_version, refused)
    try:
        pid = await broker.run_blocking(broker.store.allocate_producer_id)
    except S3StreamError as exc:
        retriable = exc.retriable or isinstance(exc, Closed)
        return _response(ctx.api_version, ErrorCode.coordinator_not_available if retriable else error_code(exc))
    return _response(ctx.api_version, ErrorCode.none, pid, 0)


APIS = [ApiSpec(22, "InitProducerId", 0, 6, _handle)]
