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

The flush thread only schedules :meth:`Uploader.step` (with ``background=manual`` the caller runs it, uploading
inline, one PUT attempt per step: a failed attempt leaves the object in flight, and a later step retries it once
its backoff is over); one object's PUT and its retries are :mod:`s3stream.write.walput`.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from s3stream.base import layout
from s3stream.base.clock import Clock
from s3stream.base.crashpoints import CrashPoints
from s3stream.base.errors import BufferFull, Closed, Fenced, S3StreamError, StoreUnavailable
from s3stream.base.futures import settle
from s3stream.base.ids import IdSource
from s3stream.base.producer import ProducerAppend
from s3stream.format.walobject import WalObjectIndex, encode_wal_object
from s3stream.objectstore.protocol import ObjectStore
from s3stream.write.walput import WalPutter, wal_chunks

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
    producers: tuple[ProducerAppend, ...] = ()  # idempotent producers' batches in ``batch``
    #: written in an epoch of its log that another node ended (:meth:`Uploader.discard`): never uploaded
    stale: bool = False


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
    # without an upload pool (manual mode) an object is PUT one attempt per step: its key, bytes and index
    # once encoded (every retry sends the same), the failed attempts so far, and when the next one is due
    encoded: tuple[str, bytes, WalObjectIndex] | None = None
    failures: int = 0
    retry_at: float = 0.0


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
                 retry_backoff_max_ms: int = 5_000, background: bool = True) -> None:
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
        # background=False (the store's background=manual): no flush thread and no upload pool; whoever drives
        # the node calls step(), which uploads inline, and the blocking calls step until they are done
        self._background = background
        self._pool = (ThreadPoolExecutor(max_workers=self._concurrency, thread_name_prefix=f"s3stream-put-{node_id}")
                      if background else None)
        self._publish_lock = threading.Lock()
        self._added = 0
        self._published = 0
        self._taken = 0          # appends cut into objects so far (in buffer order)
        self._flush_target = 0   # flush() waits until the first this-many appends are published
        self._closing = False
        self._failed: BaseException | None = None
        self._unpublished_floor: int | None = None  # lowest_unpublished_seq once a failure dropped the in-flight
        self._max_block_s = max_block_ms / 1000.0
        self._stop = threading.Event()  # set at close and on failure: cuts a retry's backoff short
        self._putter = WalPutter(store, node_id=node_id, clock=clock, ids=ids, stop=self._stop,
                                 stopping=self._stopping, assigned=self._assigned, stale_after_s=stale_after_s,
                                 retry_backoff_ms=retry_backoff_ms, retry_backoff_max_ms=retry_backoff_max_ms)
        self._awaiting: deque[BufferedAppend] = deque()  # added appends with a future, by deadline
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._run, name=f"s3stream-flush-{node_id}", daemon=True)
            self._thread.start()

    @property
    def node_id(self) -> str:
        return self._node_id

    @property
    def puts(self) -> int:
        """WAL objects this node has put (landed)."""
        return self._putter.puts

    @property
    def bytes_put(self) -> int:
        return self._putter.bytes_put

    def _stopping(self) -> bool:
        with self._cond:
            return self._closing or self._failed is not None

    def _assigned(self) -> int:
        with self._cond:
            return self._next_seq

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

    @property
    def fenced(self) -> bool:
        """Whether another process fenced this node (its uploads stopped for good: see :class:`Fenced`)."""
        with self._cond:
            return isinstance(self._failed, Fenced)

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
        return self._putter.failing_for_s() or 0.0

    def check_available(self) -> None:
        """For ``ack=s3`` appends, before they write anything: refuse them while uploads have been failing
        for ``max_block_ms`` (each would only wait that long and fail, its retry adding a duplicate)."""
        with self._cond:
            self._check_locked()
        failing_s = self._putter.failing_for_s()
        if failing_s is not None and failing_s >= self._max_block_s:
            raise StoreUnavailable(f"node {self._node_id}: WAL-object uploads have failed for {failing_s:.1f} s "
                                   f"(last error: {self._putter.last_error}); nothing was written, retry later")

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
                if now >= deadline or not self._background:  # manual mode: nothing else makes room meanwhile
                    raise BufferFull(self._buffer_full_message())
                self._cond.wait(min(0.05, deadline - now))
            self._check_locked()

    def _buffer_full_message(self) -> str:
        failing_s = self._putter.failing_for_s()
        why = ("" if failing_s is None else
               f"; uploads have failed for {failing_s:.1f} s (last error: {self._putter.last_error})")
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

    def discard(self, log_id: str, error: S3StreamError) -> int:
        """Never upload the buffered appends of ``log_id`` not cut into a WAL object yet: this node takes the log
        back from another node, which took it over after they were written (their offsets are that node's now,
        and the new ones start where it stopped). Their ``ack=s3`` futures fail with ``error``; they keep their
        places in the buffer (a WAL object holds no chunk of them). Returns how many were dropped."""
        with self._cond:
            dropped = [i for i in self._buf.items if i.log_id == log_id and not i.stale]
            for item in dropped:
                item.stale = True
        for item in dropped:
            settle(item.future, error=error)
        return len(dropped)

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
                if not self._background:  # manual mode: this thread is the flush thread
                    self._cond.release()
                    try:
                        progressed = self._step_or_pass_time()
                    finally:
                        self._cond.acquire()
                    if progressed:
                        continue
                self._cond.wait(0.1 if remaining is None else min(0.1, remaining))

    def settle(self, future: concurrent.futures.Future[Any]) -> None:
        """Manual mode: step until ``future`` (an ``ack=s3`` append's) is done: everything buffered is due now,
        and pacing time passes to the next retry or deadline when no step is (so an outage ends the wait with
        ``StoreUnavailable`` after ``max_block_ms``, as the flush thread would)."""
        with self._cond:
            self._flush_target = max(self._flush_target, self._added)
        while not future.done() and self._step_or_pass_time():
            pass

    def _step_or_pass_time(self) -> bool:
        """Manual mode: :meth:`step`; when nothing was due, let pacing time pass until the next thing is (a
        retry's backoff, an ``ack=s3`` deadline, the flush interval). False when nothing is pending at all."""
        if self.step():
            return True
        with self._cond:
            if self._failed is not None:
                return False
            due = [f.retry_at for f in self._inflight if f.failures and not f.future.done()]
            due.extend(i.deadline for i in self._awaiting if i.future is not None and not i.future.done())
            if self._buf.first_at is not None and len(self._inflight) < self._concurrency:
                due.append(self._buf.first_at + self._interval_s)  # (with every slot busy: a retry comes first)
        if not due:
            return False
        wait_s = min(due) - self._clock.monotonic()
        if wait_s > 0:
            self._clock.wait(self._stop, wait_s)
        return True

    def _check_locked_allow_closing(self) -> None:
        if self._failed is not None:
            self._check_locked()  # closing alone is no error here

    def close(self, timeout_s: float = 60.0) -> None:
        """Flush what is buffered (best effort within ``timeout_s``) and stop the threads.

        While uploads are failing (an outage) nothing is waited for: the local WAL keeps the records and
        the next open of this node uploads them.
        """
        try:
            with self._cond:
                healthy = self._failed is None and self._putter.failing_since is None
            if healthy:
                self.flush(timeout_s)
        finally:
            with self._cond:
                self._closing = True
                self._cond.notify_all()
            self._stop.set()
            if self._thread is not None:
                self._thread.join(timeout_s)
            else:  # manual mode: what the flush thread would still cut or retry at close (it fails: the node stops)
                while self.step():
                    pass
            if self._pool is not None:
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

    def step(self) -> bool:
        """Give up ``ack=s3`` waits past their deadline; cut the next WAL object when one is due (and a slot is
        free) or the node closes, and upload it: in the pool (published when done), or without one (manual
        mode) here, published before this returns. True when it did something."""
        with self._cond:
            retry = None if self._background else self._retry_due_locked()
            if self._failed is not None or (self._closing and not self._buf.items and retry is None):
                return False
            expired = self._expired_locked() if self._awaiting else []
            flight = self._cut_locked() if retry is None and self._buf.items and (self._closing or (
                self._due() and len(self._inflight) < self._concurrency)) else None
        for item in expired:
            self._give_up(item)
        if retry is not None:
            self._attempt(retry)
        elif flight is not None:
            flight.future.add_done_callback(self._on_upload_done)
            if self._pool is not None:
                job = self._pool.submit(self._upload_into, flight)
                # cancelled by close(): its object fails publication (the node stops), as the pool's own would
                job.add_done_callback(lambda done: done.cancelled() and flight.future.cancel())
            elif flight.future.set_running_or_notify_cancel():
                self._attempt(flight)  # its first PUT attempt; when it lands the done callback publishes it, here
        return bool(expired) or retry is not None or flight is not None

    def _retry_due_locked(self) -> _InFlight | None:
        """Manual mode: the oldest object whose last PUT attempt failed and whose backoff is over (at close:
        at once, as a retrying upload thread stops waiting then)."""
        now = self._clock.monotonic()
        for f in self._inflight:
            if f.failures and not f.future.done() and (self._closing or f.retry_at <= now):
                return f
        return None

    def _attempt(self, flight: _InFlight) -> None:
        """Manual mode: one PUT attempt of ``flight``. Its future settles when the object landed (the done callback
        publishes it) or failed for good (the node stops); after an outage the next attempt waits for its backoff
        (:meth:`WalPutter.retry_delay`), made by a later step."""
        try:
            if flight.encoded is None:
                flight.encoded = self._encode(flight.seq, flight.items)
            key, data, index = flight.encoded
            outcome = self._putter.attempt(flight.seq, key, data)
            if outcome is not True:
                flight.failures += 1
                flight.retry_at = self._clock.monotonic() + self._putter.retry_delay(flight.failures, outcome, key)
                return
            self._crash.hit("flush.after_put")
        except BaseException as exc:  # noqa: BLE001 - the future carries it, as the pool's did
            flight.future.set_exception(exc)
            return
        flight.future.set_result(FlushedObject(key, flight.seq, index, len(data)))

    def _cut_locked(self) -> _InFlight:
        """Cut the next object and give it the next seq (caller holds the lock)."""
        items, nbytes = self._take()
        seq = self._next_seq
        self._next_seq += 1
        flight = _InFlight(seq, items, nbytes, concurrent.futures.Future())
        self._inflight.append(flight)
        self._inflight_bytes += nbytes
        return flight

    def _upload_into(self, flight: _InFlight) -> None:
        """Upload ``flight``, settling its future (an upload's crash too: publication fails the node)."""
        if not flight.future.set_running_or_notify_cancel():
            return
        try:
            flight.future.set_result(self._upload(flight.seq, flight.items))
        except BaseException as exc:  # noqa: BLE001 - the future carries it, as the pool's did
            flight.future.set_exception(exc)

    def _run(self) -> None:
        """The flush thread: wait until :meth:`step` has work, then run it."""
        while True:
            with self._cond:
                while not self._closing and self._failed is None and not self._has_work_locked():
                    timeout = 0.5
                    # with every upload slot busy, only a finished upload (it notifies) can let us go on:
                    # a timeout computed from an overdue flush would be 0, a busy loop holding the GIL
                    if len(self._inflight) < self._concurrency and self._buf.first_at is not None:
                        timeout = max(0.0, self._buf.first_at + self._interval_s - self._clock.monotonic())
                    if self._awaiting:
                        timeout = min(timeout, max(0.0, self._awaiting[0].deadline - self._clock.monotonic()))
                    self._cond.wait(min(timeout, 0.5))
                if self._failed is not None or (self._closing and not self._buf.items):
                    return
            self.step()

    def _has_work_locked(self) -> bool:
        """An ``ack=s3`` wait is past its deadline, or an object is due and an upload slot is free."""
        if self._due() and len(self._inflight) < self._concurrency:
            return True
        now = self._clock.monotonic()
        while self._awaiting:
            head = self._awaiting[0]
            if head.future is not None and not head.future.done():
                return head.deadline <= now
            self._awaiting.popleft()
        return False

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
        last_error = self._putter.last_error
        why = "" if last_error is None else f" (last upload error: {last_error})"
        error = StoreUnavailable(f"node {self._node_id}: the append's WAL object was not committed within "
                                 f"{self._max_block_s * 1000:.0f} ms{why}; its records are in the local WAL "
                                 "and may still be committed: a retry may duplicate them")
        settle(item.future, error=error)

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
                    settle(item.future, flushed.seq)
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
            settle(item.future, error=err)
        if isinstance(exc, Fenced):
            log.error("node %s was fenced by another process; it stops accepting appends", self._node_id)
        elif not isinstance(exc, Exception):
            log.error("flush of node %s stopped: %r", self._node_id, exc)
        else:
            log.error("flush of node %s failed; the data stays in the local WAL: %s", self._node_id, exc)

    def _upload(self, seq: int, items: list[BufferedAppend]) -> FlushedObject:
        """Encode and PUT one WAL object until it lands (in the upload pool; manual mode: :meth:`_attempt`)."""
        key, data, index = self._encode(seq, items)
        self._putter.put_until_landed(seq, key, data)
        self._crash.hit("flush.after_put")
        return FlushedObject(key, seq, index, len(data))

    def _encode(self, seq: int, items: list[BufferedAppend]) -> tuple[str, bytes, WalObjectIndex]:
        """One WAL object's key, bytes and index (encoded once: every attempt PUTs the same bytes)."""
        key = layout.wal_key(self._node_id, seq)
        data, index = encode_wal_object(node_id=self._node_id, seq=seq, created_ms=self._clock.now_ms(),
                                        chunks=wal_chunks([(i.log_id, i.batch, i.rolls, i.producers)
                                                           for i in items if not i.stale]),
                                        committed=(self._first_seq, self.lowest_unpublished_seq))
        self._crash.hit("flush.before_put")
        return key, data, index


