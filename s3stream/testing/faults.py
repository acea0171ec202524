"""A fault-injecting ObjectStore wrapper: seeded S3 failures for crash and retry tests.

Each :class:`FaultRule` selects requests by operation (``put``/``get``/``head``/``list``/``delete``,
or None for all) and key prefix (for ``list``: the listing prefix), and injects one fault kind with
probability ``rate``, at most ``count`` times (None: unlimited). Kinds and what they model:

=================  ==============================================================================
``error``          a 500 InternalError before the op: :class:`TransientError`, nothing done
``throttle``       503 SlowDown: :class:`Throttled`, nothing done
``timeout_before`` the request timed out before reaching the store: :class:`TransientError`, nothing
``lost_response``  the op **is done**, then the response is lost: :class:`TransientError` (the lost
                   ack: a conditional PUT landed but its writer does not know)
``precondition``   a 412 race: :class:`PreconditionFailed` without doing the op
``conflict409``    a 409 ConditionalRequestConflict: :class:`PreconditionFailed`, nothing done
=================  ==============================================================================

A streamed upload (``open_upload``) of at most one part is one ``put``; a larger one is one ``put``
request each for its create, every part and its complete (a fault there fails the write or complete,
and the upload is aborted; ``lost_response`` on complete leaves the object in place).

Determinism: rules are checked in order; every rule that matches a request (and has count left) draws
exactly one number from the injected :class:`IdSource`, the first draw under its rate fires. So a given
seed and request sequence inject the same faults every run. :meth:`FaultyObjectStore.set_rules`
swaps the rules (and resets counts) between the steps of a test; :meth:`FaultyObjectStore.paused` injects
nothing (and draws nothing) for a while. Thread-safe.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal, TypeVar

from s3stream.base.errors import ObjectStoreError, PreconditionFailed, Throttled, TransientError
from s3stream.base.ids import IdSource
from s3stream.objectstore.protocol import DEFAULT_PART_BYTES, ByteRange, ListEntry, ObjectMeta, ObjectStore
from s3stream.objectstore.upload import ForwardedUpload

__all__ = ["FaultKind", "FaultRule", "FaultyObjectStore"]

T = TypeVar("T")
FaultKind = Literal["error", "throttle", "timeout_before", "lost_response", "precondition", "conflict409"]
_OPS = frozenset({"put", "get", "head", "list", "delete"})
_KINDS = frozenset({"error", "throttle", "timeout_before", "lost_response", "precondition", "conflict409"})


@dataclass(frozen=True, slots=True)
class FaultRule:
    """Inject ``kind`` into matching requests with probability ``rate``, at most ``count`` times."""

    op: str | None
    key_prefix: str | None
    kind: FaultKind
    rate: float = 1.0
    count: int | None = None

    def __post_init__(self) -> None:
        if self.op is not None and self.op.lower() not in _OPS:
            raise ValueError(f"FaultRule.op must be one of {sorted(_OPS)} or None, got {self.op!r}")
        if self.kind not in _KINDS:
            raise ValueError(f"FaultRule.kind must be one of {sorted(_KINDS)}, got {self.kind!r}")
        if not 0.0 <= self.rate <= 1.0 or (self.count is not None and self.count < 0):
            raise ValueError(f"FaultRule needs 0 <= rate <= 1 and count >= 0: {self}")

    def matches(self, op: str, key: str) -> bool:
        """Whether this rule applies to ``op`` on ``key``."""
        return (self.op is None or self.op.lower() == op) and (
            self.key_prefix is None or key.startswith(self.key_prefix))


def _fault_error(kind: str, op: str, key: str) -> ObjectStoreError:
    where = f"injected fault on {op} {key!r}"
    if kind == "throttle":
        return Throttled(f"{where}: 503 SlowDown", key=key)
    if kind == "precondition":
        return PreconditionFailed(f"{where}: 412 PreconditionFailed", key=key)
    if kind == "conflict409":
        return PreconditionFailed(f"{where}: 409 ConditionalRequestConflict", key=key)
    if kind == "timeout_before":
        return TransientError(f"{where}: timeout before the request reached the store", key=key)
    if kind == "lost_response":
        return TransientError(f"{where}: the request was done but its response was lost", key=key)
    return TransientError(f"{where}: 500 InternalError", key=key)


class FaultyObjectStore:
    """Delegates to ``inner``, injecting the faults its rules select (see the module docstring)."""

    def __init__(self, inner: ObjectStore, *, ids: IdSource, rules: list[FaultRule] | None = None) -> None:
        self._inner = inner
        self._ids = ids
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []
        self._left: list[int | None] = []
        self._injected: dict[str, int] = {}
        self._paused = 0
        self.set_rules(rules or [])

    @property
    def url(self) -> str:
        return self._inner.url

    @property
    def inner(self) -> ObjectStore:
        """The wrapped store (to inspect or seed it without faults)."""
        return self._inner

    def set_rules(self, rules: list[FaultRule]) -> None:
        """Replace the rules; counts start afresh (the injection tally is kept)."""
        with self._lock:
            self._rules = list(rules)
            self._left = [r.count for r in self._rules]

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No fault is injected (and no number drawn) inside: a simulation's auditor reads through the store it
        audits without changing what the rules inject afterwards (their counts are kept)."""
        with self._lock:
            self._paused += 1
        try:
            yield
        finally:
            with self._lock:
                self._paused -= 1

    def injected(self) -> dict[str, int]:
        """How many faults of each kind were injected so far."""
        with self._lock:
            return dict(self._injected)

    def _decide(self, op: str, key: str) -> str | None:
        """The fault kind to inject into this request, or None."""
        with self._lock:
            if self._paused:
                return None
            for i, rule in enumerate(self._rules):
                left = self._left[i]
                if (left is not None and left <= 0) or not rule.matches(op, key):
                    continue
                if self._ids.random() < rule.rate:
                    if left is not None:
                        self._left[i] = left - 1
                    self._injected[rule.kind] = self._injected.get(rule.kind, 0) + 1
                    return rule.kind
        return None

    def _run(self, op: str, key: str, fn: Callable[[], T]) -> T:
        kind = self._decide(op, key)
        if kind is None:
            return fn()
        if kind == "lost_response":
            fn()
        raise _fault_error(kind, op, key)

    def put(self, key: str, data: bytes | bytearray | memoryview, *, if_none_match: bool = False,
            if_match: str | None = None) -> ObjectMeta:
        return self._run("put", key, lambda: self._inner.put(key, data, if_none_match=if_none_match,
                                                             if_match=if_match))

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        return self._run("get", key, lambda: self._inner.get(key, byte_range))

    def get_view(self, key: str, byte_range: ByteRange | None = None) -> memoryview:
        return self._run("get", key, lambda: self._inner.get_view(key, byte_range))

    def head(self, key: str) -> ObjectMeta:
        return self._run("head", key, lambda: self._inner.head(key))

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ListEntry]:
        # The fault applies to the (first) LIST request; a lost response still walked the listing.
        entries = self._run("list", prefix, lambda: list(self._inner.list(prefix, start_after=start_after)))
        return iter(entries)

    def delete(self, key: str) -> None:
        self._run("delete", key, lambda: self._inner.delete(key))

    def open_upload(self, key: str, *, part_bytes: int = DEFAULT_PART_BYTES) -> ForwardedUpload:
        return ForwardedUpload(key, part_bytes, put=lambda data: self.put(key, data),
                               inner=self._inner.open_upload(key, part_bytes=part_bytes), request=self._upload_request)

    def _upload_request(self, key: str, kind: str, nbytes: int, fn: Callable[[], T]) -> T:
        """Create, each part and complete are ``put`` requests for the rules; an abort is never faulted."""
        return fn() if kind == "abort" else self._run("put", key, fn)

    def close(self) -> None:
        self._inner.close()
