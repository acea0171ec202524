"""The exclusive lock that makes one writer own a WAL directory.

Two writers appending to the same files would interleave frames and assign the same seqs, so a
:class:`~wal.writer.WalWriter` takes this lock before recovery reads (and may truncate) anything.

Mechanism: ``fcntl.flock(LOCK_EX | LOCK_NB)`` on ``DIR/LOCK``. flock locks belong to the open file
description, so they conflict between processes *and* between two opens in one process, and the kernel
releases them when the holder dies (no stale lock files after a crash). The holder writes its pid into
the file only as a hint for the error message; the lock itself is the flock, never the file's contents.
"""

from __future__ import annotations

import contextlib
import fcntl
import os

from wal.errors import WalError, WalLocked

__all__ = ["LOCK_FILE_NAME", "DirLock"]

LOCK_FILE_NAME = "LOCK"


class DirLock:
    """A held flock on ``directory/LOCK``; :meth:`release` (idempotent) gives it up."""

    def __init__(self, directory: str) -> None:
        """Take the lock without blocking.

        Raises:
            WalLocked: another holder has it (the message names the directory and the holder's pid).
            WalError: the lock file cannot be opened.
        """
        self._path = os.path.join(directory, LOCK_FILE_NAME)
        try:
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise WalError(f"cannot open the WAL lock file {self._path}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise WalLocked(f"WAL directory {directory} is locked by another writer{holder}") from None
        except OSError as exc:
            os.close(fd)
            raise WalError(f"cannot lock the WAL directory {directory}: {exc}") from exc
        self._fd: int | None = fd
        with contextlib.suppress(OSError):  # the pid is a diagnostic hint only
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)

    @property
    def held(self) -> bool:
        """Whether this object still holds the lock."""
        return self._fd is not None

    def release(self) -> None:
        """Give the lock up (closing the descriptor releases the flock)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def _read_holder(fd: int) -> str:
    """`` (pid N)`` from the lock file's contents when they look like a pid, else ``""``."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return f" (pid {text})" if text.isdigit() else ""
