"""The startup capability probe of the store's conditional writes (manifest-protocol.md §4.6).

Steps, on scratch keys under ``_probe/{token}/`` (deleted afterwards, best effort):

1. two ``If-None-Match: *`` PUTs of one key: expect success, then :class:`PreconditionFailed`;
2. ``If-Match`` with a wrong ETag: expect :class:`PreconditionFailed`, object unchanged;
3. ``If-Match`` on a missing key: expect :class:`PreconditionFailed` or :class:`ObjectNotFound`;
   a success means broken (MinIO before #21526), and the key must not appear;
4. ``If-Match`` with the current ETag: expect success;
5. ``parallel`` concurrent ``If-None-Match`` PUTs of one fresh key: expect exactly one winner, and the
   stored body to be the winner's (skipped when ``parallel < 2``). They race on threads of their own, or
   run on the ``executor`` given: a store without background threads (``background=manual``) passes an
   inline one, so its probe starts no thread and its PUTs go one after another, in a deterministic order
   (exactly one winner is still required; only concurrency is not exercised).

Outcome (:attr:`ProbeResult.mode`), the fallback ladder of §4.6:

* ``full``: put-if-absent and If-Match work (the manifest GC boundary may use If-Match);
* ``no-if-match``: put-if-absent works, If-Match is missing or broken (boundary off, long manifest
  min age);
* ``unsafe``: put-if-absent is missing, broken or not atomic: :func:`require_safe` refuses it.

Any error during steps 1-4 is reported as a finding and the capability counts as not working, never
as working. Errors during the race (step 5) leave atomicity unproven (``None``, with a finding).
Except :class:`StoreAccessError` (the endpoint is unreachable, the bucket missing, the credentials
rejected): it says nothing about conditional writes, so it propagates as itself, and the probe keys are
not cleaned up (each delete would fail the same way, after its retries).
"""

from __future__ import annotations

import threading
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

from s3stream.base.errors import ObjectNotFound, PreconditionFailed, S3StreamError, StoreAccessError, UnsafeStore
from s3stream.base.ids import IdSource
from s3stream.objectstore.protocol import ObjectStore

__all__ = ["ProbeMode", "ProbeResult", "probe_conditional_writes", "require_safe"]

ProbeMode = Literal["full", "no-if-match", "unsafe"]
_WRONG_ETAG = '"00000000000000000000000000000000"'


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """What the probe found; ``findings`` explains every capability that failed."""

    put_if_absent: bool
    if_match: bool
    atomic_put_if_absent: bool | None
    findings: list[str] = field(default_factory=list)

    @property
    def mode(self) -> ProbeMode:
        """``full``, ``no-if-match`` or ``unsafe`` (see the module docstring)."""
        if not self.put_if_absent or self.atomic_put_if_absent is False:
            return "unsafe"
        return "full" if self.if_match else "no-if-match"


def require_safe(result: ProbeResult) -> None:
    """Raise :class:`UnsafeStore` (with the findings) when put-if-absent is missing or broken."""
    if result.mode == "unsafe":
        raise UnsafeStore("the object store's conditional writes are unsafe for s3stream's manifest "
                          "protocol: " + "; ".join(result.findings or ["put-if-absent is not honoured"]))


def probe_conditional_writes(store: ObjectStore, ids: IdSource, *, parallel: int = 16,
                             executor: Executor | None = None) -> ProbeResult:
    """Probe ``store``'s conditional writes (steps in the module docstring; ``executor`` runs the racers of
    step 5, None: threads of their own); leaves no keys behind unless access to the store is lost (raises
    :class:`StoreAccessError`)."""
    base = f"_probe/{ids.token(8)}/"
    findings: list[str] = []
    reachable = True
    try:
        put_if_absent = _probe_put_if_absent(store, base + "a", findings)
        if_match = put_if_absent and _probe_if_match(store, base + "a", base + "missing", findings)
        atomic: bool | None = None
        if put_if_absent and parallel >= 2:
            atomic = _probe_race(store, base + "race", parallel, findings, executor)
    except StoreAccessError:
        reachable = False
        raise
    finally:
        for key in ("a", "missing", "race") if reachable else ():
            try:
                store.delete(base + key)
            except S3StreamError as exc:
                findings.append(f"could not delete probe key {base + key}: {exc}")
    return ProbeResult(put_if_absent, if_match, atomic, findings)


def _probe_put_if_absent(store: ObjectStore, key: str, findings: list[str]) -> bool:
    try:
        store.put(key, b"probe-1", if_none_match=True)
    except StoreAccessError:
        raise  # not a finding: the store cannot be used at all
    except S3StreamError as exc:
        findings.append(f"If-None-Match PUT of a new key failed: {type(exc).__name__}: {exc}")
        return False
    try:
        store.put(key, b"probe-2", if_none_match=True)
    except PreconditionFailed:
        pass
    except StoreAccessError:
        raise
    except S3StreamError as exc:
        findings.append(f"second If-None-Match PUT raised {type(exc).__name__} instead of 412: {exc}")
        return False
    else:
        findings.append("second If-None-Match PUT of an existing key succeeded: put-if-absent is ignored")
        return False
    try:
        if store.get(key) != b"probe-1":
            findings.append("a rejected If-None-Match PUT changed the object")
            return False
    except StoreAccessError:
        raise
    except S3StreamError as exc:
        findings.append(f"reading the probe object back failed: {type(exc).__name__}: {exc}")
        return False
    return True


def _probe_if_match(store: ObjectStore, key: str, missing: str, findings: list[str]) -> bool:
    ok = True
    try:
        store.put(key, b"probe-x", if_match=_WRONG_ETAG)
        findings.append("If-Match with a wrong ETag succeeded: If-Match is ignored")
        ok = False
    except PreconditionFailed:
        pass
    except StoreAccessError:
        raise
    except S3StreamError as exc:
        findings.append(f"If-Match with a wrong ETag raised {type(exc).__name__}: {exc}")
        ok = False
    try:
        store.put(missing, b"probe-m", if_match=_WRONG_ETAG)
        findings.append("If-Match on a missing key succeeded (expected 404 or 412)")
        ok = False
    except (PreconditionFailed, ObjectNotFound):
        pass
    except StoreAccessError:
        raise
    except S3StreamError as exc:
        findings.append(f"If-Match on a missing key raised {type(exc).__name__}: {exc}")
        ok = False
    try:
        etag = store.head(key).etag
        store.put(key, b"probe-3", if_match=etag)
        if store.get(key) != b"probe-3":
            findings.append("If-Match with the current ETag did not write the object")
            ok = False
    except StoreAccessError:
        raise
    except S3StreamError as exc:
        findings.append(f"If-Match with the current ETag failed: {type(exc).__name__}: {exc}")
        ok = False
    return ok


def _probe_race(store: ObjectStore, key: str, parallel: int, findings: list[str],
                executor: Executor | None) -> bool | None:
    """``parallel`` racers put-if-absent ``key``; True iff exactly one won (and it shows). Without ``executor``
    they are threads of their own, lined up by a barrier; on ``executor`` they run as it schedules them."""
    barrier = threading.Barrier(parallel) if executor is None else None

    def attempt(i: int) -> str:
        body = f"racer-{i}".encode()
        if barrier is not None:
            barrier.wait(timeout=30)
        try:
            store.put(key, body, if_none_match=True)
        except PreconditionFailed:
            return "lost"
        except StoreAccessError:
            raise
        except S3StreamError as exc:
            return f"error: {type(exc).__name__}: {exc}"
        return "won"

    if executor is not None:
        outcomes = list(executor.map(attempt, range(parallel)))
    else:
        with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="s3stream-probe") as pool:
            outcomes = list(pool.map(attempt, range(parallel)))
    winners = [i for i, o in enumerate(outcomes) if o == "won"]
    errors = sorted({o for o in outcomes if o.startswith("error")})
    if len(winners) > 1:
        findings.append(f"{len(winners)} of {parallel} concurrent If-None-Match PUTs succeeded: "
                        "put-if-absent is not atomic")
        return False
    if errors:
        findings.append(f"concurrent If-None-Match PUTs failed: {'; '.join(errors)}")
        return None  # an errored PUT may have landed too: atomicity is unproven
    if not winners:
        findings.append(f"none of {parallel} concurrent If-None-Match PUTs succeeded")
        return False
    try:
        if store.get(key) != f"racer-{winners[0]}".encode():
            findings.append("the object after the put-if-absent race is not the winner's")
            return False
    except StoreAccessError:
        raise
    except S3StreamError as exc:
        findings.append(f"reading the race winner back failed: {type(exc).__name__}: {exc}")
        return None
    return True
