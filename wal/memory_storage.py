"""WAL files in memory, with power loss on demand: the :class:`~wal.storage.WalStorage` of tests and simulation.

Recovery is the WAL's hardest code and a real crash cannot be scheduled, so this storage keeps
written-but-unsynced bytes apart from synced ones: ``crash()`` drops the unsynced ones (optionally
keeping a random torn prefix, seeded for reproducibility) and fences off the writer that was running, so
a test can crash at any point and check what a new writer recovers.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence

from wal.clock import make_rng
from wal.errors import WalLocked
from wal.storage import TRIM_POINT_FILE_NAME, WalLockHandle

__all__ = ["MemoryWalStorage"]


class _MemoryFile:
    __slots__ = ("synced", "unsynced")

    def __init__(self, data: bytes) -> None:
        self.synced = bytearray(data)
        self.unsynced = bytearray()


class _MemoryLock:
    """The lock of one writer generation; a crash starts a new generation, so a stale release is a no-op.

    ``release`` is the storage's release of that generation, bound by the storage itself.
    """

    def __init__(self, release: Callable[[], None]) -> None:
        self._release = release

    def release(self) -> None:
        self._release()


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
            return _MemoryLock(functools.partial(self._release, self._generation))

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
