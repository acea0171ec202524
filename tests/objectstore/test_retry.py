"""The retry policy: what may be retried, how long it waits, and determinism by seed."""

from __future__ import annotations

import pytest

from s3stream.base.errors import ObjectNotFound, PreconditionFailed, S3StreamError, Throttled, TransientError
from s3stream.base.ids import IdSource
from s3stream.objectstore.retry import Attempt, BackoffPolicy, retry_call

from .support import SleepLog


class Boom(Exception):
    def __init__(self, error: S3StreamError, not_sent: bool = False) -> None:
        super().__init__(str(error))
        self.error, self.not_sent = error, not_sent


def _classify(exc: BaseException) -> Attempt | None:
    return Attempt(exc.error, exc.not_sent) if isinstance(exc, Boom) else None


def _run(errors: list[Boom], *, idempotent: bool, attempts: int = 5) -> tuple[list[float], object]:
    clock, calls = SleepLog(), iter(errors)

    def fn() -> str:
        nxt = next(calls, None)
        if nxt is not None:
            raise nxt
        return "ok"

    result = retry_call(fn, _classify, idempotent=idempotent, policy=BackoffPolicy(max_attempts=attempts),
                        clock=clock, ids=IdSource(0))
    return clock.sleeps, result


def test_backoff_is_exponential_jittered_capped_and_seeded() -> None:
    policy = BackoffPolicy()
    delays = [policy.delay_s(i, IdSource(9)) for i in range(12)]
    assert delays == [policy.delay_s(i, IdSource(9)) for i in range(12)]
    for i, d in enumerate(delays):
        full = min(5.0, 0.05 * 2**i)
        assert full / 2 <= d <= full
    assert max(delays) <= 5.0


def test_transient_errors_are_retried_for_idempotent_calls() -> None:
    sleeps, result = _run([Boom(TransientError("x")), Boom(Throttled("y"))], idempotent=True)
    assert result == "ok" and len(sleeps) == 2


def test_unknown_outcomes_are_not_retried_for_conditional_calls() -> None:
    with pytest.raises(TransientError):
        _run([Boom(TransientError("x"))], idempotent=False)


def test_throttles_and_unsent_requests_are_retried_for_conditional_calls() -> None:
    sleeps, result = _run([Boom(Throttled("t")), Boom(TransientError("c"), not_sent=True)], idempotent=False)
    assert result == "ok" and len(sleeps) == 2


def test_definite_errors_are_never_retried() -> None:
    for err in (ObjectNotFound("k"), PreconditionFailed("k")):
        with pytest.raises(type(err)):
            _run([Boom(err)], idempotent=True)


def test_foreign_exceptions_propagate_untouched() -> None:
    def fn() -> None:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        retry_call(fn, _classify, idempotent=True, policy=BackoffPolicy(), clock=SleepLog(), ids=IdSource(0))


def test_exhaustion_raises_the_last_error_chained() -> None:
    with pytest.raises(TransientError) as info:
        _run([Boom(TransientError(f"e{i}")) for i in range(3)], idempotent=True, attempts=3)
    assert str(info.value) == "e2" and isinstance(info.value.__cause__, Boom)
