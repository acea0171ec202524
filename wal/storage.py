"""The WAL's storage port, :class:`WalStorage`, with a real-file and an in-memory implementation.

Vocabulary: a *file* is a flat, append-only byte sequence with a name (``{first_seq:020d}.log``; the
port does not care); *written* bytes are visible to reads; *synced* bytes survive a crash.

Contract (what :class:`~wal.writer.WalWriter` relies on):

* ``create(name, data)`` makes a new file holding ``data`` and returns only once both the data and the
  file's existence are durable (file and directory fsynced); an existing name is an error.
* ``append(name, chunks)`` writes the chunks, in order, after the bytes written so far (one ``writev`` where
  the platform allows); they are visible to ``read`` at once but survive a crash only after ``fsync(name)``.
* ``retire(name)`` is ``delete`` for a file whose entries will never be read again; the storage may keep
  its space for a later ``create`` (:class:`FileWalStorage` with ``recycle``). A file made that way holds
  bytes of its earlier life after what was written to it, behind a zeroed frame header (the *end mark*)
  written with every write; readers stop at the sizes the writer recorded, recovery at the end mark.
* ``truncate`` and ``delete`` are durable when they return; ``delete`` of a missing file succeeds.
* ``read(name, offset, size)`` returns what was written (synced or not), clipped at the file's end.
* ``lock()`` makes the caller the only writer of this storage, or raises :class:`WalLocked`.
* Failures are ``OSError`` (``FileNotFoundError`` for a missing file on ``read``); the writer turns them
  into :class:`~wal.errors.WalError` in one place.
* Optionally (:class:`TrimPointStorage`, both implementations here) it keeps the writer's trim point, so a
  reopened log is replayed from there, not from its oldest file.

:class:`MemoryWalStorage` keeps written-but-unsynced bytes apart from synced ones, so ``crash()`` can
simulate power loss: unsynced bytes vanish, optionally leaving a random torn prefix.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from wal.clock import make_rng
from wal.errors import WalLocked
from wal.lock import DirLock

__all__ = ["END_MARK_BYTES", "SPARE_FILE_NAME", "TRIM_POINT_FILE_NAME", "FileWalStorage", "MemoryWalStorage",
           "TrimPointStorage", "WalLockHandle", "WalStorage"]

#: The retired file :class:`FileWalStorage` keeps for its next ``create`` (not a log file's name).
SPARE_FILE_NAME = "spare.wal-recycled"
#: The small file holding the writer's trim point (:class:`TrimPointStorage`; not a log file's name).
TRIM_POINT_FILE_NAME = "trim-point"
#: Zero bytes written after every write into a reused file: a frame header's worth (recovery stops there).
END_MARK_BYTES = 20

_IOV_MAX = max(16, os.sysconf("SC_IOV_MAX")) if hasattr(os, "sysconf") else 16
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)


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


class FileWalStorage:
    """WAL files in a local directory, written with ``pwritev`` and synced with ``fdatasync``.

    Write descriptors are cached per file; ``create`` closes the others (a new file means the older
    ones are complete), so a long-lived log holds one descriptor, not one per file. Reads open the file
    afresh each time.

    With ``recycle``, a retired file becomes the *spare* (one at most; more are deleted) and the next
    ``create`` reuses it: its blocks are allocated and written, so writes over them leave the file's size
    unchanged and their ``fdatasync`` flushes data only, never waiting for a journal commit that other
    writers of the disk also feed. (ext4 here, with a process beside it writing and syncing files: a
    256 KiB write's sync p99 ~12 ms appending, ~0.4 ms overwriting; measured interleaved while the engine
    benchmark's ingest ran: 23.7 vs 9.8 ms.) Bytes of the file's earlier life follow what is written, so
    every write ends with an *end mark*, a zeroed frame header that the next write overwrites: recovery
    stops there (:mod:`wal.recovery`), and an old frame could never pass anyway, since its seq is below
    every seq of the live files. The header is written into the spare before it gets its log name, so a
    log file never holds another life's header.
    """

    def __init__(self, directory: str | os.PathLike[str], *, recycle: bool = False) -> None:
        self._dir = os.path.abspath(os.fspath(directory))
        if not os.path.isdir(self._dir):
            os.makedirs(self._dir, exist_ok=True)
            _sync_dir(os.path.dirname(self._dir))  # the new directory's name must survive a crash too
        self._open: dict[str, _OpenFile] = {}
        self._mu = threading.Lock()
        self._recycle = recycle
        self._spare = False  # this storage made SPARE_FILE_NAME (one left by another process is unknown)
        # held while the spare is taken into use or replaced: a trim may retire a file during a roll
        self._spare_mu = threading.Lock()

    @property
    def location(self) -> str:
        return self._dir

    @property
    def directory(self) -> str:
        """The absolute directory path."""
        return self._dir

    def list_files(self) -> list[str]:
        with os.scandir(self._dir) as it:
            return sorted(entry.name for entry in it if entry.is_file(follow_symlinks=False))

    def create(self, name: str, data: bytes) -> None:
        path = self._path(name)
        with self._spare_mu:
            with self._mu:
                reuse, self._spare = self._spare, False
            if reuse:
                fd, size = self._take_spare(path, data)
        if not reuse:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                _pwrite_all(fd, [data], 0)
                os.fsync(fd)
            except BaseException:
                os.close(fd)
                raise
            size = len(data)
        with self._mu:  # older files are complete: keep one write descriptor, not one per file
            stale = [old.fd for old_name, old in self._open.items() if old_name != name]
            self._open = {name: _OpenFile(fd, len(data), max(size, len(data)))}
        for old in stale:
            os.close(old)
        self._sync_dir()

    def append(self, name: str, chunks: Sequence[bytes]) -> None:
        f = self._file(name)
        n = sum(map(len, chunks))
        mark = _end_mark(f.end + n, f.size)
        _pwrite_all(f.fd, [*chunks, mark] if mark else chunks, f.end)
        with self._mu:
            f.end += n
            f.size = max(f.size, f.end)

    def fsync(self, name: str) -> None:
        _datasync(self._file(name).fd)

    def read(self, name: str, offset: int = 0, size: int | None = None) -> bytes:
        with open(self._path(name), "rb") as f:
            f.seek(offset)
            return f.read() if size is None else f.read(size)

    def truncate(self, name: str, size: int) -> None:
        f = self._file(name)
        os.ftruncate(f.fd, size)
        os.fsync(f.fd)
        with self._mu:
            f.end = f.size = size

    def delete(self, name: str) -> None:
        self._close_fd(name)
        try:
            os.unlink(self._path(name))
        except FileNotFoundError:
            return
        self._sync_dir()

    def retire(self, name: str) -> None:
        with self._spare_mu:
            with self._mu:
                keep = self._recycle and not self._spare
            if keep:
                self._close_fd(name)
                try:
                    os.replace(self._path(name), self._path(SPARE_FILE_NAME))  # over another process's spare
                except FileNotFoundError:
                    return
                self._sync_dir()
                with self._mu:
                    self._spare = True
                return
        self.delete(name)

    def lock(self) -> WalLockHandle:
        return DirLock(self._dir)

    def save_trim_point(self, data: bytes, *, sync: bool) -> None:
        """Write a temp file and rename it over ``TRIM_POINT_FILE_NAME`` (fsyncs only with ``sync``: the writer
        saves after every trim, on the upload path, and a lost or torn record only costs a longer replay)."""
        tmp = self._path(TRIM_POINT_FILE_NAME + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            _pwrite_all(fd, [data], 0)
            if sync:
                _datasync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self._path(TRIM_POINT_FILE_NAME))
        if sync:
            self._sync_dir()

    def load_trim_point(self) -> bytes | None:
        try:
            with open(self._path(TRIM_POINT_FILE_NAME), "rb") as f:
                return f.read(4096)
        except FileNotFoundError:
            return None

    def close(self) -> None:
        with self._mu:
            files, self._open = list(self._open.values()), {}
        for f in files:
            os.close(f.fd)

    def _path(self, name: str) -> str:
        if not name or os.sep in name or name in (".", ".."):
            raise ValueError(f"invalid WAL file name {name!r}")
        return os.path.join(self._dir, name)

    def _file(self, name: str) -> _OpenFile:
        """The open file ``name`` (opened on first use: the file must exist and end where its writes do,
        as recovery leaves the last one). Only the syncer writes it and moves its end."""
        with self._mu:
            f = self._open.get(name)
            if f is None:
                fd = os.open(self._path(name), os.O_WRONLY | os.O_CLOEXEC)
                size = os.fstat(fd).st_size
                f = self._open[name] = _OpenFile(fd, size, size)
            return f

    def _take_spare(self, path: str, header: bytes) -> tuple[int, int]:
        """Write ``header`` (and an end mark) into the spare, sync it, link it as ``path``: its descriptor
        and size. The caller holds ``_spare_mu``."""
        spare = self._path(SPARE_FILE_NAME)
        fd = os.open(spare, os.O_WRONLY | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            _pwrite_all(fd, [header, _end_mark(len(header), size)], 0)
            os.fdatasync(fd)
            os.link(spare, path)  # fails if the name exists, as O_EXCL does
        except BaseException:
            os.close(fd)
            raise
        os.unlink(spare)
        return fd, size

    def _close_fd(self, name: str) -> None:
        with self._mu:
            f = self._open.pop(name, None)
        if f is not None:
            os.close(f.fd)

    def _sync_dir(self) -> None:
        _sync_dir(self._dir)

    def __repr__(self) -> str:
        return f"FileWalStorage({self._dir!r})"


@dataclass(slots=True)
class _OpenFile:
    """A file :class:`FileWalStorage` writes: its descriptor, where the next append goes, and its length
    (a reused file is longer than what was written to it)."""

    fd: int
    end: int
    size: int


def _end_mark(end: int, size: int) -> bytes:
    """The zero bytes to write at ``end`` of a file ``size`` long: an end mark over older bytes, if any."""
    return bytes(max(0, min(END_MARK_BYTES, size - end)))


def _sync_dir(path: str) -> None:
    """fsync a directory, so a name created or deleted in it survives a crash."""
    fd = os.open(path, _DIR_FLAGS)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _datasync(fd: int) -> None:
    """fdatasync where available (enough for appends: it also syncs the size), else fsync."""
    sync = getattr(os, "fdatasync", os.fsync)
    sync(fd)


def _pwrite_all(fd: int, chunks: Sequence[bytes], offset: int) -> None:
    """Write every chunk, in order, from ``offset`` (``pwritev`` in groups of at most IOV_MAX, finishing
    short writes)."""
    pos = offset
    for start in range(0, len(chunks), _IOV_MAX):
        group = chunks[start : start + _IOV_MAX]
        written = os.pwritev(fd, group, pos)
        wanted = sum(map(len, group))
        if written < wanted:  # rare (signal, nearly full disk): finish with plain writes
            rest = memoryview(b"".join(group))[written:]
            at = pos + written
            while rest:
                n = os.pwrite(fd, rest, at)
                rest, at = rest[n:], at + n
        pos += wanted


class _MemoryFile:
    __slots__ = ("synced", "unsynced")

    def __init__(self, data: bytes) -> None:
        self.synced = bytearray(data)
        self.unsynced = bytearray()


class _MemoryLock:
    """The lock of one writer generation; a crash starts a new generation, so a stale release is a no-op."""

    def __init__(self, storage: MemoryWalStorage, generation: int) -> None:
        self._storage = storage
        self._generation = generation

    def release(self) -> None:
        self._storage._release(self._generation)


class MemoryWalStorage:
    """WAL files in memory, for tests and simulation, with crash simulation.

    After :meth:`crash` every mutating call fails with ``OSError`` until a new writer takes
    :meth:`lock`, so a writer that was running when the "power" went out cannot write into the
    recovered state; reads keep working (they look at the "disk"). Thread-safe.
    """

    def __init__(self, name: str = "wal") -> None:
        self._location = f"memory:{name}"
        self._files: dict[str, _MemoryFile] = {}
        self._mu = threading.Lock()
        self._locked = False
        self._generation = 0
        self._down = False

    @property
    def location(self) -> str:
        return self._location

    def list_files(self) -> list[str]:
        with self._mu:
            return sorted(self._files)

    def create(self, name: str, data: bytes) -> None:
        with self._mu:
            self._check_up()
            if name in self._files:
                raise FileExistsError(f"{self._location}/{name} exists")
            self._files[name] = _MemoryFile(data)

    def append(self, name: str, chunks: Sequence[bytes]) -> None:
        with self._mu:
            self._check_up()
            self._get(name).unsynced += b"".join(chunks)

    def fsync(self, name: str) -> None:
        with self._mu:
            self._check_up()
            f = self._get(name)
            f.synced += f.unsynced
            f.unsynced = bytearray()

    def read(self, name: str, offset: int = 0, size: int | None = None) -> bytes:
        with self._mu:
            f = self._get(name)
            data = bytes(f.synced + f.unsynced)
        end = len(data) if size is None else offset + size
        return data[offset:end]

    def truncate(self, name: str, size: int) -> None:
        with self._mu:
            self._check_up()
            f = self._get(name)
            f.synced = (f.synced + f.unsynced)[:size]
            f.unsynced = bytearray()

    def delete(self, name: str) -> None:
        with self._mu:
            self._check_up()
            self._files.pop(name, None)

    def retire(self, name: str) -> None:
        self.delete(name)

    def save_trim_point(self, data: bytes, *, sync: bool) -> None:
        """Unsynced, the record is like any unsynced bytes: a crash keeps a random prefix of it."""
        with self._mu:
            self._check_up()
            f = self._files[TRIM_POINT_FILE_NAME] = _MemoryFile(data if sync else b"")
            if not sync:
                f.unsynced += data

    def load_trim_point(self) -> bytes | None:
        with self._mu:
            f = self._files.get(TRIM_POINT_FILE_NAME)
            return None if f is None else bytes(f.synced + f.unsynced)

    def lock(self) -> WalLockHandle:
        with self._mu:
            if self._locked:
                raise WalLocked(f"WAL {self._location} is locked by another writer")
            self._locked = True
            self._down = False
            return _MemoryLock(self, self._generation)

    def close(self) -> None:
        """Nothing to release (the bytes are the simulated disk and outlive any writer)."""

    def crash(self, torn_tail: bool = True, rng_seed: int | None = None) -> None:
        """Simulate power loss: drop every unsynced byte, keeping a random prefix when ``torn_tail``.

        Args:
            torn_tail: keep a random-length prefix (possibly empty or complete) of each file's unsynced
                bytes, as a disk that persisted part of the last write would.
            rng_seed: seed for the prefix lengths (a simulation passes one to be reproducible).
        """
        rng = make_rng(rng_seed)
        with self._mu:
            for name in sorted(self._files):
                f = self._files[name]
                keep = rng.randint(0, len(f.unsynced)) if torn_tail and f.unsynced else 0
                f.synced += f.unsynced[:keep]
                f.unsynced = bytearray()
            self._locked = False
            self._generation += 1
            self._down = True

    def unsynced_bytes(self) -> int:
        """How many written bytes a crash now would put at risk (for tests)."""
        with self._mu:
            return sum(len(f.unsynced) for f in self._files.values())

    def _release(self, generation: int) -> None:
        with self._mu:
            if generation == self._generation:
                self._locked = False

    def _check_up(self) -> None:
        if self._down:
            raise OSError(f"{self._location}: simulated crash; open a new writer to recover")

    def _get(self, name: str) -> _MemoryFile:
        f = self._files.get(name)
        if f is None:
            raise FileNotFoundError(f"{self._location}/{name} does not exist")
        return f

    def __repr__(self) -> str:
        return f"MemoryWalStorage({self._location!r})"
