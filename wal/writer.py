"""WalWriter: a durable, ordered log of opaque payloads on local disk, with group commit.

Vocabulary: an *entry* is one payload and its *seq* (consecutive from 0, never reused, continued after
recovery and after trim); an entry is *durable* once its bytes are written and fsynced; a *batch* is the
run of queued entries one syncer pass writes with one ``writev`` and one fsync.

How an append flows: the caller thread checksums its payload (outside any lock), then, under the lock,
gets the next seq, builds the 20-byte frame header and queues ``(header, payload)``. A background
*syncer* thread takes everything queued (up to ``max_batch_bytes`` and to the room left in the active
file), writes it in one ``writev`` and hands the batch to one of ``syncs_in_flight`` *fsyncer* threads.
An fsync makes durable every byte written before it started, so when one returns, its batch and every
batch written before it are published (in seq order) and their waiters woken. With one fsync in flight
this is classic group commit: appends queue up during the fsync and share the next one, so an append
waits for the fsync in progress and then its own. With two (the default), an append that arrives during
an fsync is written and fsynced at once instead of waiting for it: under a disk shared with other
writers, where fsync latency swings, the ack latency tail is about one fsync instead of two. Later
appends still queue behind the fsyncs in flight and share the next one, so fsyncs stay few. A blocking
:meth:`WalWriter.append` sleeps on a private, pre-acquired lock that is released when its seq is durable
(so a batch wakes exactly its own appenders, not every waiter); only :meth:`WalWriter.append_async`
creates futures.

Invariants:

* seqs are assigned under one lock in queue order, and batches leave the queue in that order, so the
  files hold consecutive seqs and an entry is durable only when every smaller seq is;
* the active file (the last) is the only one written; it rolls when the next entry would push it past
  ``file_bytes`` (a single larger entry gets a file of its own), and only once it is synced with no
  fsync in flight, so every file but the last is complete on disk (recovery relies on it) and no fsync
  ever runs on a closed file; :meth:`WalWriter.trim` never deletes it;
* a seq is published durable only after an fsync that started after its batch was written returned;
* after a write or fsync error the writer fails permanently: every written-but-unpublished, queued and
  later append raises :class:`WalError` (what reached the disk is known only to the next recovery);
  when a full disk failed a write or a new file (not an fsync), they raise :class:`WalFull` and
  :meth:`WalWriter.resume` runs that recovery in place, once space returns;
* payloads are never copied into a frame buffer: header and payload go to ``writev`` side by side.
"""

from __future__ import annotations

import errno
import logging
import os
import struct
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from types import TracebackType

from wal.errors import WalClosed, WalError, WalFull
from wal.frame import (
    FILE_HEADER_SIZE,
    MAX_PAYLOAD_BYTES,
    WalEntry,
    encode_file_header,
    encode_frame_header,
    payload_crc,
)
from wal.queue import Batch, FrameQueue, Waiter, wake
from wal.recovery import FileExtent, WalFile, file_name, read_entries, recover
from wal.storage import FileWalStorage, TrimPointStorage, WalLockHandle, WalStorage

__all__ = ["WalWriter"]

LOG = logging.getLogger(__name__)

# the persisted trim point: magic, version, seq, CRC32C of the preceding bytes
_TRIM_POINT = struct.Struct("<4sBQ")
_TRIM_MAGIC = b"SWTP"
_TRIM_CRC = struct.Struct("<I")


class WalWriter:
    """The single writer of one WAL directory (or storage); thread-safe; a context manager."""

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        storage: WalStorage | None = None,
        file_bytes: int = 64 * 1024 * 1024,
        fsync: bool = True,
        max_batch_bytes: int = 16 * 1024 * 1024,
        lock: bool = True,
        syncs_in_flight: int = 2,
        recycle: bool = True,
    ) -> None:
        """Open (creating if needed), lock and recover the WAL.

        Args:
            directory: a local directory (uses :class:`FileWalStorage`); exclusive with ``storage``.
            storage: any :class:`WalStorage` (e.g. a ``MemoryWalStorage`` in simulations).
            file_bytes: roll to a new file once the active one reaches this size.
            fsync: ``False`` skips the per-batch fsync (entries are then only written, not durable,
                until :meth:`close`); for tests and benchmarks.
            max_batch_bytes: upper bound of one write + fsync (a larger single entry goes alone).
            lock: take the storage's exclusive writer lock (``DIR/LOCK`` for a directory). Only pass
                ``False`` when the caller guarantees exclusivity otherwise: recovery truncates torn
                tails, which would destroy a live writer's in-flight batch.
            syncs_in_flight: fsyncs that may run at once, each covering the batches written before it
                started (1: write, fsync, then the next batch; see the module docstring).
            recycle: in a directory, reuse a trimmed file's space for the next file, so a sync flushes data
                without a journal commit (see :class:`~wal.storage.FileWalStorage`).

        Raises:
            ValueError: not exactly one of ``directory``/``storage``, or a non-positive size.
            WalLocked: another writer holds the lock.
            WalCorrupt: recovery found damage it must not repair by truncation.
            WalError: the storage failed.
        """
        if (directory is None) == (storage is None):
            raise ValueError("WalWriter: pass exactly one of directory or storage")
        if file_bytes <= FILE_HEADER_SIZE or max_batch_bytes <= 0 or syncs_in_flight < 1:
            raise ValueError(f"WalWriter: file_bytes must exceed {FILE_HEADER_SIZE}, max_batch_bytes be > 0, "
                             "syncs_in_flight be >= 1")
        self._storage = storage if storage is not None else _open_dir(directory, recycle)
        self._file_bytes = file_bytes
        self._max_batch_bytes = max_batch_bytes
        self._fsync = fsync
        self._lock_handle: WalLockHandle | None = self._storage.lock() if lock else None
        self._marks = self._storage if isinstance(self._storage, TrimPointStorage) else None
        try:
            recovered = recover(self._storage)
            self._trim_seq = self._load_trim_point(recovered.next_seq)  # every seq below it was trimmed
        except BaseException:
            self._release()
            raise
        self._trim_saved = self._trim_seq  # the trim point last saved (synced only at open and close)
        self._trim_synced = True
        self._trim_save_failed = False
        self._mu = threading.Lock()
        self._work = threading.Condition(self._mu)  # the syncer waits here for queued entries
        self._files = recovered.files
        self._next_seq = recovered.next_seq  # the seq the next append gets
        self._durable_end = recovered.next_seq  # every seq below this is durable
        self._written_end = recovered.next_seq  # every seq below this is written (maybe not yet durable)
        self._queue = FrameQueue()  # entries not yet taken by the syncer, with their waiters
        self._written: deque[Batch] = deque()  # written batches not yet durable, in seq order
        self._unsynced_bytes = 0  # their bytes (in the active file, not yet in its size_bytes)
        self._max_in_flight = syncs_in_flight
        self._in_flight = 0  # fsync calls running (none runs while a file rolls)
        self._rolling = False  # an fsyncer is rolling the full active file
        self._to_sync: deque[Batch] = deque()  # written batches waiting for an fsyncer
        self._sync_work = threading.Condition(self._mu)  # fsyncers wait here for batches
        self._syncer_done = False
        self._size_bytes = sum(f.size_bytes for f in self._files)
        self._closing = False
        self._failure: BaseException | None = None
        self._resumable = False  # every failure so far was a full disk at a write or a new file
        self._last_failure: BaseException | None = None  # the failure the last resume cleared
        self._generation = 0  # counts resumes: a blocking append queued before one failed
        self._trim_mu = threading.Lock()
        self._syncer = threading.Thread(target=self._run, name=f"wal-syncer {self.location}", daemon=True)
        self._fsyncers = [threading.Thread(target=self._run_fsyncer, name=f"wal-fsync-{i} {self.location}",
                                           daemon=True) for i in range(syncs_in_flight if fsync else 0)]
        self._internal = {self._syncer, *self._fsyncers}
        active = self._files[-1]
        if active.size_bytes >= file_bytes and active.first_seq < self._next_seq and not self._roll_or_fail():
            self._release()
            raise self._failed_error(f"WAL {self.location}: cannot roll the full active file")
        for thread in self._fsyncers:
            thread.start()
        self._syncer.start()

    # -- appending ----------------------------------------------------------------------------------

    def append(self, payload: bytes | bytearray | memoryview) -> int:
        """Append one entry and return its seq once it is durable (written and fsynced).

        Raises:
            WalClosed: the writer was closed.
            WalError: the payload exceeds ``MAX_PAYLOAD_BYTES``, or the writer failed.
        """
        if threading.current_thread() in self._internal:
            raise WalError("append() on the WAL syncer thread (a callback) would deadlock; use append_async")
        gate = threading.Lock()
        gate.acquire()
        seq, generation = self._enqueue(payload, gate)
        gate.acquire()  # the syncer releases it once seq is durable or the writer failed
        if self._generation != generation:  # a full disk failed it, and the writer was resumed since
            error = WalFull(f"WAL {self.location}: append of seq {seq} failed: no space left")
            error.__cause__ = self._last_failure
            raise error
        if self._durable_end <= seq:  # only grows within a generation, and is set before the gate opens
            raise self._failed_error(f"WAL {self.location}: append of seq {seq} failed")
        return seq

    def append_async(self, payload: bytes | bytearray | memoryview) -> Future[int]:
        """Append one entry without waiting: the future resolves with its seq once it is durable.

        Caller errors (closed writer, oversized payload, failed writer) raise here; a later write
        failure sets the future's exception. Callbacks run on the syncer thread and must not block.
        """
        future: Future[int] = Future()
        future.set_running_or_notify_cancel()  # a queued write cannot be taken back
        self._enqueue(payload, future)
        return future

    def _enqueue(self, payload: bytes | bytearray | memoryview, waiter: Waiter) -> tuple[int, int]:
        """Queue one entry: its seq and the writer's generation (see :meth:`resume`)."""
        data = payload if isinstance(payload, bytes) else bytes(payload)  # the queue must not see mutation
        if len(data) > MAX_PAYLOAD_BYTES:
            raise WalError(f"WAL payload of {len(data)} bytes exceeds the {MAX_PAYLOAD_BYTES}-byte limit")
        crc = payload_crc(data)  # the expensive part, outside the lock
        with self._mu:
            self._check_usable()
            seq = self._next_seq
            self._queue.push(encode_frame_header(seq, len(data), crc), data, waiter)
            self._next_seq = seq + 1
            self._work.notify()
            return seq, self._generation

    def _check_usable(self) -> None:
        """Raise unless appends are accepted (caller holds the lock)."""
        if self._closing:
            raise WalClosed(f"WAL {self.location} is closed")
        if self._failure is not None:
            what = "stopped: no space left; resume() once space returns" if self._resumable else (
                "failed earlier and must be reopened")
            raise self._failed_error(f"WAL {self.location} {what}")

    def _failed_error(self, message: str) -> WalError:
        """The error for appends the failure stopped: :class:`WalFull` when resumable; caused by the failure."""
        error = (WalFull if self._resumable else WalError)(message)
        error.__cause__ = self._failure
        return error

    # -- the syncer ---------------------------------------------------------------------------------

    def _run(self) -> None:
        """The syncer thread: take a batch, write it, hand it to an fsyncer (or, without fsync, publish it);
        roll when the next entry does not fit; until closed and drained, then stop the fsyncers."""
        while (batch := self._take_batch()) is not None:
            if batch.count == 0:
                ok = self._roll_or_fail()  # _take_batch made sure no fsync is in flight
            elif not self._write(batch):
                ok = False
            elif self._fsync:
                with self._mu:
                    self._to_sync.append(batch)
                    self._sync_work.notify()
                ok = True
            else:
                ok = self._publish(batch)
            if not ok:
                break
        with self._mu:
            self._syncer_done = True
            self._sync_work.notify_all()
        for thread in self._fsyncers:
            thread.join()

    def _take_batch(self) -> Batch | None:
        """Wait for queued entries and a free fsync slot, and take the longest prefix that fits (``None``:
        closed and drained, or failed).

        The batch fits both ``max_batch_bytes`` and the room left in the active file (written bytes
        included); when not even the first queued entry fits a non-empty active file, an empty batch asks
        for a roll first, once no fsync is in flight. A single entry larger than a whole file goes alone
        into a fresh file. A taken batch counts as written (and as an fsync in flight) from here on.
        """
        with self._mu:
            while True:
                if self._failure is not None or (not self._queue and self._closing):
                    return None
                if self._queue and not self._rolling and self._in_flight < self._max_in_flight:
                    active = self._files[-1]
                    room = self._file_bytes - active.size_bytes - self._unsynced_bytes
                    if self._queue.first_size() <= room or active.first_seq == self._written_end:
                        batch = self._queue.take(min(self._max_batch_bytes, max(room, 1)), self._written_end, active)
                        self._written_end += batch.count
                        if self._fsync:
                            self._written.append(batch)
                            self._unsynced_bytes += batch.size_bytes
                            self._in_flight += 1
                        return batch
                    if self._in_flight == 0:
                        return Batch(self._written_end, [], [], 0, active)
                self._work.wait()

    def _write(self, batch: Batch) -> bool:
        """Write a batch with one ``writev``; on failure fail the writer."""
        try:
            self._storage.append(batch.file.name, batch.parts)
        except OSError as exc:
            self._fail(exc, resumable=_no_space(exc))
            return False
        except Exception as exc:  # a storage bug must fail the appenders, not strand them
            LOG.exception("WAL %s: unexpected error in the syncer", self.location)
            self._fail(exc)
            return False
        return True

    def _run_fsyncer(self) -> None:
        """An fsyncer thread: fsync a written batch's file, then publish every batch written before it."""
        while True:
            with self._mu:
                while not self._to_sync and not self._syncer_done and self._failure is None:
                    self._sync_work.wait()
                if self._failure is not None or not self._to_sync:
                    return
                batch = self._to_sync.popleft()
            try:
                self._storage.fsync(batch.file.name)
            except OSError as exc:
                self._fail(exc)
                return
            except Exception as exc:  # a storage bug must fail the appenders, not strand them
                LOG.exception("WAL %s: unexpected error in an fsyncer", self.location)
                self._fail(exc)
                return
            if not self._synced(batch):
                return

    def _synced(self, batch: Batch) -> bool:
        """``batch``'s fsync returned: it and every batch written before it are durable (the fsync started
        after their writes). Publish them in seq order; the fsyncer that leaves a full file with nothing in
        flight rolls it before waking them. Returns whether the writer is still healthy."""
        end = batch.first_seq + batch.count
        done: list[Batch] = []
        with self._mu:
            self._in_flight -= 1
            while self._written and self._written[0].first_seq < end:
                b = self._written.popleft()
                b.file.size_bytes += b.size_bytes
                self._size_bytes += b.size_bytes
                self._unsynced_bytes -= b.size_bytes
                self._durable_end = b.first_seq + b.count
                done.append(b)
            roll = (self._in_flight == 0 and self._files[-1].size_bytes >= self._file_bytes
                    and self._files[-1].first_seq < self._durable_end and self._failure is None)
            self._rolling = roll
            self._work.notify()
        healthy = not roll or self._roll_or_fail()
        if roll:
            with self._mu:
                self._rolling = False
                self._work.notify()
        for b in done:
            wake(b.waiters, b.first_seq)
        return healthy

    def _publish(self, batch: Batch) -> bool:
        """Without fsync: mark a written batch durable, roll if the file is full, then wake its waiters.

        Rolling before waking means that once an append returns, the file it landed in is no longer
        active when it is full (so a ``trim`` right after can delete it). Returns whether the writer
        is still healthy (a failed roll fails it; the batch itself is published either way).
        """
        with self._mu:
            batch.file.size_bytes += batch.size_bytes
            self._size_bytes += batch.size_bytes
            self._durable_end = batch.first_seq + batch.count
            full = batch.file.size_bytes >= self._file_bytes
        healthy = not full or self._roll_or_fail()
        wake(batch.waiters, batch.first_seq)
        return healthy

    def _roll_or_fail(self) -> bool:
        """Start a new active file at the next durable seq; on failure fail the writer.

        The full file is synced first even with ``fsync=False``: recovery relies on every file but
        the last being complete, so a file must never exist while its predecessor's tail can vanish.
        """
        with self._mu:
            first_seq = self._durable_end
            previous = self._files[-1].name
        name = file_name(first_seq)
        step = "fsync"
        try:
            if not self._fsync:
                self._storage.fsync(previous)
            step = "create"
            self._storage.create(name, encode_file_header(first_seq))
        except OSError as exc:
            self._fail(exc, resumable=step == "create" and _no_space(exc))
            return False
        except Exception as exc:  # a storage bug must fail the appenders, not strand them
            LOG.exception("WAL %s: unexpected error while rolling to %s", self.location, name)
            self._fail(exc)
            return False
        with self._mu:
            self._files.append(WalFile(name, first_seq, FILE_HEADER_SIZE))
            self._size_bytes += FILE_HEADER_SIZE
        return True

    def _fail(self, exc: Exception, *, resumable: bool = False) -> None:
        """Fail the writer: every written-but-not-durable, queued and later append raises (:class:`WalFull`
        while every failure was ``resumable``, i.e. a full disk at a write: see :meth:`resume`)."""
        LOG.error("WAL %s: write failed, the writer stops: %s", self.location, exc)
        with self._mu:
            if self._failure is None:
                self._failure = exc
                self._resumable = resumable
            else:
                self._resumable = self._resumable and resumable
            error = self._failed_error(f"WAL {self.location}: write failed: {exc}")
            error.__cause__ = exc
            written, self._written = list(self._written), deque()
            self._to_sync.clear()
            waiters = [w for b in written for w in b.waiters] + self._queue.clear()
            self._work.notify_all()
            self._sync_work.notify_all()
        wake(waiters, 0, error)

    def resume(self) -> None:
        """Accept appends again after a full disk stopped the writer (:class:`WalFull`); no-op when running.

        Recovers the files in place, as a reopen would (the lock is kept): what the failed write left is
        cut as a torn tail, or kept where whole frames of it reached the file (their appends' outcome is
        unknown, as after a crash). Seqs of failed appends not kept are given to new appends, so a caller
        must hold none of them (s3stream publishes and trims everything first). If the disk is still full,
        the next write stops the writer again.

        Raises:
            WalClosed: the writer was closed.
            WalError: the writer failed otherwise (an fsync, an I/O error: its durable contents are unknown,
                reopen it), or recovery failed (:class:`~wal.errors.WalCorrupt` for damage).
        """
        if threading.current_thread() in self._internal:
            raise WalError("resume() from a callback on the WAL syncer thread would deadlock")
        with self._trim_mu:
            with self._mu:
                if self._closing:
                    raise WalClosed(f"WAL {self.location} is closed")
                if self._failure is None:
                    return
                if not self._resumable:
                    raise self._failed_error(f"WAL {self.location} failed earlier and must be reopened")
                syncer = self._syncer
            syncer.join()  # it stops once failed, after its fsyncers returned: nothing writes any more
            try:
                self._storage.close()  # the failed write left descriptors whose ends are stale
                recovered = recover(self._storage)
                trim_seq = self._load_trim_point(recovered.next_seq)
                self._storage.fsync(recovered.files[-1].name)  # what recovery kept is durable before new entries
            except OSError as exc:
                raise WalError(f"WAL {self.location}: resume failed: {exc}") from exc
            with self._mu:
                if self._closing:
                    raise WalClosed(f"WAL {self.location} is closed")
                self._reset(recovered.files, recovered.next_seq, trim_seq)
            LOG.warning("WAL %s: resumed after a full disk; the next seq is %d", self.location, recovered.next_seq)

    def _reset(self, files: list[WalFile], next_seq: int, trim_seq: int) -> None:
        """Take a recovered state and start new threads (caller holds ``_mu`` and ``_trim_mu``; the old
        threads have stopped)."""
        self._files = files
        self._next_seq = self._durable_end = self._written_end = next_seq
        self._trim_seq = self._trim_saved = trim_seq
        self._trim_synced = True
        self._queue = FrameQueue()
        self._written.clear()
        self._to_sync.clear()
        self._unsynced_bytes = self._in_flight = 0
        self._rolling = self._syncer_done = False
        self._size_bytes = sum(f.size_bytes for f in files)
        self._last_failure = self._failure
        self._failure = None
        self._resumable = False
        self._generation += 1
        self._syncer = threading.Thread(target=self._run, name=f"wal-syncer {self.location}", daemon=True)
        self._fsyncers = [threading.Thread(target=self._run_fsyncer, name=f"wal-fsync-{i} {self.location}",
                                           daemon=True) for i in range(len(self._fsyncers))]
        self._internal = {self._syncer, *self._fsyncers}
        for thread in (*self._fsyncers, self._syncer):
            thread.start()

    # -- reading, trimming, closing -----------------------------------------------------------------

    def entries(self, from_seq: int = 0) -> Iterator[WalEntry]:
        """Durable entries with seq >= ``from_seq``, in order, read from the files (for replay).

        The iterator covers what was durable when this was called. Entries trimmed meanwhile are
        skipped; seqs below :attr:`first_seq` are gone.

        Raises:
            WalClosed: the writer was closed.
            WalCorrupt: (while iterating) a file no longer holds what was written.
        """
        with self._mu:
            if self._closing:
                raise WalClosed(f"WAL {self.location} is closed")
            ends = [f.first_seq for f in self._files[1:]] + [self._durable_end]
            extents = [FileExtent(f.name, f.first_seq, end, f.size_bytes)
                       for f, end in zip(self._files, ends, strict=True)]
        return read_entries(self._storage, extents, from_seq)

    def trim(self, upto_seq: int) -> None:
        """Delete every whole file all of whose entries have seq <= ``upto_seq``, except the active one.

        Idempotent; files go oldest first, so a crash midway leaves a contiguous log. The active file is
        kept, so ``upto_seq + 1`` is also saved as the trim point (unsynced; :meth:`close` syncs it) where
        the storage keeps one: a reopened writer's :attr:`trim_seq`, so replay skips what was trimmed.

        Raises:
            WalClosed: the writer was closed.
            WalError: the storage failed to delete a file.
        """
        with self._trim_mu:
            with self._mu:
                if self._closing:
                    raise WalClosed(f"WAL {self.location} is closed")
                self._trim_seq = max(self._trim_seq, min(upto_seq + 1, self._next_seq))
            self._save_trim_point(sync=False)
            while True:
                with self._mu:
                    if self._closing:
                        raise WalClosed(f"WAL {self.location} is closed")
                    if len(self._files) < 2 or self._files[1].first_seq - 1 > upto_seq:
                        return
                    victim = self._files[0]
                try:
                    self._storage.retire(victim.name)
                except OSError as exc:
                    raise WalError(f"WAL {self.location}: cannot delete {victim.name}: {exc}") from exc
                with self._mu:
                    self._files.pop(0)
                    self._size_bytes -= victim.size_bytes

    def close(self) -> None:
        """Write and fsync every queued append, then release the lock; idempotent.

        After close, appends, :meth:`entries` and :meth:`trim` raise :class:`WalClosed`; the
        properties keep their last values.

        Raises:
            WalError: the final fsync (only when ``fsync=False``) failed.
        """
        if threading.current_thread() in self._internal:
            raise WalError("close() from a callback on the WAL syncer thread would deadlock")
        with self._mu:
            if self._closing:
                return
            self._closing = True
            self._work.notify_all()
        self._syncer.join()
        with self._trim_mu:
            try:
                if not self._fsync and self._failure is None:
                    self._storage.fsync(self._files[-1].name)
            except OSError as exc:
                raise WalError(f"WAL {self.location}: final fsync failed: {exc}") from exc
            finally:
                try:
                    self._save_trim_point(sync=True)
                finally:
                    self._release()

    def _load_trim_point(self, next_seq: int) -> int:
        """The saved trim point (0 when none or invalid), at most ``next_seq``.

        One beyond ``next_seq`` means entries it covered were lost (written without fsync, or cut by
        recovery): seqs from ``next_seq`` will be given to new entries, so the point is saved back down
        (synced) before any of them exists.
        """
        if self._marks is None:
            return 0
        try:
            data = self._marks.load_trim_point()
        except OSError as exc:
            raise WalError(f"WAL {self._storage.location}: cannot read the trim point: {exc}") from exc
        if data is None:
            return 0
        head = _TRIM_POINT.size
        if (len(data) != head + _TRIM_CRC.size or _TRIM_CRC.unpack_from(data, head)[0] != payload_crc(data[:head])
                or _TRIM_POINT.unpack_from(data)[:2] != (_TRIM_MAGIC, 1)):
            LOG.warning("WAL %s: ignoring an invalid trim point record; replaying from the oldest file",
                        self._storage.location)
            return 0
        seq = int(_TRIM_POINT.unpack_from(data)[2])
        if seq > next_seq:
            LOG.warning("WAL %s: the trim point %d is past the last entry (next seq %d); lowering it",
                        self._storage.location, seq, next_seq)
            try:
                self._marks.save_trim_point(_encode_trim_point(next_seq), sync=True)
            except OSError as exc:
                raise WalError(f"WAL {self._storage.location}: cannot lower the trim point: {exc}") from exc
            return next_seq
        return seq

    def _save_trim_point(self, *, sync: bool) -> None:
        """Save :attr:`trim_seq` if it moved (or, with ``sync``, was not synced yet); caller holds ``_trim_mu``.

        A failure is only logged: the record is an optimization, and an older one costs a longer replay.
        """
        with self._mu:
            seq = self._trim_seq
        if self._marks is None or (seq == self._trim_saved and (self._trim_synced or not sync)):
            return
        try:
            self._marks.save_trim_point(_encode_trim_point(seq), sync=sync)
        except OSError as exc:
            if not self._trim_save_failed:
                LOG.warning("WAL %s: cannot save the trim point (%s); a reopen replays more", self.location, exc)
            self._trim_save_failed = True
            return
        self._trim_saved, self._trim_synced, self._trim_save_failed = seq, sync, False

    def _release(self) -> None:
        handle, self._lock_handle = self._lock_handle, None
        try:
            self._storage.close()
        finally:
            if handle is not None:
                handle.release()

    def __enter__(self) -> WalWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- state --------------------------------------------------------------------------------------

    @property
    def location(self) -> str:
        """Where the WAL lives (the directory path), for messages."""
        return self._storage.location

    @property
    def next_seq(self) -> int:
        """The seq the next append gets."""
        with self._mu:
            return self._next_seq

    @property
    def durable_seq_end(self) -> int:
        """One past the highest durable seq (every seq below it is durable)."""
        with self._mu:
            return self._durable_end

    @property
    def trim_seq(self) -> int:
        """Every seq below this was trimmed (:meth:`trim`), here or before a reopen where the storage keeps a
        trim point (:class:`~wal.storage.TrimPointStorage`): what a replay still needs starts here."""
        with self._mu:
            return self._trim_seq

    @property
    def first_seq(self) -> int:
        """The lowest seq still stored (the first seq of the oldest file; a file may be empty)."""
        with self._mu:
            return self._files[0].first_seq

    @property
    def size_bytes(self) -> int:
        """Bytes of WAL files on disk (headers included)."""
        with self._mu:
            return self._size_bytes

    def __repr__(self) -> str:
        return f"WalWriter({self.location!r}, next_seq={self.next_seq})"


def _encode_trim_point(seq: int) -> bytes:
    head = _TRIM_POINT.pack(_TRIM_MAGIC, 1, seq)
    return head + _TRIM_CRC.pack(payload_crc(head))


def _no_space(exc: OSError) -> bool:
    """Whether ``exc`` says the disk (or the user's quota) is full."""
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _open_dir(directory: str | os.PathLike[str] | None, recycle: bool) -> FileWalStorage:
    assert directory is not None  # checked by the caller
    try:
        return FileWalStorage(directory, recycle=recycle)
    except OSError as exc:
        raise WalError(f"cannot open the WAL directory {os.fspath(directory)}: {exc}") from exc
