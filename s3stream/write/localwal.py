"""The one place s3stream meets the local WAL package (``wal/``): opening a node's WAL, mapping its errors,
resuming it after a full disk, and quarantining damage.

``wal`` is a leaf with its own errors; s3stream's callers see only :class:`~s3stream.base.errors.S3StreamError`
(docs/operations.md, "The local WAL is damaged" and "Local WAL errors"):

* damage a crash does not explain (``WalCorrupt``) -> :class:`LocalWalCorrupt`: the open is refused and
  nothing is changed; the message names the file, the byte offset and the command that moves it aside;
* no space (``WalFull``, ENOSPC/EDQUOT) -> :class:`LocalWalFull` (retriable): appends resume by
  themselves once space returns (:func:`append_failed` starts a :class:`WalResumer`);
* a read-only directory, a permission or an I/O error -> :class:`LocalWalUnavailable` (fix, then reopen).

The append path pays nothing for this: errors are caught where they surface, never checked for.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from s3stream.base.errors import Closed, LocalWalCorrupt, LocalWalFull, LocalWalUnavailable, S3StreamError
from s3stream.base.settings import StoreSettings
from wal import (
    QuarantineReport,
    WalClosed,
    WalCorrupt,
    WalError,
    WalFull,
    WalLocked,
    WalStorage,
    WalWriter,
    quarantine,
)

if TYPE_CHECKING:
    from s3stream.write.context import StoreContext
    from s3stream.write.uploader import Uploader

__all__ = ["WalNode", "WalResumer", "WalStorageFactory", "append_failed", "open_wal", "quarantine_wal", "wal_error",
           "wal_errors"]

log = logging.getLogger(__name__)

#: Makes the WalStorage of a node's WAL directory (``open_store(wal_storage=...)``; a simulation's faulty disk).
WalStorageFactory = Callable[[Path], WalStorage]

_DAMAGE_DOC = "docs/operations.md, 'The local WAL is damaged'"
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_WHAT = {errno.EROFS: "is on a read-only file system", errno.EACCES: "is not writable (permission denied)",
         errno.EPERM: "is not writable (operation not permitted)", errno.EIO: "hit an I/O error on its disk"}


class WalNode(Protocol):
    """The node whose WAL errors are mapped and whose stopped writer is resumed."""

    node_id: str
    wal: WalWriter
    uploader: Uploader
    append_lock: threading.Lock
    wal_resumer: WalResumer

    @property
    def ctx(self) -> StoreContext: ...


def open_wal(path: Path, settings: StoreSettings, storage: WalStorageFactory | None = None) -> WalWriter:
    """Open (recovering) the node's WAL in ``path``; ``WalLocked`` passes through (try another directory).

    With ``background=manual`` the writer starts no thread: the engine's steps write and sync it (the disk
    as a step, for a deterministic run). ``storage`` makes the :class:`~wal.storage.WalStorage` of the
    directory (a fault-injecting one in a simulation); the file storage by default.
    """
    threads = settings.background == "threads"
    try:
        if storage is not None:
            return WalWriter(storage=storage(path), file_bytes=settings.wal_file_bytes, fsync=settings.wal_fsync,
                             threads=threads)
        return WalWriter(path, file_bytes=settings.wal_file_bytes, fsync=settings.wal_fsync,
                         recycle=settings.wal_recycle, threads=threads)
    except WalLocked:
        raise
    except WalError as exc:
        raise wal_error(exc, path) from exc


@contextmanager
def wal_errors(directory: str | os.PathLike[str], *, os_errors: bool = False) -> Iterator[None]:
    """Map the WAL's errors raised inside (``WalLocked`` passes through), and with ``os_errors`` also any
    ``OSError`` that is no S3StreamError (creating WAL directories raises them bare)."""
    try:
        yield
    except (S3StreamError, WalLocked):
        raise
    except WalError as exc:
        raise wal_error(exc, directory) from exc
    except OSError as exc:
        if not os_errors:
            raise
        raise wal_error(exc, directory) from exc


def wal_error(exc: BaseException, directory: str | os.PathLike[str]) -> S3StreamError:
    """The S3StreamError for an error of the local WAL in ``directory`` (a ``WalError`` or an ``OSError``)."""
    where = os.path.abspath(os.fspath(directory))
    if isinstance(exc, WalCorrupt):
        return LocalWalCorrupt(
            f"{exc}. A crash does not explain this damage, so the local WAL {where} was left as it was (records "
            f"acknowledged after the damage may be only there). To open the store anyway, stop every process "
            f"using it and run `s3stream wal quarantine {where}` (it keeps what precedes the damage and moves the "
            f"rest to {where}/quarantine/); see {_DAMAGE_DOC}",
            directory=where, path=exc.source, offset=exc.offset)
    if isinstance(exc, WalClosed):
        return Closed(f"local WAL {where} is closed")
    if isinstance(exc, WalLocked):
        return LocalWalUnavailable(f"local WAL {where} is in use by another process: {exc}", directory=where)
    cause = _os_error(exc)
    code = None if cause is None else cause.errno
    if isinstance(exc, WalFull) or code in _NO_SPACE:
        return LocalWalFull(f"local WAL {where}: no space left on its disk ({cause or exc}); free space there: "
                            "appends resume by themselves once there is room (retriable)",
                            directory=where, errno=code)
    what = _WHAT.get(code or 0, "cannot be written")
    return LocalWalUnavailable(f"local WAL {where} {what}: {exc}; fix the disk or the directory, then reopen the "
                               "store (acknowledged records are replayed from the local WAL at the next open)",
                               directory=where, errno=code)


def append_failed(node: WalNode, exc: WalError) -> S3StreamError:
    """The error for an append the node's WAL refused; a writer stopped by a full disk gets resumed."""
    if isinstance(exc, WalFull):
        node.wal_resumer.kick()
    return wal_error(exc, node.wal.location)


def quarantine_wal(directory: str | os.PathLike[str], *, dry_run: bool = False) -> QuarantineReport:
    """Move the damaged part of a node's WAL directory aside (:func:`wal.quarantine`), errors mapped."""
    try:
        return quarantine(directory, dry_run=dry_run)
    except WalLocked as exc:
        raise LocalWalUnavailable(f"{exc}: stop the process using it first",
                                  directory=os.fspath(directory)) from exc
    except (WalError, OSError) as exc:
        raise wal_error(exc, directory) from exc


def _os_error(exc: BaseException) -> OSError | None:
    """The ``OSError`` behind ``exc`` (itself, or along its causes)."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None or isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


class WalResumer:
    """Resumes a node's WAL writer that a full disk stopped, on a background thread, once per kick (one per
    node, owned by it).

    First everything the stopped writer held is published (its trims done): the writer gives the seqs of
    failed appends again, so the uploader must hold none of them. That waits for uploads whose publishing
    takes partition locks the appender that met the error may hold, hence a thread. While the disk stays
    full each resume ends at the next write, and each re-reads the active WAL file, so tries are spaced
    (pacing time) until one lets an entry through. Without background threads (``background=manual``) a
    kick only marks the resume due, and :meth:`step` (what the thread runs) does it in the caller's thread.
    """

    _BACKOFF_S = (0.0, 0.1, 0.5, 2.0, 5.0)

    def __init__(self, node: WalNode) -> None:
        self._node = weakref.ref(node)
        self._mu = threading.Lock()
        self._running = False
        self._tries = 0  # resumes in a row after which nothing became durable
        self._resumed_at: int | None = None  # durable_seq_end right after the last resume

    def kick(self) -> None:
        with self._mu:
            if self._running:
                return
            self._running = True
        node = self._node()
        if node is not None and node.ctx.settings.background == "threads":
            threading.Thread(target=self.step, name="s3stream-wal-resume", daemon=True).start()

    def step(self) -> bool:
        """Resume the stopped writer if a kick asked for it (once per kick); False when none was due."""
        with self._mu:
            if not self._running:
                return False
        try:
            node = self._node()
            if node is not None:
                self._resume(node)
        finally:
            with self._mu:
                self._running = False
        return True

    def _resume(self, node: WalNode) -> None:
        wal = node.wal
        stuck = self._resumed_at is not None and wal.durable_seq_end <= self._resumed_at
        self._tries = self._tries + 1 if stuck else 0
        rt = node.ctx
        rt.clock.sleep(self._BACKOFF_S[min(self._tries, len(self._BACKOFF_S) - 1)])
        try:
            node.uploader.flush(rt.settings.commit_timeout_ms / 1000.0)
            with node.append_lock:  # appends read next_seq and queue under it: none sees a half-reset writer
                wal.resume()
                self._resumed_at = wal.durable_seq_end
        except (S3StreamError, WalError, TimeoutError) as exc:
            log.warning("node %s: the local WAL %s cannot resume yet (the next append retries): %s",
                        node.node_id, wal.location, exc)
