"""The flush pipeline: every partition's buffered appends on this node become ONE WAL object per flush.

Appends enter :meth:`Uploader.add` in local-WAL order (the caller holds the node's append lock, so the
buffer's order equals the WAL's). A flush is due when the buffer holds ``flush_bytes``, when the
oldest buffered append is ``flush_interval_ms`` old, or when someone asks (``flush()``, ``ack=s3``
waiters at close). The object key ``wal/{node}/{seq}`` is the commit point (put-if-absent), so a flush
needs no manifest write: PUT requests per GiB do not grow with the number of partitions.

Order of effects for one flush (crash points in brackets):
encode -> [flush.before_put] -> PUT if-none-match -> [flush.after_put] -> publish chunks to the
partitions -> resolve ``ack=s3`` futures -> [flush.before_trim] -> trim the local WAL up to the highest
local sequence the object holds. A crash anywhere leaves every acknowledged record in the local WAL or
in the bucket (recovery skips what the bucket already holds).

Losing the put-if-absent race means another process fenced this node's namespace: the node is
:class:`Fenced`, fails every waiter and accepts nothing more. Every other upload failure is an *outage*:
the object is retried (same sequence number, same bytes: sequence numbers are dense, so none is ever
skipped) with capped exponential backoff until it lands, the local WAL keeps everything meanwhile, and
uploads resume by themselves when the store is back. Backpressure: ``add`` callers first wait in
:meth:`wait_for_room` while the buffer holds ``buffer_bytes``, at most ``max_block_ms`` (then
:class:`BufferFull`); nothing is ever dropped. An ``ack=s3`` append carries a future that resolves when its
object is published, or fails with :class:`StoreUnavailable` when that has not happened within
``max_block_ms`` (the flush thread watches the deadlines); during an outage older than ``max_block_ms`` such
appends are refused up front by :meth:`check_available`, so a long outage does not pile up retried appends.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import InvalidStateError, ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa

from s3stream.base import layout
from s3stream.base.clock import Clock
from s3stream.base.crashpoints import CrashPoints
from s3stream.base.errors import (
    BufferFull,
    Closed,
    CorruptData,
    Fenced,
    ObjectNotFound,
    ObjectStoreError,
    PreconditionFailed,
    S3StreamError,
    StoreAccessError,
    StoreUnavailable,
)
from s3stream.base.ids import IdSource
from s3stream.base.records import RECORD_SCHEMA
from s3stream.format.walobject import WalChunkInput, WalObjectIndex, encode_wal_object
from s3stream.objectstore.protocol import ObjectStore

__all__ = ["BufferedAppend", "FlushedObject", "Uploader"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class BufferedAppend:
    """One append waiting for its WAL object (``local_seq`` is its local WAL sequence)."""

    log_id: str
    batch: pa.RecordBatch
    nbytes: int
    local_seq: int
    rolls: tuple[int, ...] = ()
    #: ``ack=s3``: resolves with the WAL object's seq once published (StoreUnavailable after ``max_block_ms``)
    future: concurrent.futures.Future[int] | None = None
    deadline: float = 0.0  # when ``future`` gives up (set by ``add``)


@dataclass(frozen=True, slots=True)
class FlushedObject:
    """A committed WAL object and the appends it holds."""

    key: str
    seq: int
    index: WalObjectIndex
    object_size: int


@dataclass(slots=True)
class _InFlight:
    seq: int
    items: list[BufferedAppend]
    nbytes: int
    future: concurrent.futures.Future[FlushedObject]


@dataclass(slots=True)
class _Buffer:
    items: list[BufferedAppend] = field(default_factory=list)
    nbytes: int = 0
    first_at: float | None = None


class Uploader:
    """Owns the buffer and the flush thread of one node."""

    def __init__(self, store: ObjectStore, *, node_id: str, first_seq: int, flush_interval_ms: int,
                 flush_bytes: int, buffer_bytes: int, clock: Clock, ids: IdSource, crash_points: CrashPoints,
                 on_flushed: Callable[[FlushedObject, list[BufferedAppend]], None],
                 trim_local: Callable[[int], None], stale_after_s: float = 600.0,
                 upload_concurrency: int = 4, max_block_ms: int = 60_000, retry_backoff_ms: int = 100,
                 retry_backoff_max_ms: int = 5_000) -> None:
        self._store = store
        self._node_id = node_id
        self._first_seq = first_seq  # this epoch's first WAL object (the one after its fence)
        self._next_seq = first_seq
        self._interval_s = flush_interval_ms / 1000.0
        self._flush_bytes = flush_bytes
        self._buffer_bytes = max(buffer_bytes, flush_bytes)
        self._clock = clock
        self._ids = ids
        self._crash = crash_points
        self._on_flushed = on_flushed
        self._trim_local = trim_local
        self._cond = threading.Condition()
        self._buf = _Buffer()
        self._inflight: deque[_InFlight] = deque()
        self._inflight_bytes = 0
        self._concurrency = max(1, upload_concurrency)
        self._pool = ThreadPoolExecutor(max_workers=self._concurrency, thread_name_prefix=f"s3stream-put-{node_id}")
        self._publish_lock = threading.Lock()
        self._added = 0
        self._published = 0
        self._taken = 0          # appends cut into objects so far (in buffer order)
        self._flush_target = 0   # flush() waits until the first this-many appends are published
        self._closing = False
        self._failed: BaseException | None = None
        self._unpublished_floor: int | None = None  # lowest_unpublished_seq once a failure dropped the in-flight
        self._max_block_s = max_block_ms / 1000.0
        self._backoff_s = retry_backoff_ms / 1000.0
        self._backoff_max_s = max(retry_backoff_max_ms, retry_backoff_ms) / 1000.0
        self._failing_since: float | None = None  # first failed upload attempt since the last PUT that landed
        self._last_error: S3StreamError | None = None
        self._stop = threading.Event()  # set at close and on failure: cuts a retry's backoff short
        self._awaiting: deque[BufferedAppend] = deque()  # added appends with a future, by deadline
        self.puts = 0
        self.bytes_put = 0
        self._last_put_at: float | None = self._clock.monotonic()
        self._stale_after_s = stale_after_s
        self._thread = threading.Thread(target=self._run, name=f"s3stream-flush-{node_id}", daemon=True)
        self._thread.start()

    @property
    def node_id(self) -> str:
        return self._node_id

    @property
    def lowest_unpublished_seq(self) -> int:
        """No WAL object below this seq will be published later (a seal's cursor must not pass it)."""
        with self._cond:
            if self._unpublished_floor is not None:
                return self._unpublished_floor  # the node stopped: the failed objects were never published
            return self._inflight[0].seq if self._inflight else self._next_seq

    @property
    def buffered_bytes(self) -> int:
        with self._cond:
            return self._buf.nbytes + self._inflight_bytes

    def check(self) -> None:
        """Raise the error that stopped this node (Fenced, Closed), if any."""
        with self._cond:
            self._check_locked()

    def _check_locked(self) -> None:
        if self._failed is not None:
            if isinstance(self._failed, S3StreamError):
                raise type(self._failed)(str(self._failed))
            raise Closed(f"node {self._node_id} stopped: {self._failed!r}")
        if self._closing:
            raise Closed(f"node {self._node_id} is closed")

    @property
    def failing_for_s(self) -> float:
        """How long WAL-object uploads have been failing (0.0 when the last attempt landed)."""
        with self._cond:
            return 0.0 if self._failing_since is None else self._clock.monotonic() - self._failing_since

    def check_available(self) -> None:
        """For ``ack=s3`` appends, before they write anything: refuse them while uploads have been failing
        for ``max_block_ms`` (each would only wait that long and fail, its retry adding a duplicate)."""
        with self._cond:
            self._check_locked()
            if self._failing_since is None:
                return
            failing_s = self._clock.monotonic() - self._failing_since
            if failing_s >= self._max_block_s:
                raise StoreUnavailable(f"node {self._node_id}: WAL-object uploads have failed for {failing_s:.1f} s "
                                       f"(last error: {self._last_error}); nothing was written, retry later")

    def wait_for_room(self, nbytes: int) -> None:
        """Backpressure: block while the buffer is full (appends wait, never drop), at most ``max_block_ms``.

        Raises:
            BufferFull: still no room after ``max_block_ms``; nothing was written, the caller may retry.
        """
        with self._cond:
            deadline: float | None = None
            while (self._buf.nbytes + self._inflight_bytes + nbytes > self._buffer_bytes
                   and (self._buf.nbytes or self._inflight_bytes)):
                self._check_locked()
                if self._flush_target < self._added:
                    # everything buffered is due now: wake the flush thread, once per new target (waiters
                    # notifying each other on every wake-up would keep the whole pool spinning on the GIL)
                    self._flush_target = self._added
                    self._cond.notify_all()
                now = self._clock.monotonic()
                if deadline is None:
                    deadline = now + self._max_block_s
                if now >= deadline:
                    raise BufferFull(self._buffer_full_message())
                self._cond.wait(min(0.05, deadline - now))
            self._check_locked()

    def _buffer_full_message(self) -> str:
        why = ("" if self._failing_since is None else
               f"; uploads have failed for {self._clock.monotonic() - self._failing_since:.1f} s "
               f"(last error: {self._last_error})")
        return (f"node {self._node_id}: no room for the append after {self._max_block_s * 1000:.0f} ms: "
                f"{self._buf.nbytes + self._inflight_bytes} bytes of buffer.bytes={self._buffer_bytes} are not in "
                f"the object store yet{why}; nothing was written, retry later")

    def add(self, item: BufferedAppend) -> None:
        """Buffer an append (caller holds the node's append lock, so order == local WAL order)."""
        with self._cond:
            self._check_locked()
            first = self._buf.first_at is None
            if first:
                self._buf.first_at = self._clock.monotonic()
            self._buf.items.append(item)
            self._buf.nbytes += item.nbytes
            self._added += 1
            if item.future is not None:
                item.deadline = self._clock.monotonic() + self._max_block_s
                self._awaiting.append(item)
                first = first or len(self._awaiting) == 1  # the flush thread watches its deadline
            if first or self._buf.nbytes >= self._flush_bytes:
                # the first item starts the flush.interval.ms timer: wake the flush thread so it waits for
                # the interval, not for its idle poll (which would delay ack=s3 appends by up to 0.5 s)
                self._cond.notify_all()

    def flush(self, timeout_s: float | None = None) -> None:
        """Flush everything added so far and wait until it is committed in the bucket."""
        with self._cond:
            self._check_locked_allow_closing()
            target = self._added
            self._flush_target = max(self._flush_target, target)
            self._cond.notify_all()
            deadline = None if timeout_s is None else self._clock.monotonic() + timeout_s
            while self._published < target:
                self._check_locked_allow_closing()
                remaining = None if deadline is None else deadline - self._clock.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError("flush did not complete in time")
                self._cond.wait(0.1 if remaining is None else min(0.1, remaining))

    def _check_locked_allow_closing(self) -> None:
        if self._failed is not None:
            self._check_locked()

    def close(self, timeout_s: float = 60.0) -> None:
        """Flush what is buffered (best effort within ``timeout_s``) and stop the threads.

        While uploads are failing (an outage) nothing is waited for: the local WAL keeps the records and
        the next open of this node uploads them.
        """
        try:
            with self._cond:
                healthy = self._failed is None and self._failing_since is None
            if healthy:
                self.flush(timeout_s)
        finally:
            with self._cond:
                self._closing = True
                self._cond.notify_all()
            self._stop.set()
            self._thread.join(timeout_s)
            self._pool.shutdown(wait=True, cancel_futures=True)

    # -- the flush thread: cut objects, keep up to ``upload_concurrency`` PUTs in flight -----------

    def _due(self) -> bool:
        buf = self._buf
        if not buf.items:
            return False
        if self._taken < self._flush_target or buf.nbytes >= self._flush_bytes:
            return True  # a flush() asked for appends still buffered, or a full object's worth is here
        return buf.first_at is not None and self._clock.monotonic() - buf.first_at >= self._interval_s

    def _take(self) -> tuple[list[BufferedAppend], int]:
        """Cut the next object: the shortest prefix of the buffer reaching ``flush_bytes`` (or all of it)."""
        items = self._buf.items
        total = 0
        n = 0
        while n < len(items) and total < self._flush_bytes:
            total += items[n].nbytes
            n += 1
        taken, rest = items[:n], items[n:]
        self._taken += n
        first_at = self._buf.first_at
        self._buf = _Buffer(rest, self._buf.nbytes - total, first_at if rest else None)
        return taken, total

    def _run(self) -> None:
        while True:
            expired: list[BufferedAppend] = []
            future: concurrent.futures.Future[FlushedObject] | None = None
            with self._cond:
                while not self._closing and self._failed is None:
                    expired = self._expired_locked() if self._awaiting else []
                    if expired or (self._due() and len(self._inflight) < self._concurrency):
                        break
                    timeout = 0.5
                    # with every upload slot busy, only a finished upload (it notifies) can let us go on:
                    # a timeout computed from an overdue flush would be 0, a busy loop holding the GIL
                    if len(self._inflight) < self._concurrency and self._buf.first_at is not None:
                        timeout = max(0.0, self._buf.first_at + self._interval_s - self._clock.monotonic())
                    if self._awaiting:
                        timeout = min(timeout, max(0.0, self._awaiting[0].deadline - self._clock.monotonic()))
                    self._cond.wait(min(timeout, 0.5))
                if not expired:
                    if self._failed is not None or (self._closing and not self._buf.items):
                        return
                    items, nbytes = self._take()
                    seq = self._next_seq
                    self._next_seq += 1
                    future = self._pool.submit(self._upload, seq, items)
                    self._inflight.append(_InFlight(seq, items, nbytes, future))
                    self._inflight_bytes += nbytes
            if future is not None:
                future.add_done_callback(self._on_upload_done)
            for item in expired:
                self._give_up(item)

    def _expired_locked(self) -> list[BufferedAppend]:
        """The ``ack=s3`` appends whose deadline passed before their object was published (oldest first)."""
        now = self._clock.monotonic()
        out: list[BufferedAppend] = []
        while self._awaiting:
            head = self._awaiting[0]
            if head.future is not None and not head.future.done():
                if head.deadline > now:
                    break
                out.append(head)
            self._awaiting.popleft()
        return out

    def _give_up(self, item: BufferedAppend) -> None:
        why = "" if self._last_error is None else f" (last upload error: {self._last_error})"
        error = StoreUnavailable(f"node {self._node_id}: the append's WAL object was not committed within "
                                 f"{self._max_block_s * 1000:.0f} ms{why}; its records are in the local WAL "
                                 "and may still be committed: a retry may duplicate them")
        _settle(item.future, error=error)

    def _on_upload_done(self, _future: concurrent.futures.Future[FlushedObject]) -> None:
        try:
            self._publish_ready()
        except BaseException as exc:  # noqa: BLE001 - a crash while publishing stops the node
            self._fail(exc, [])

    def _publish_ready(self) -> None:
        """Publish completed uploads strictly in sequence order (acks, chunk locations, WAL trim)."""
        with self._publish_lock:
            while True:
                with self._cond:
                    if self._failed is not None or not self._inflight or not self._inflight[0].future.done():
                        return
                    head = self._inflight[0]
                error = head.future.exception()
                if error is not None:
                    self._fail(error, [])
                    return
                flushed = head.future.result()
                self._on_flushed(flushed, head.items)
                for item in head.items:
                    _settle(item.future, flushed.seq)
                self._crash.hit("flush.before_trim")
                self._trim_local(max(i.local_seq for i in head.items))
                with self._cond:
                    self._inflight.popleft()
                    self._inflight_bytes -= head.nbytes
                    self._published += len(head.items)
                    self._cond.notify_all()

    def _fail(self, exc: BaseException, items: list[BufferedAppend]) -> None:
        self._stop.set()
        with self._cond:
            if self._failed is None:
                self._failed = exc
            if self._unpublished_floor is None and self._inflight:
                self._unpublished_floor = self._inflight[0].seq
            pending = items + [i for f in self._inflight for i in f.items] + self._buf.items
            self._inflight.clear()
            self._buf = _Buffer()
            self._inflight_bytes = 0
            self._cond.notify_all()
        err = exc if isinstance(exc, Exception) else Closed(f"node {self._node_id} stopped: {exc!r}")
        for item in pending:
            _settle(item.future, error=err)
        if isinstance(exc, Fenced):
            log.error("node %s was fenced by another process; it stops accepting appends", self._node_id)
        elif not isinstance(exc, Exception):
            log.error("flush of node %s stopped: %r", self._node_id, exc)
        else:
            log.error("flush of node %s failed; the data stays in the local WAL: %s", self._node_id, exc)

    def _upload(self, seq: int, items: list[BufferedAppend]) -> FlushedObject:
        """Encode and PUT one WAL object (runs in the upload pool)."""
        key = layout.wal_key(self._node_id, seq)
        data, index = encode_wal_object(node_id=self._node_id, seq=seq, created_ms=self._clock.now_ms(),
                                        chunks=_chunks_of(items),
                                        committed=(self._first_seq, self.lowest_unpublished_seq))
        self._crash.hit("flush.before_put")
        self._put_until_landed(seq, key, data)
        with self._cond:
            self._last_put_at = self._clock.monotonic()
            self.puts += 1
            self.bytes_put += len(data)
        self._crash.hit("flush.after_put")
        return FlushedObject(key, seq, index, len(data))

    def _put_until_landed(self, seq: int, key: str, data: bytes) -> None:
        """PUT put-if-absent until the object lands; only a fence (or the node stopping) ends the retries.

        An outage must not stop the node: the local WAL holds everything, so the same bytes are retried
        under the same sequence number with capped exponential backoff (a skipped number would be a hole
        in the namespace, and later objects are published only after this one anyway).
        """
        failures = 0
        while True:
            error: S3StreamError | None = None
            try:
                self._check_not_overtaken(seq)
                if self._put_if_absent(key, data):
                    self._note_landed()
                    return
            except S3StreamError as exc:
                if not _is_outage(exc):
                    raise
                error = exc
                self._note_failure(exc)
            failures += 1
            with self._cond:
                stopping = self._closing or self._failed is not None
            if stopping:  # close() gave up on flushing, or the node stopped: the local WAL keeps the data
                raise error if error is not None else Closed(f"node {self._node_id} stopped before {key} landed")
            delay = min(self._backoff_max_s, self._backoff_s * 2.0 ** min(failures - 1, 30))
            delay *= self._ids.uniform(0.5, 1.0)
            log.warning("WAL object PUT %s failed (%s); retry %d in %.2fs", key,
                        error or "a spurious 412/409 on a free key", failures, delay)
            self._clock.wait(self._stop, delay)

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

    def _note_landed(self) -> None:
        with self._cond:
            since, self._failing_since, self._last_error = self._failing_since, None, None
        if since is not None:
            log.warning("node %s: WAL-object uploads resumed after %.1f s of failures", self._node_id,
                        self._clock.monotonic() - since)

    def _note_failure(self, exc: S3StreamError) -> None:
        with self._cond:
            first = self._failing_since is None
            if first:
                self._failing_since = self._clock.monotonic()
            self._last_error = exc
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
        if self._last_put_at is not None and now - self._last_put_at < self._stale_after_s:
            return
        from s3stream.write.node import latest_wal_seq

        with self._cond:
            assigned = self._next_seq  # sequences below this are ours (some may be in flight right now)
        if latest_wal_seq(self._store, self._node_id, after=seq - 1) >= assigned:
            raise Fenced(f"WAL namespace {self._node_id} moved past seq {seq} while this node was paused")


def _settle(future: concurrent.futures.Future[int] | None, seq: int = -1, *, error: BaseException | None = None
            ) -> None:
    """Resolve an append's future unless it is resolved already (published, failed or given up)."""
    if future is None or future.done():
        return
    try:
        if error is None:
            future.set_result(seq)
        else:
            future.set_exception(error)
    except InvalidStateError:  # resolved by another thread in between
        pass


def _is_outage(exc: S3StreamError) -> bool:
    """Whether a failed upload may land later by itself (the store is down, slow, refusing or unreachable
    for now, even with an access error an operator can fix). A fence, ``Closed`` or a bug never will."""
    return exc.retriable or isinstance(exc, ObjectStoreError | StoreAccessError | CorruptData)


def _chunks_of(items: list[BufferedAppend]) -> list[WalChunkInput]:
    by_log: dict[str, list[BufferedAppend]] = {}
    for item in items:
        by_log.setdefault(item.log_id, []).append(item)
    chunks: list[WalChunkInput] = []
    for log_id, group in by_log.items():
        batches = [g.batch for g in group if g.batch.num_rows]
        rolls = tuple(sorted({r for g in group for r in g.rolls}))
        if not batches:
            if rolls:  # an explicit roll with no record after it: the object still carries the boundary
                chunks.append(WalChunkInput(log_id, pa.RecordBatch.from_pylist([], schema=RECORD_SCHEMA), rolls[-1:]))
            continue
        batch = batches[0] if len(batches) == 1 else pa.concat_batches(batches)
        chunks.append(WalChunkInput(log_id, batch, rolls))
    return chunks
