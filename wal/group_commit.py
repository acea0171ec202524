"""Group commit: seqs, the queue of frames, and the threads that make batches durable.

An fsync costs the same for one entry or a thousand, so appends arriving together must share one write
and one fsync; this is the WAL's throughput and its ack latency, and it is where its concurrency lives,
kept apart from the writer's API (:mod:`wal.writer`), recovery and trimming.

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
append sleeps on a private, pre-acquired lock that is released when its seq is durable (so a batch wakes
exactly its own appenders, not every waiter); only ``append_async`` creates futures.

Without threads (``threads=False``, for a deterministic simulation driven from one thread) nothing happens
behind the caller's back: :meth:`GroupCommit.write_step` does what one syncer pass does (take a batch, write
it, or roll) and :meth:`GroupCommit.sync_step` what one fsyncer pass does (fsync the oldest written batch and
publish it with every batch written before it), with the same bookkeeping, so a caller chooses when the disk
writes and when it syncs (and what a power loss in between keeps). At most ``syncs_in_flight`` batches are
written and not yet synced, as with threads.

The invariants are the writer's (see :mod:`wal.writer`); the state appenders and the writer share with
the threads (:attr:`GroupCommit.files`, the seq counters, ``closing``, the failure) is guarded by
:attr:`GroupCommit.mu`.
"""

from __future__ import annotations

import errno
import logging
import threading
from collections import deque
from typing import Literal

from wal.errors import WalClosed, WalError, WalFull
from wal.frame import FILE_HEADER_SIZE, encode_file_header, encode_frame_header
from wal.queue import Batch, FrameQueue, Waiter, wake
from wal.recovery import WalFile, file_name
from wal.storage import WalStorage

__all__ = ["GroupCommit"]

LOG = logging.getLogger(__name__)


class GroupCommit:
    """The append pipeline of one writer: queue, seqs, files, and the syncer and fsyncer threads.

    Attributes shared with the writer (read and written under :attr:`mu`): ``files`` (the log's files,
    the last one active), ``next_seq``, ``durable_end`` (every seq below it is durable), ``size_bytes``,
    ``closing``, ``failure`` and ``resumable`` (see :meth:`failed_error`), ``generation`` and
    ``last_failure`` (see :meth:`reset`).
    """

    def __init__(self, storage: WalStorage, files: list[WalFile], next_seq: int, *, file_bytes: int,
                 max_batch_bytes: int, fsync: bool, syncs_in_flight: int, threads: bool = True) -> None:
        self._storage = storage
        self._threaded = threads  # False: no thread; write_step/sync_step do the threads' work when called
        self._file_bytes = file_bytes
        self._max_batch_bytes = max_batch_bytes
        self._fsync = fsync
        self.mu = threading.Lock()
        self._work = threading.Condition(self.mu)  # the syncer waits here for queued entries
        self.files = files
        self.next_seq = next_seq  # the seq the next append gets
        self.durable_end = next_seq  # every seq below this is durable
        self._written_end = next_seq  # every seq below this is written (maybe not yet durable)
        self._queue = FrameQueue()  # entries not yet taken by the syncer, with their waiters
        self._written: deque[Batch] = deque()  # written batches not yet durable, in seq order
        self._unsynced_bytes = 0  # their bytes (in the active file, not yet in its size_bytes)
        self._max_in_flight = syncs_in_flight
        self._in_flight = 0  # fsync calls running (none runs while a file rolls)
        self._rolling = False  # an fsyncer is rolling the full active file
        self._to_sync: deque[Batch] = deque()  # written batches waiting for an fsyncer
        self._sync_work = threading.Condition(self.mu)  # fsyncers wait here for batches
        self._syncer_done = False
        self.size_bytes = sum(f.size_bytes for f in files)
        self.closing = False
        self.failure: BaseException | None = None
        self.resumable = False  # every failure so far was a full disk at a write or a new file
        self.last_failure: BaseException | None = None  # the failure the last resume cleared
        self.generation = 0  # counts resumes: a blocking append queued before one failed
        self._fsyncer_count = syncs_in_flight if fsync else 0
        self._new_threads()

    @property
    def location(self) -> str:
        return self._storage.location

    def _new_threads(self) -> None:
        if not self._threaded:
            self._fsyncers: list[threading.Thread] = []
            self.syncer: threading.Thread | None = None
            self.threads: frozenset[threading.Thread] = frozenset()
            return
        self.syncer = threading.Thread(target=self._run, name=f"wal-syncer {self.location}", daemon=True)
        self._fsyncers = [threading.Thread(target=self._run_fsyncer, name=f"wal-fsync-{i} {self.location}",
                                           daemon=True) for i in range(self._fsyncer_count)]
        #: the pipeline's threads (a callback on one of them must not wait for the pipeline)
        self.threads = frozenset({self.syncer, *self._fsyncers})

    def start(self) -> bool:
        """Roll a full active file left by recovery, then start the threads; False when the roll failed
        (the pipeline failed; no thread was started)."""
        active = self.files[-1]
        if active.size_bytes >= self._file_bytes and active.first_seq < self.next_seq and not self.roll_or_fail():
            return False
        if self.syncer is not None:
            for thread in self._fsyncers:
                thread.start()
            self.syncer.start()
        return True

    def finish(self) -> None:
        """After :meth:`close` (or a failure): wait until the syncer has written and synced what was queued and
        stopped; without threads, do that work here."""
        if self.syncer is not None:
            self.syncer.join()
            return
        while self.write_step() or self.sync_step():
            pass

    def enqueue(self, data: bytes, crc: int, waiter: Waiter) -> tuple[int, int]:
        """Queue one entry (its payload's CRC computed by the caller): its seq and the generation."""
        with self.mu:
            self._check_usable()
            seq = self.next_seq
            self._queue.push(encode_frame_header(seq, len(data), crc), data, waiter)
            self.next_seq = seq + 1
            self._work.notify()
            return seq, self.generation

    def _check_usable(self) -> None:
        """Raise unless appends are accepted (caller holds the lock)."""
        if self.closing:
            raise WalClosed(f"WAL {self.location} is closed")
        if self.failure is not None:
            what = "stopped: no space left; resume() once space returns" if self.resumable else (
                "failed earlier and must be reopened")
            raise self.failed_error(f"WAL {self.location} {what}")

    def failed_error(self, message: str) -> WalError:
        """The error for appends the failure stopped: :class:`WalFull` when resumable; caused by the failure."""
        error = (WalFull if self.resumable else WalError)(message)
        error.__cause__ = self.failure
        return error

    def close(self) -> bool:
        """Stop accepting appends and let the syncer drain the queue and stop (:meth:`join` waits for it);
        False when already closing."""
        with self.mu:
            if self.closing:
                return False
            self.closing = True
            self._work.notify_all()
        return True

    def reset(self, files: list[WalFile], next_seq: int) -> None:
        """Take a recovered state and start new threads (caller holds :attr:`mu`; the old threads have
        stopped): the failure becomes :attr:`last_failure` and :attr:`generation` counts one more."""
        self.files = files
        self.next_seq = self.durable_end = self._written_end = next_seq
        self._queue = FrameQueue()
        self._written.clear()
        self._to_sync.clear()
        self._unsynced_bytes = self._in_flight = 0
        self._rolling = self._syncer_done = False
        self.size_bytes = sum(f.size_bytes for f in files)
        self.last_failure = self.failure
        self.failure = None
        self.resumable = False
        self.generation += 1
        self._new_threads()
        if self.syncer is not None:
            for thread in (*self._fsyncers, self.syncer):
                thread.start()

    # -- the threads --------------------------------------------------------------------------------

    def _run(self) -> None:
        """The syncer thread: take a batch, write it, hand it to an fsyncer (or, without fsync, publish it);
        roll when the next entry does not fit; until closed and drained, then stop the fsyncers."""
        while (batch := self._take_batch()) is not None:
            if batch.count == 0:
                ok = self.roll_or_fail()  # _take_batch made sure no fsync is in flight
            elif not self._write(batch):
                ok = False
            elif self._fsync:
                with self.mu:
                    self._to_sync.append(batch)
                    self._sync_work.notify()
                ok = True
            else:
                ok = self._publish(batch)
            if not ok:
                break
        with self.mu:
            self._syncer_done = True
            self._sync_work.notify_all()
        for thread in self._fsyncers:
            thread.join()

    def _take_batch(self) -> Batch | None:
        """Wait for queued entries and a free fsync slot, and take the longest prefix that fits (``None``:
        closed and drained, or failed); see :meth:`_cut_locked`."""
        with self.mu:
            while True:
                batch = self._cut_locked()
                if batch is not False:
                    return batch
                self._work.wait()

    def _cut_locked(self) -> Batch | Literal[False] | None:
        """The next batch to write, ``None`` when closed and drained or failed, ``False`` when none can be
        taken now (caller holds the lock).

        The batch fits both ``max_batch_bytes`` and the room left in the active file (written bytes
        included); when not even the first queued entry fits a non-empty active file, an empty batch asks
        for a roll first, once no fsync is in flight. A single entry larger than a whole file goes alone
        into a fresh file. A taken batch counts as written (and as an fsync in flight) from here on.
        """
        if self.failure is not None or (not self._queue and self.closing):
            return None
        if self._queue and not self._rolling and self._in_flight < self._max_in_flight:
            active = self.files[-1]
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
        return False

    # -- without threads: the same work, one step at a time -------------------------------------------

    def write_step(self) -> bool:
        """Without threads: what one syncer pass does (write the next batch, or roll the full active file);
        False when there is nothing to write now (nothing queued, every fsync slot taken, or failed)."""
        with self.mu:
            batch = self._cut_locked()
        if batch is None or batch is False:
            return False
        if batch.count == 0:
            self.roll_or_fail()
        elif self._write(batch):
            if self._fsync:
                with self.mu:
                    self._to_sync.append(batch)
            else:
                self._publish(batch)
        return True

    def sync_step(self) -> bool:
        """Without threads: what one fsyncer pass does (fsync the oldest written batch's file, then publish it
        and every batch written before it); False when no written batch awaits its fsync."""
        with self.mu:
            if self.failure is not None or not self._to_sync:
                return False
            batch = self._to_sync.popleft()
        if self._sync(batch):
            self._synced(batch)
        return True

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
            with self.mu:
                while not self._to_sync and not self._syncer_done and self.failure is None:
                    self._sync_work.wait()
                if self.failure is not None or not self._to_sync:
                    return
                batch = self._to_sync.popleft()
            if not self._sync(batch) or not self._synced(batch):
                return

    def _sync(self, batch: Batch) -> bool:
        """fsync ``batch``'s file; on failure fail the writer (False)."""
        try:
            self._storage.fsync(batch.file.name)
        except OSError as exc:
            self._fail(exc)
            return False
        except Exception as exc:  # a storage bug must fail the appenders, not strand them
            LOG.exception("WAL %s: unexpected error in an fsyncer", self.location)
            self._fail(exc)
            return False
        return True

    def _synced(self, batch: Batch) -> bool:
        """``batch``'s fsync returned: it and every batch written before it are durable (the fsync started
        after their writes). Publish them in seq order; the fsyncer that leaves a full file with nothing in
        flight rolls it before waking them. Returns whether the writer is still healthy."""
        end = batch.first_seq + batch.count
        done: list[Batch] = []
        with self.mu:
            self._in_flight -= 1
            while self._written and self._written[0].first_seq < end:
                b = self._written.popleft()
                b.file.size_bytes += b.size_bytes
                self.size_bytes += b.size_bytes
                self._unsynced_bytes -= b.size_bytes
                self.durable_end = b.first_seq + b.count
                done.append(b)
            roll = (self._in_flight == 0 and self.files[-1].size_bytes >= self._file_bytes
                    and self.files[-1].first_seq < self.durable_end and self.failure is None)
            self._rolling = roll
            self._work.notify()
        healthy = not roll or self.roll_or_fail()
        if roll:
            with self.mu:
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
        with self.mu:
            batch.file.size_bytes += batch.size_bytes
            self.size_bytes += batch.size_bytes
            self.durable_end = batch.first_seq + batch.count
            full = batch.file.size_bytes >= self._file_bytes
        healthy = not full or self.roll_or_fail()
        wake(batch.waiters, batch.first_seq)
        return healthy

    def roll_or_fail(self) -> bool:
        """Start a new active file at the next durable seq; on failure fail the writer.

        The full file is synced first even with ``fsync=False``: recovery relies on every file but
        the last being complete, so a file must never exist while its predecessor's tail can vanish.
        """
        with self.mu:
            first_seq = self.durable_end
            previous = self.files[-1].name
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
        with self.mu:
            self.files.append(WalFile(name, first_seq, FILE_HEADER_SIZE))
            self.size_bytes += FILE_HEADER_SIZE
        return True

    def _fail(self, exc: Exception, *, resumable: bool = False) -> None:
        """Fail the writer: every written-but-not-durable, queued and later append raises (:class:`WalFull`
        while every failure was ``resumable``, i.e. a full disk at a write: see
        :meth:`~wal.writer.WalWriter.resume`)."""
        LOG.error("WAL %s: write failed, the writer stops: %s", self.location, exc)
        with self.mu:
            if self.failure is None:
                self.failure = exc
                self.resumable = resumable
            else:
                self.resumable = self.resumable and resumable
            error = self.failed_error(f"WAL {self.location}: write failed: {exc}")
            error.__cause__ = exc
            written, self._written = list(self._written), deque()
            self._to_sync.clear()
            waiters = [w for b in written for w in b.waiters] + self._queue.clear()
            self._work.notify_all()
            self._sync_work.notify_all()
        wake(waiters, 0, error)


def _no_space(exc: OSError) -> bool:
    """Whether ``exc`` says the disk (or the user's quota) is full."""
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)
