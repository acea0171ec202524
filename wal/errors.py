"""The errors the local write-ahead log raises, named for what the caller should do.

Tree::

    WalError                 base: an I/O failure, a misuse (payload too large), or a failed writer
    ├── WalCorrupt           bytes on disk fail a check that a crash cannot explain and that truncation
    │                        cannot repair without dropping acknowledged entries (a bad frame followed
    │                        by valid ones, a bad file header other than a torn last one, a gap between
    │                        files, a frame that went bad after recovery); names the file and byte
    │                        offset; nothing was changed: do not retry, quarantine (:mod:`wal.quarantine`)
    ├── WalFull              a write or a new file failed for lack of space (ENOSPC, EDQUOT); the writer
    │                        stops, and :meth:`~wal.writer.WalWriter.resume` restarts it once space returns
    ├── WalLocked            another writer (process or object) holds the directory's lock
    └── WalClosed            the writer was closed; further calls are a caller bug

``wal`` is a leaf package (it imports nothing of s3stream's), so these subclass :class:`Exception`
directly; s3stream maps them onto its own taxonomy at the one place it calls the WAL.

A torn tail (the last frames of the last file, cut by a crash) is *not* an error: recovery truncates it
and logs a warning. After a write or fsync failure the writer fails permanently (every pending and later
append raises :class:`WalError`), because after a failed fsync the kernel may have dropped dirty pages and
the log's durable contents are unknown until the next recovery. A full disk at a write is the exception:
the failed write touched nothing that was durable, so the writer can recover its files again in place.
An I/O failure keeps its ``OSError`` as ``__cause__`` (its errno says what went wrong).
"""

from __future__ import annotations

__all__ = ["WalClosed", "WalCorrupt", "WalError", "WalFull", "WalLocked"]


class WalError(Exception):
    """Base class of every error the WAL raises on purpose."""


class WalCorrupt(WalError):
    """Stored bytes failed a checksum, bounds, version or continuity check that is not a torn tail."""

    def __init__(self, message: str, *, source: str | None = None, offset: int | None = None) -> None:
        super().__init__(f"{source}: {message}" if source else message)
        self.source = source  # the damaged file's path (``location/name``)
        self.offset = offset  # the byte offset in that file where the damage starts, when known


class WalFull(WalError):
    """No space left for the WAL (ENOSPC, EDQUOT) at a write or a new file; resumable once space returns."""


class WalLocked(WalError):
    """The WAL directory is locked by another writer; the message names the directory."""


class WalClosed(WalError):
    """The writer was closed."""
