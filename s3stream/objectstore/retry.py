"""Jittered exponential backoff for object-store calls, with the policy of *what* may be retried.

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

from s3stream.clock import Clock
from s3stream.errors import S3StreamError, Throttled, TransientError
from s3stream.ids import IdSource

__all__ = ["Attempt", "BackoffPolicy", "retry_call"]

T = TypeVar("T")


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
    """How one failed attempt ended: the typed error and whether the request was provably not sent."""

    error: S3StreamError
    not_sent: bool = False


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
            if not _may_retry(attempt, idempotent=idempotent):
                raise attempt.error from exc
            if retry_index + 1 >= policy.max_attempts:
                final = on_exhausted(attempt) if on_exhausted is not None else attempt.error
                raise final from exc
        clock.sleep(policy.delay_s(retry_index, ids))
        retry_index += 1
