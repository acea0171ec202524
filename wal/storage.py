"""The WAL's storage port, :class:`WalStorage`: the few flat-file verbs the writer and recovery need.

The writer's correctness (durability, recovery of torn tails, file recycling) rests on a handful of
guarantees about files; stating them as a port lets a simulation swap the disk for
:class:`~wal.memory_storage.MemoryWalStorage` (power loss on demand) while production uses
:class:`~wal.file_storage.FileWalStorage`, both held to the same contract below.

Vocabulary: a *file* is a flat, append-only byte sequence with a name (``{first_seq:020d}.log``; the
port does not care); *written* bytes are visible to reads; *synced* bytes survive a crash.

Contract (what :class:`~wal.writer.WalWriter` relies on):

* ``create(name, data)`` makes a new file holding ``data`` and returns only once both the data and the
  file's existence are durable (file and directory fsynced); an existing name is an error.
* ``append(name, chunks)`` writes the chunks, in order, after the bytes written so far (one ``writev`` where
  the platform allows); they are visible to ``read`` at once but survive a crash only after ``fsync(name)``.
* ``retire(name)`` is ``delete`` for a file whose entries will never be read again; the storage may keep
  its space for a later ``create`` (:class:`~wal.file_storage.FileWalStorage` with ``recycle``). A file
  made that way holds bytes of its earlier life after what was written to it, behind a zeroed frame
  header (the *end mark*) written with every write; readers stop at the sizes the writer recorded,
  recovery at the end mark.
* ``truncate`` and ``delete`` are durable when they return; ``delete`` of a missing file succeeds.
* ``read(name, offset, size)`` returns what was written (synced or not), clipped at the file's end.
* ``lock()`` makes the caller the only writer of this storage, or raises :class:`WalLocked`.
* Failures are ``OSError`` (``FileNotFoundError`` for a missing file on ``read``); the writer turns them
  into :class:`~wal.errors.WalError` in one place.
* Optionally (:class:`TrimPointStorage`, both implementations) it keeps the writer's trim point, so a
  reopened log is replayed from there, not from its oldest file.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

__all__ = ["END_MARK_BYTES", "TRIM_POINT_FILE_NAME", "TrimPointStorage", "WalLockHandle", "WalStorage"]

#: The small file holding the writer's trim point (:class:`TrimPointStorage`; not a log file's name).
TRIM_POINT_FILE_NAME = "trim-point"
#: Zero bytes written after every write into a reused file: a frame header's worth (recovery stops there).
END_MARK_BYTES = 20


@runtime_checkable
class WalLockHandle(Protocol):
    """A held writer lock."""

    def release(self) -> None:
        """Give the lock up; idempotent."""
        ...


@runtime_checkable
class WalStorage(Protocol):
    """Where WAL files live: a small set of flat-file verbs (see the module docstring for the contract)."""

    @property
    def location(self) -> str:
        """A human-readable place (a directory path) used in messages and errors."""
        ...

    def list_files(self) -> list[str]:
        """Names of all files, sorted by name."""
        ...

    def create(self, name: str, data: bytes) -> None:
        """Create ``name`` holding ``data``, durably (file and directory synced)."""
        ...

    def append(self, name: str, chunks: Sequence[bytes]) -> None:
        """Write ``chunks`` at the end of ``name`` (visible at once, durable after :meth:`fsync`)."""
        ...

    def fsync(self, name: str) -> None:
        """Make everything written to ``name`` durable."""
        ...

    def read(self, name: str, offset: int = 0, size: int | None = None) -> bytes:
        """Up to ``size`` bytes (all when ``None``) of ``name`` from ``offset``."""
        ...

    def truncate(self, name: str, size: int) -> None:
        """Cut ``name`` to ``size`` bytes, durably."""
        ...

    def delete(self, name: str) -> None:
        """Remove ``name``, durably; a missing file is not an error."""
        ...

    def retire(self, name: str) -> None:
        """Remove ``name`` (durably), whose entries are never needed again; its space may be reused."""
        ...

    def lock(self) -> WalLockHandle:
        """Become the only writer; raises :class:`WalLocked` when another writer holds the lock."""
        ...

    def close(self) -> None:
        """Release OS resources (open descriptors); the storage may be used again afterwards."""
        ...


@runtime_checkable
class TrimPointStorage(Protocol):
    """Optional beside :class:`WalStorage`: a storage that also keeps the writer's *trim point*, so an
    open replays only what the caller has not trimmed (a storage without it replays from the oldest file).

    ``save_trim_point`` replaces the record atomically; unsynced, a crash may keep the old record, the new
    one, none or a torn one: the writer checks what it loads and treats anything invalid as absent.
    """

    def save_trim_point(self, data: bytes, *, sync: bool) -> None:
        """Replace the trim point record with ``data`` (durable on return only with ``sync``)."""
        ...

    def load_trim_point(self) -> bytes | None:
        """The last record saved (None when there is none)."""
        ...
