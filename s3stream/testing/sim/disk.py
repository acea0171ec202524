"""The simulated machines' local disks: where the nodes' local WALs live, with the faults a disk has.

Fault model (what a real disk does, and what the simulation makes of it):

=====================  ========================================================================================
process death          the process's handles of its WAL directories go dead (a zombie cannot write into what
                       the next process recovers) and the directory lock is released; written-but-unsynced
                       bytes survive (the page cache outlives a process), as on a real machine
power loss             every byte not yet fsynced is dropped, except a seeded random prefix of each file's
                       unsynced bytes (a torn last write): :meth:`wal.MemoryWalStorage.crash`
full disk              while on, writes and new files fail with ``ENOSPC`` (the WAL stops resumably:
                       ``LocalWalFull``, appends resume once space returns)
failed fsync           the next ``n`` fsyncs fail with ``EIO`` (the WAL stops for good: ``LocalWalUnavailable``
                       until the process reopens the directory, whose recovery decides what was durable)
read-only disk         while on, writes, new files and fsyncs fail with ``EROFS`` (a file system remounted
                       read-only: ``LocalWalUnavailable``, and opens fail alike until it is writable again)
flipped byte           one byte of a frame in the middle of a WAL file (a valid frame follows it) reads back
                       flipped (:meth:`SimDisks.flip`, while the process is down): the next open must refuse
                       with ``LocalWalCorrupt`` and change nothing, never skip past the frame silently
=====================  ========================================================================================

Each WAL directory is one :class:`wal.MemoryWalStorage` that outlives the processes using it; every open
gets a :class:`DiskHandle` of its own (the ``wal_storage`` factory a store is opened with). The directory
also exists on the real file system, empty, because that is how a store finds the node directories an
earlier process left behind.
"""

from __future__ import annotations

import errno
import itertools
import os
from collections.abc import Sequence
from pathlib import Path

from s3stream.base.ids import IdSource
from wal import MemoryWalStorage, WalLockHandle
from wal.frame import FILE_HEADER_SIZE, scan_frames
from wal.storage import TRIM_POINT_FILE_NAME

__all__ = ["DiskHandle", "SimDisks"]


class SimDisks:
    """Every WAL directory of the simulation (keyed by path) and the disk-wide fault switches."""

    def __init__(self) -> None:
        self._disks: dict[str, MemoryWalStorage] = {}
        self._handles: dict[str, list[DiskHandle]] = {}
        self.full = False  # writes and creates fail with ENOSPC while set
        self.failing_fsyncs = 0  # that many next fsyncs fail with EIO
        self.read_only = False  # writes, creates and fsyncs fail with EROFS while set
        self.flips: dict[str, tuple[str, int]] = {}  # directory -> (file, byte offset) read back flipped
        self.injected: dict[str, int] = {}  # fault kind -> how often it hit a write

    def open(self, path: Path) -> DiskHandle:
        """The ``wal_storage`` factory: a new handle of the WAL directory ``path`` (created if needed)."""
        path.mkdir(parents=True, exist_ok=True)  # how the store finds the node directories left behind
        disk = self._disks.setdefault(os.fspath(path), MemoryWalStorage(path.name))
        handle = DiskHandle(disk, self, os.fspath(path))
        self._handles.setdefault(os.fspath(path), []).append(handle)
        return handle

    def kill(self, root: Path, *, power_loss: bool, seed: int) -> None:
        """The process whose WAL root is ``root`` died: its handles go dead and release their locks; with
        ``power_loss`` every directory under ``root`` also loses its unsynced bytes (a seeded torn tail)."""
        prefix = os.fspath(root) + os.sep
        for path in sorted(self._handles):
            if not path.startswith(prefix):
                continue
            for handle in self._handles.pop(path):
                handle.die()
            if power_loss:
                self._disks[path].crash(torn_tail=True, rng_seed=seed)

    def unsynced_bytes(self, root: Path) -> int:
        """Bytes a power loss now would put at risk under ``root``."""
        prefix = os.fspath(root) + os.sep
        return sum(d.unsynced_bytes() for p, d in self._disks.items() if p.startswith(prefix))

    def flip(self, root: Path, seed: int) -> str | None:
        """Flip one byte of a frame in the middle of a WAL file under ``root`` (a valid frame follows it, so no
        torn write explains it); returns where, or None when no file has two frames."""
        prefix = os.fspath(root) + os.sep
        candidates: list[tuple[str, str, int]] = []
        for path in sorted(self._disks):
            if not path.startswith(prefix):
                continue
            disk = self._disks[path]
            for name in disk.list_files():
                if name == TRIM_POINT_FILE_NAME:
                    continue
                spans = scan_frames(memoryview(disk.read(name))[FILE_HEADER_SIZE:]).spans
                for (_, start, end), _after in itertools.pairwise(spans):
                    if end > start:
                        candidates.append((path, name, FILE_HEADER_SIZE + (start + end) // 2))
        if not candidates:
            return None
        path, name, offset = candidates[IdSource(seed).randrange(len(candidates))]
        self.flips[path] = (name, offset)
        self.note("flip")
        return f"{os.path.basename(path)}/{name} byte {offset}"

    def snapshot(self, root: Path) -> dict[tuple[str, str], bytes]:
        """The bytes of every file under ``root`` as written (to check that a refused open changed nothing)."""
        prefix = os.fspath(root) + os.sep
        return {(path, name): disk.read(name) for path, disk in sorted(self._disks.items())
                if path.startswith(prefix) for name in disk.list_files()}

    def repair(self) -> None:
        """Every flipped byte reads back as written again (the operator restored the disk)."""
        self.flips.clear()

    def note(self, kind: str) -> None:
        self.injected[kind] = self.injected.get(kind, 0) + 1


class DiskHandle:
    """One process's view of a WAL directory: a :class:`wal.WalStorage` (and trim point storage) that injects
    the disk's faults and refuses everything once its process died."""

    def __init__(self, disk: MemoryWalStorage, disks: SimDisks, path: str) -> None:
        self._disk = disk
        self._disks = disks
        self._path = path
        self._dead = False
        self._lock: WalLockHandle | None = None

    def die(self) -> None:
        """The process died: nothing it still runs may touch the disk; its lock is released."""
        self._dead = True
        self._release()

    def _release(self) -> None:
        """Release the directory lock once (a dead process's later release must not free its successor's)."""
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()

    def _alive(self) -> None:
        if self._dead:
            raise OSError(errno.EBADF, f"{self._disk.location}: the process that opened it died")

    def _writable(self) -> None:
        if self._disks.read_only:
            self._disks.note("read_only")
            raise OSError(errno.EROFS, f"{self._disk.location}: read-only file system (simulated)")

    def _room(self) -> None:
        self._alive()
        self._writable()
        if self._disks.full:
            self._disks.note("full")
            raise OSError(errno.ENOSPC, f"{self._disk.location}: no space left on device (simulated)")

    @property
    def location(self) -> str:
        return self._disk.location

    def list_files(self) -> list[str]:
        self._alive()
        return self._disk.list_files()

    def create(self, name: str, data: bytes) -> None:
        self._room()
        self._disk.create(name, data)

    def append(self, name: str, chunks: Sequence[bytes]) -> None:
        self._room()
        self._disk.append(name, chunks)

    def fsync(self, name: str) -> None:
        self._alive()
        self._writable()
        if self._disks.failing_fsyncs > 0:
            self._disks.failing_fsyncs -= 1
            self._disks.note("fsync")
            raise OSError(errno.EIO, f"{self._disk.location}/{name}: fsync failed (simulated I/O error)")
        self._disk.fsync(name)

    def read(self, name: str, offset: int = 0, size: int | None = None) -> bytes:
        self._alive()
        data = self._disk.read(name, offset, size)
        flip = self._disks.flips.get(self._path)
        if flip is not None and flip[0] == name and offset <= flip[1] < offset + len(data):
            damaged = bytearray(data)
            damaged[flip[1] - offset] ^= 0x10
            return bytes(damaged)
        return data

    def truncate(self, name: str, size: int) -> None:
        self._alive()
        self._writable()
        self._disk.truncate(name, size)

    def delete(self, name: str) -> None:
        self._alive()
        self._writable()
        self._disk.delete(name)

    def retire(self, name: str) -> None:
        self._alive()
        self._writable()
        self._disk.retire(name)

    def lock(self) -> WalLockHandle:
        self._alive()
        self._lock = self._disk.lock()
        return _HandleLock(self)

    def close(self) -> None:
        self._disk.close()

    def save_trim_point(self, data: bytes, *, sync: bool) -> None:
        self._alive()
        self._writable()
        self._disk.save_trim_point(data, sync=sync)

    def load_trim_point(self) -> bytes | None:
        self._alive()
        return self._disk.load_trim_point()


class _HandleLock:
    """The directory lock as its handle's holder sees it: released at most once, never after the handle died."""

    def __init__(self, handle: DiskHandle) -> None:
        self._handle = handle

    def release(self) -> None:
        self._handle._release()  # noqa: SLF001 - the handle's own lock object
