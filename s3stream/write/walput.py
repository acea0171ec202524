"""Putting one WAL object until it lands: put-if-absent, fence detection, outage retries with backoff.

The flush pipeline (:mod:`s3stream.write.uploader`) cuts and publishes WAL objects; this module owns what
happens between: the PUT of one object's bytes under its sequence number, as one attempt at a time
(:meth:`WalPutter.attempt`, :meth:`WalPutter.retry_delay`: what a simulation steps) or until it lands
(:meth:`WalPutter.put_until_landed`: what an upload thread runs). Only a fence (another process owns
the namespace) or the node stopping ends the retries; every other failure is an *outage*, retried as the same
seq with the same bytes (sequence numbers are dense: a skipped one would be a hole in the namespace) with
capped exponential backoff and jitter from the injected ids. Its failure bookkeeping (since when, last error)
is what ``ack=s3`` appends and ``BufferFull`` messages report.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

import pyarrow as pa

from s3stream.base.clock import Clock
from s3stream.base.errors import (
    Closed,
    CorruptData,
    Fenced,
    ObjectNotFound,
    ObjectStoreError,
    PreconditionFailed,
    S3StreamError,
    StoreAccessError,
)
from s3stream.base.ids import IdSource
from s3stream.base.producer import ProducerAppend
from s3stream.base.records import RECORD_SCHEMA
from s3stream.format.walobject import WalChunkInput
from s3stream.objectstore.protocol import ObjectStore

__all__ = ["WalPutter", "is_outage", "wal_chunks"]

log = logging.getLogger(__name__)


class WalPutter:
    """PUTs a node's WAL objects (thread-safe: several uploads may be in flight)."""

    def __init__(self, store: ObjectStore, *, node_id: str, clock: Clock, ids: IdSource, stop: threading.Event,
                 stopping: Callable[[], bool], assigned: Callable[[], int], stale_after_s: float,
                 retry_backoff_ms: int, retry_backoff_max_ms: int) -> None:
        self._store = store
        self._node_id = node_id
        self._clock = clock
        self._ids = ids
        self._stop = stop  # set at close and on failure: cuts a retry's backoff short
        self._stopping = stopping  # the node is closing or stopped: give up after a failed attempt
        self._assigned = assigned  # sequences below this are ours (some may be in flight right now)
        self._stale_after_s = stale_after_s
        self._backoff_s = retry_backoff_ms / 1000.0
        self._backoff_max_s = max(retry_backoff_max_ms, retry_backoff_ms) / 1000.0
        self._lock = threading.Lock()
        self.failing_since: float | None = None  # first failed attempt since the last PUT that landed
        self.last_error: S3StreamError | None = None
        self._last_put_at: float | None = clock.monotonic()
        self.puts = 0
        self.bytes_put = 0

    def failing_for_s(self) -> float | None:
        """Seconds uploads have been failing, or None when the last attempt landed."""
        with self._lock:
            since = self.failing_since
        return None if since is None else self._clock.monotonic() - since

    def put_until_landed(self, seq: int, key: str, data: bytes) -> None:
        """PUT put-if-absent until the object lands; only a fence (or the node stopping) ends the retries."""
        failures = 0
        while True:
            outcome = self.attempt(seq, key, data)
            if outcome is True:
                return
            failures += 1
            self._clock.wait(self._stop, self.retry_delay(failures, outcome, key))

    def attempt(self, seq: int, key: str, data: bytes) -> bool | S3StreamError:
        """One put-if-absent of the object: True when it landed (now or in an earlier attempt whose response
        was lost), else the outage error it met (False: a spurious 412/409 on a free key). Raises what is no
        outage (Fenced, a bug)."""
        try:
            self._check_not_overtaken(seq)
            if self._put_if_absent(key, data):
                self._note_landed(len(data))
                return True
        except S3StreamError as exc:
            if not is_outage(exc):
                raise
            self._note_failure(exc)
            return exc
        return False

    def retry_delay(self, failures: int, outcome: bool | S3StreamError, key: str) -> float:
        """The backoff (pacing seconds) before the next attempt after ``failures`` failed ones, the last with
        ``outcome``; raises that error instead once the node is closing or stopped (the local WAL keeps the
        data)."""
        error = outcome if isinstance(outcome, S3StreamError) else None
        if self._stopping():
            raise error if error is not None else Closed(f"node {self._node_id} stopped before {key} landed")
        delay = min(self._backoff_max_s, self._backoff_s * 2.0 ** min(failures - 1, 30))
        delay *= self._ids.uniform(0.5, 1.0)
        log.warning("WAL object PUT %s failed (%s); retry %d in %.2fs", key,
                    error or "a spurious 412/409 on a free key", failures, delay)
        return delay

    def _put_if_absent(self, key: str, data: bytes) -> bool:
        """One put-if-absent: True when the object is ours in the bucket, False after a spurious 412/409.

        A 412 is told apart from a fence by reading the key back (a lost response of our own attempt
        leaves our bytes there).
        """
        try:
            self._store.put(key, data, if_none_match=True)
            return True
        except PreconditionFailed:
            state = self._whose(key, data)
            if state == "mine":
                return True  # our earlier attempt landed (a lost response)
            if state == "absent":
                return False  # the key is free: try again
            raise Fenced(f"WAL object {key} already exists: another process fenced node "
                         f"{self._node_id}") from None

    def _note_landed(self, nbytes: int) -> None:
        with self._lock:
            since, self.failing_since, self.last_error = self.failing_since, None, None
            self._last_put_at = self._clock.monotonic()
            self.puts += 1
            self.bytes_put += nbytes
        if since is not None:
            log.warning("node %s: WAL-object uploads resumed after %.1f s of failures", self._node_id,
                        self._clock.monotonic() - since)

    def _note_failure(self, exc: S3StreamError) -> None:
        with self._lock:
            first = self.failing_since is None
            if first:
                self.failing_since = self._clock.monotonic()
            self.last_error = exc
        if first:
            log.warning("node %s: WAL-object upload failed (%s); retrying with backoff, appends are acknowledged "
                        "from the local WAL while buffer.bytes has room", self._node_id, exc)

    def _whose(self, key: str, data: bytes) -> str:
        """After a failed put-if-absent: "mine" (it landed), "absent" (spurious failure) or "theirs"."""
        try:
            return "mine" if self._store.get(key) == data else "theirs"
        except ObjectNotFound:
            return "absent"

    def _check_not_overtaken(self, seq: int) -> None:
        """Before a PUT after a long pause: make sure nobody fenced our namespace meanwhile.

        A writer stalled for longer than WAL-object GC's minimum age could otherwise re-create a sequence
        number that GC already deleted (manifest-protocol.md T1/T2); a re-probe finds the fence above it.
        """
        now = self._clock.monotonic()
        with self._lock:
            last = self._last_put_at
        if last is not None and now - last < self._stale_after_s:
            return
        from s3stream.write.node import latest_wal_seq

        assigned = self._assigned()
        if latest_wal_seq(self._store, self._node_id, after=seq - 1) >= assigned:
            raise Fenced(f"WAL namespace {self._node_id} moved past seq {seq} while this node was paused")


def is_outage(exc: S3StreamError) -> bool:
    """Whether a failed upload may land later by itself (the store is down, slow, refusing or unreachable
    for now, even with an access error an operator can fix). A fence, ``Closed`` or a bug never will."""
    return exc.retriable or isinstance(exc, ObjectStoreError | StoreAccessError | CorruptData)


def wal_chunks(items: Sequence[tuple[str, pa.RecordBatch, tuple[int, ...], tuple[ProducerAppend, ...]]]
               ) -> list[WalChunkInput]:
    """One chunk per log of an object's buffered appends ``(log_id, batch, rolls, producers)``, in buffer order."""
    by_log: dict[str, list[tuple[pa.RecordBatch, tuple[int, ...], tuple[ProducerAppend, ...]]]] = {}
    for log_id, batch, rolls, producers in items:
        by_log.setdefault(log_id, []).append((batch, rolls, producers))
    chunks: list[WalChunkInput] = []
    for log_id, group in by_log.items():
        batches = [b for b, _, _ in group if b.num_rows]
        log_rolls = tuple(sorted({r for _, rs, _ in group for r in rs}))
        if not batches:
            if log_rolls:  # an explicit roll with no record after it: the object still carries the boundary
                empty = pa.RecordBatch.from_pylist([], schema=RECORD_SCHEMA)
                chunks.append(WalChunkInput(log_id, empty, log_rolls[-1:]))
            continue
        batch = batches[0] if len(batches) == 1 else pa.concat_batches(batches)
        chunks.append(WalChunkInput(log_id, batch, log_rolls, tuple(p for _, _, ps in group for p in ps)))
    return chunks
