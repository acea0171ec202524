"""Failure classification and retry for the S3 backend: what failed, and whether to try again.

Two parts, both pure policy (no client, no I/O of their own):

* :func:`map_botocore_error`: the only place that knows S3 error codes and botocore/urllib3
  exception types, and translates each into the typed taxonomy of :mod:`s3stream.base.errors`;
* :func:`retry_call`: jittered exponential backoff around one call, retrying only what is safe.

Vocabulary:

* an **attempt** is one request; ``max_attempts`` counts the first one too;
* a call is **idempotent** when repeating it cannot change the outcome (GET, HEAD, LIST, DELETE and an
  unconditional PUT of the same bytes);
* a failure is **not sent** when the request provably never reached the server (the connection could
  not be opened): any call may be repeated then, conditional writes included;
* a failure is **rejected** when the server refused the request before acting on it
  (:class:`Throttled`, i.e. 503 SlowDown / 429): any call may be repeated then too.

The rule this module encodes (and the manifest protocol relies on): a **conditional** PUT is never
repeated after a :class:`TransientError` whose request may have reached the server, because its
outcome is unknown; the error goes up so the caller can read back and compare its ``commit_id``.
Sleeping goes through the injected :class:`Clock` and jitter comes from the injected
:class:`IdSource`, so a seeded simulation retries identically.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import botocore.exceptions as bce
import urllib3.exceptions

from s3stream.base.clock import Clock
from s3stream.base.errors import (
    CorruptData,
    InvalidRequest,
    ObjectNotFound,
    ObjectStoreError,
    PreconditionFailed,
    S3StreamError,
    StoreAccessError,
    Throttled,
    TransientError,
)
from s3stream.base.ids import IdSource

__all__ = ["BACKEND_ERRORS", "NOT_SENT_ERRORS", "Attempt", "BackoffPolicy", "map_botocore_error",
           "retry_call"]

T = TypeVar("T")

_NOT_FOUND = frozenset({"NoSuchKey", "NotFound", "404", "NoSuchUpload", "NoSuchVersion"})
_PRECONDITION = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})
_ACCESS = frozenset({
    "NoSuchBucket", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AllAccessDisabled",
    "InvalidBucketName", "AuthorizationHeaderMalformed", "PermanentRedirect", "ExpiredToken",
    "InvalidToken", "TokenRefreshRequired", "AccountProblem", "MissingSecurityHeader",
    "RequestTimeTooSkewed", "InvalidSecurity", "UnauthorizedAccess", "Forbidden",
})
_THROTTLE = frozenset({
    "SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests",
    "TooManyRequestsException", "RequestThrottled", "ServiceUnavailable", "503",
})
_TRANSIENT = frozenset({"InternalError", "RequestTimeout", "OperationAborted", "BadDigest",
                        "IncompleteBody", "XAmzContentSHA256Mismatch", "500", "502", "504"})
NOT_SENT_ERRORS = (bce.EndpointConnectionError, bce.ConnectTimeoutError, bce.ProxyConnectionError)
_CREDENTIALS = (bce.NoCredentialsError, bce.PartialCredentialsError, bce.CredentialRetrievalError)
BACKEND_ERRORS = (bce.ClientError, bce.BotoCoreError, urllib3.exceptions.HTTPError)


def map_botocore_error(exc: BaseException, *, op: str, key: str | None, endpoint: str,
                       bucket: str) -> S3StreamError:
    """Translate one botocore/urllib3 exception into the typed error taxonomy (the only such place).

    Args:
        exc: what boto3 raised. op: ``PUT``/``GET``/``HEAD``/``LIST``/``DELETE``/``BUCKET``.
        key: the object key (None for bucket-level calls). endpoint, bucket: named in access errors.
    """
    where = f"{op} {key!r} " if key is not None else f"{op} "
    place = f"endpoint {endpoint}, bucket {bucket}"
    if isinstance(exc, bce.ClientError):
        err = exc.response.get("Error", {})
        code = str(err.get("Code", ""))
        msg = str(err.get("Message", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        detail = f"{code or status} (HTTP {status}): {msg}"
        if code in _PRECONDITION or status == 412 or (status == 409 and op == "PUT"):
            note = " [409: a concurrent conditional write]" if status == 409 else ""
            return PreconditionFailed(f"{where}precondition failed: {detail}{note}", key=key)
        if code == "NoSuchBucket" or code in _ACCESS or status in (301, 307, 401, 403):
            return StoreAccessError(f"{where}refused by {place}: {detail}")
        if code in _NOT_FOUND or status == 404:
            return ObjectNotFound(f"{key} not found ({where.strip()} on {place})", key=key)
        if code in _THROTTLE or status in (429, 503):
            return Throttled(f"{where}throttled by {place}: {detail}", key=key)
        if code in _TRANSIENT or status >= 500 or status == 409:
            return TransientError(f"{where}failed on {place}: {detail}", key=key)
        return ObjectStoreError(f"{where}unexpected error from {place}: {detail}", key=key)
    if isinstance(exc, _CREDENTIALS):
        return StoreAccessError(f"{where}no usable credentials for {place}: {type(exc).__name__} "
                                "(configure the standard AWS credential chain)")
    if isinstance(exc, NOT_SENT_ERRORS):
        return TransientError(f"{where}cannot connect to {place}: {type(exc).__name__}", key=key)
    if isinstance(exc, bce.FlexibleChecksumError):
        return CorruptData(f"{where}response checksum mismatch", source=f"s3://{bucket}/{key or ''}")
    if isinstance(exc, bce.ParamValidationError):
        return InvalidRequest(f"{where}invalid request parameters: {exc}")
    return TransientError(f"{where}failed on {place}: {type(exc).__name__}: {exc}", key=key)




@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """Delay before attempt ``n + 1``: ``min(cap, base * 2**n)`` scaled by a jitter in [0.5, 1]."""

    base_s: float = 0.05
    cap_s: float = 5.0
    max_attempts: int = 8

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.base_s < 0 or self.cap_s < self.base_s:
            raise ValueError(f"invalid BackoffPolicy {self!r}")

    def delay_s(self, retry_index: int, ids: IdSource) -> float:
        """The pause before retry number ``retry_index`` (0 for the first retry)."""
        return min(self.cap_s, self.base_s * float(1 << min(retry_index, 32))) * ids.uniform(0.5, 1.0)


@dataclass(frozen=True, slots=True)
class Attempt:
    """How one failed attempt ended: the typed error, whether the request was provably not sent, and
    whether to chain the backend's exception as ``__cause__`` (not when its text had to be scrubbed)."""

    error: S3StreamError
    not_sent: bool = False
    chain: bool = True


def _may_retry(attempt: Attempt, *, idempotent: bool) -> bool:
    if attempt.not_sent or isinstance(attempt.error, Throttled):
        return True
    return idempotent and isinstance(attempt.error, TransientError)


def retry_call(fn: Callable[[], T], classify: Callable[[BaseException], Attempt | None], *,
               idempotent: bool, policy: BackoffPolicy, clock: Clock, ids: IdSource,
               on_exhausted: Callable[[Attempt], S3StreamError] | None = None) -> T:
    """Run ``fn`` until it succeeds, retrying what the policy above allows.

    Args:
        fn: one attempt of the call.
        classify: maps an exception raised by ``fn`` to an :class:`Attempt`, or None for exceptions
            that are not the backend's (they propagate untouched).
        idempotent: whether a :class:`TransientError` may be retried.
        policy: attempts and backoff; clock and ids: sleeping and jitter.
        on_exhausted: builds the error raised when retries ran out (default: the last error).

    Raises:
        The typed error of the last attempt (chained to the backend's exception).
    """
    retry_index = 0
    while True:
        try:
            return fn()
        except Exception as exc:
            attempt = classify(exc)
            if attempt is None:
                raise
            cause = exc if attempt.chain else None
            if not _may_retry(attempt, idempotent=idempotent):
                raise attempt.error from cause
            if retry_index + 1 >= policy.max_attempts:
                final = on_exhausted(attempt) if on_exhausted is not None else attempt.error
                raise final from cause
        clock.sleep(policy.delay_s(retry_index, ids))
        retry_index += 1
