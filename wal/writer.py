"""WalWriter: a durable, ordered log of opaque payloads on local disk, with group commit.

The one object callers hold: it opens (locks and recovers) a log, appends, replays, trims, resumes after a
full disk and closes, while the concurrency of making appends durable lives in :mod:`wal.group_commit`,
the trim point record in :mod:`wal.trim_point`, and the scan and repair of files in :mod:`wal.recovery`.

Vocabulary: an *entry* is one payload and its *seq* (consecutive from 0, never reused, continued after
recovery and after trim); an entry is *durable* once its bytes are written and fsynced; a *batch* is the
run of queued entries one syncer pass writes with one ``writev`` and one fsync.

Invariants:

* seqs are assigned under one lock in queue order, and batches leave the queue in that order, so the
  files hold consecutive seqs and an entry is durable only when every smaller seq is;
* the active file (the last) is the only one written; it rolls when the next entry would push it past
  ``file_bytes`` (a single larger entry gets a file of its own), and only once it is synced with no
  fsync in flight, so every file but the last is complete on disk (recovery relies on it) and no fsync
  ever runs on a closed file; :meth:`WalWriter.trim` never deletes it;
* a seq is published durable only after an fsync that started after its batch was written returned;
* at open, what recovery keeps is synced before anything is appended after it (an earlier writer may have left
  written-but-unsynced bytes that read back as entries);
* after a write or fsync error the writer fails permanently: every written-but-unpublished, queued and
  later append raises :class:`WalError` (what reached the disk is known only to the next recovery);
  when a full disk failed a write or a new file (not an fsync), they raise :class:`WalFull` and
  :meth:`WalWriter.resume` runs that recovery in place, once space returns;
* payloads are never copied into a frame buffer: header and payload go to ``writev`` side by side.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from types import TracebackType

from wal.errors import WalClosed, WalError, WalFull
from wal.file_storage import FileWalStorage
from wal.frame import FILE_HEADER_SIZE, MAX_PAYLOAD_BYTES, WalEntry, payload_crc
from wal.group_commit import GroupCommit
from wal.queue import Waiter
from wal.recovery import FileExtent, read_entries, recover
from wal.storage import WalLockHandle, WalStorage
from wal.trim_point import TrimPoint

__all__ = ["WalWriter"]

LOG = logging.getLogger(__name__)


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
        threads: bool = True,
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
                without a journal commit (see :class:`~wal.file_storage.FileWalStorage`).
            threads: ``False`` starts no syncer or fsyncer thread: the caller does their work with
                :meth:`write_step` and :meth:`sync_step` (a blocking :meth:`append` and :meth:`close` step
                inline), so a simulation driven from one thread decides when the disk writes and syncs.

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
        self._fsync = fsync
        self._threaded = threads
        self._lock_handle: WalLockHandle | None = self._storage.lock() if lock else None
        self._trim = TrimPoint(self._storage)
        try:
            recovered = recover(self._storage)
            if fsync:
                # what an earlier writer wrote and never synced (it crashed, or its fsync or a later write failed) is
                # read back as part of the log: make it durable before anything is written after it, or a power loss
                # would cut the log in the middle (a torn end of an earlier file, acknowledged entries after it)
                self._storage.fsync(recovered.files[-1].name)
            self._trim_seq = self._trim.load(recovered.next_seq)  # every seq below it was trimmed
        except OSError as exc:
            self._release()
            raise WalError(f"WAL {self.location}: making the recovered log durable failed: {exc}") from exc
        except BaseException:
            self._release()
            raise
        self._trim.loaded(self._trim_seq)  # saved (and synced) at open and close; unsynced after a trim
        self._trim_mu = threading.Lock()
        self._pipeline = GroupCommit(self._storage, recovered.files, recovered.next_seq, file_bytes=file_bytes,
                               max_batch_bytes=max_batch_bytes, fsync=fsync, syncs_in_flight=syncs_in_flight,
                               threads=threads)
        if not self._pipeline.start():
            self._release()
            raise self._pipeline.failed_error(f"WAL {self.location}: cannot roll the full active file")

    # -- appending ----------------------------------------------------------------------------------

    def append(self, payload: bytes | bytearray | memoryview) -> int:
        """Append one entry and return its seq once it is durable (written and fsynced).

        Raises:
            WalClosed: the writer was closed.
            WalError: the payload exceeds ``MAX_PAYLOAD_BYTES``, or the writer failed.
        """
        if threading.current_thread() in self._pipeline.threads:
            raise WalError("append() on the WAL syncer thread (a callback) would deadlock; use append_async")
        gate = threading.Lock()
        gate.acquire()
        seq, generation = self._enqueue(payload, gate)
        if not self._threaded:  # no threads: write and sync it here
            while not gate.acquire(blocking=False):
                if not self.step():
                    raise WalError(f"WAL {self.location}: append of seq {seq} cannot be made durable")
        else:
            gate.acquire()  # the syncer releases it once seq is durable or the writer failed
        if self._pipeline.generation != generation:  # a full disk failed it, and the writer was resumed since
            error = WalFull(f"WAL {self.location}: append of seq {seq} failed: no space left")
            error.__cause__ = self._pipeline.last_failure
            raise error
        if self._pipeline.durable_end <= seq:  # only grows within a generation, and is set before the gate opens
            raise self._pipeline.failed_error(f"WAL {self.location}: append of seq {seq} failed")
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
        return self._pipeline.enqueue(data, crc, waiter)

    # -- without threads: the disk's work, one step at a time --------------------------------------------

    def write_step(self) -> bool:
        """Without threads: write the next batch of queued entries (one ``writev``) or roll the full active
        file, as the syncer thread would; False when there is nothing to write now (see :meth:`sync_step`)."""
        return self._pipeline.write_step()

    def sync_step(self) -> bool:
        """Without threads: fsync the oldest written batch and publish it (its appends are acknowledged, in
        this thread); False when no written batch awaits its fsync."""
        return self._pipeline.sync_step()

    def step(self) -> bool:
        """Without threads: :meth:`write_step`, else :meth:`sync_step`; False when neither had work."""
        return self.write_step() or self.sync_step()

    @property
    def threaded(self) -> bool:
        """Whether the writer runs its own syncer and fsyncer threads (see ``threads``)."""
        return self._threaded

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
        if threading.current_thread() in self._pipeline.threads:
            raise WalError("resume() from a callback on the WAL syncer thread would deadlock")
        with self._trim_mu:
            pipeline = self._pipeline
            with pipeline.mu:
                if pipeline.closing:
                    raise WalClosed(f"WAL {self.location} is closed")
                if pipeline.failure is None:
                    return
                if not pipeline.resumable:
                    raise pipeline.failed_error(f"WAL {self.location} failed earlier and must be reopened")
            pipeline.finish()  # the syncer stops once failed, after its fsyncers returned: nothing writes any more
            try:
                self._storage.close()  # the failed write left descriptors whose ends are stale
                recovered = recover(self._storage)
                trim_seq = self._trim.load(recovered.next_seq)
                self._storage.fsync(recovered.files[-1].name)  # what recovery kept is durable before new entries
            except OSError as exc:
                raise WalError(f"WAL {self.location}: resume failed: {exc}") from exc
            with pipeline.mu:
                if pipeline.closing:
                    raise WalClosed(f"WAL {self.location} is closed")
                self._trim_seq = trim_seq
                self._trim.loaded(trim_seq)
                pipeline.reset(recovered.files, recovered.next_seq)
            LOG.warning("WAL %s: resumed after a full disk; the next seq is %d", self.location, recovered.next_seq)

    # -- reading, trimming, closing -----------------------------------------------------------------

    def entries(self, from_seq: int = 0) -> Iterator[WalEntry]:
        """Durable entries with seq >= ``from_seq``, in order, read from the files (for replay).

        The iterator covers what was durable when this was called. Entries trimmed meanwhile are
        skipped; seqs below :attr:`first_seq` are gone.

        Raises:
            WalClosed: the writer was closed.
            WalCorrupt: (while iterating) a file no longer holds what was written.
        """
        pipeline = self._pipeline
        with pipeline.mu:
            if pipeline.closing:
                raise WalClosed(f"WAL {self.location} is closed")
            ends = [f.first_seq for f in pipeline.files[1:]] + [pipeline.durable_end]
            extents = [FileExtent(f.name, f.first_seq, end, f.size_bytes)
                       for f, end in zip(pipeline.files, ends, strict=True)]
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
        pipeline = self._pipeline
        with self._trim_mu:
            with pipeline.mu:
                if pipeline.closing:
                    raise WalClosed(f"WAL {self.location} is closed")
                self._trim_seq = max(self._trim_seq, min(upto_seq + 1, pipeline.next_seq))
            self._save_trim_point(sync=False)
            while True:
                with pipeline.mu:
                    if pipeline.closing:
                        raise WalClosed(f"WAL {self.location} is closed")
                    if len(pipeline.files) < 2 or pipeline.files[1].first_seq - 1 > upto_seq:
                        return
                    victim = pipeline.files[0]
                try:
                    self._storage.retire(victim.name)
                except OSError as exc:
                    raise WalError(f"WAL {self.location}: cannot delete {victim.name}: {exc}") from exc
                with pipeline.mu:
                    pipeline.files.pop(0)
                    pipeline.size_bytes -= victim.size_bytes

    def close(self) -> None:
        """Write and fsync every queued append, then release the lock; idempotent.

        After close, appends, :meth:`entries` and :meth:`trim` raise :class:`WalClosed`; the
        properties keep their last values.

        Raises:
            WalError: the final fsync (only when ``fsync=False``) failed.
        """
        if threading.current_thread() in self._pipeline.threads:
            raise WalError("close() from a callback on the WAL syncer thread would deadlock")
        if not self._pipeline.close():
            return
        self._pipeline.finish()
        with self._trim_mu:
            try:
                if not self._fsync and self._pipeline.failure is None:
                    self._storage.fsync(self._pipeline.files[-1].name)
            except OSError as exc:
                raise WalError(f"WAL {self.location}: final fsync failed: {exc}") from exc
            finally:
                try:
                    self._save_trim_point(sync=True)
                finally:
                    self._release()

    def _save_trim_point(self, *, sync: bool) -> None:
        """Save :attr:`trim_seq` if it moved (or, with ``sync``, was not synced yet); caller holds ``_trim_mu``."""
        with self._pipeline.mu:
            seq = self._trim_seq
        self._trim.save(seq, sync=sync)

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
        with self._pipeline.mu:
            return self._pipeline.next_seq

    @property
    def durable_seq_end(self) -> int:
        """One past the highest durable seq (every seq below it is durable)."""
        with self._pipeline.mu:
            return self._pipeline.durable_end

    @property
    def trim_seq(self) -> int:
        """Every seq below this was trimmed (:meth:`trim`), here or before a reopen where the storage keeps a
        trim point (:class:`~wal.storage.TrimPointStorage`): what a replay still needs starts here."""
        with self._pipeline.mu:
            return self._trim_seq

    @property
    def first_seq(self) -> int:
        """The lowest seq still stored (the first seq of the oldest file; a file may be empty)."""
        with self._pipeline.mu:
            return self._pipeline.files[0].first_seq

    @property
    def size_bytes(self) -> int:
        """Bytes of WAL files on disk (headers included)."""
        with self._pipeline.mu:
            return self._pipeline.size_bytes

    def __repr__(self) -> str:
        return f"WalWriter({self.location!r}, next_seq={self.next_seq})"


def _open_dir(directory: str | os.PathLike[str] | None, recycle: bool) -> FileWalStorage:
    assert directory is not None  # checked by the caller
    try:
        return FileWalStorage(directory, recycle=recycle)
    except OSError as exc:
        raise WalError(f"cannot open the WAL directory {os.fspath(directory)}: {exc}") from exc
