"""Shared helpers of the WAL tests: a recording, gating, fault-injecting storage wrapper; payloads."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from wal import WalStorage
from wal.storage import WalLockHandle

WAIT_S = 10.0  # generous bound for cross-thread waits; a healthy run never gets near it


class RecordingStorage:
    """Delegates to another WalStorage, counting calls; can block or fail chosen operations.

    ``gate`` (an Event): when set to a cleared Event, ``fsync`` waits for it (after signalling
    ``in_fsync``), so a test can pile appends up behind one in-flight fsync.
    ``fail`` : names of operations that raise OSError (``fail_errno``, EIO by default).
    """

    def __init__(self, inner: WalStorage) -> None:
        self.inner = inner
        self.appends: list[int] = []  # entries (header+payload pairs) per append call
        self.fsyncs = 0
        self.fsyncs_started = 0  # counted before the gate (fsyncs counts those that passed it)
        self.creates: list[str] = []
        self.deletes: list[str] = []
        self.gate: threading.Event | None = None
        self.in_fsync = threading.Event()
        self.fail: set[str] = set()
        self.fail_errno = 5
        self._mu = threading.Lock()

    @property
    def location(self) -> str:
        return self.inner.location

    def _maybe_fail(self, op: str) -> None:
        if op in self.fail:
            raise OSError(self.fail_errno, f"injected {op} failure")

    def list_files(self) -> list[str]:
        return self.inner.list_files()

    def create(self, name: str, data: bytes) -> None:
        self._maybe_fail("create")
        self.creates.append(name)
        self.inner.create(name, data)

    def append(self, name: str, chunks: Sequence[bytes]) -> None:
        self._maybe_fail("append")
        with self._mu:
            self.appends.append(len(chunks) // 2)
        self.inner.append(name, chunks)

    def fsync(self, name: str) -> None:
        with self._mu:
            self.fsyncs_started += 1
        self.in_fsync.set()
        if self.gate is not None:
            assert self.gate.wait(WAIT_S), "test gate never opened"
        self._maybe_fail("fsync")
        with self._mu:
            self.fsyncs += 1
        self.inner.fsync(name)

    def read(self, name: str, offset: int = 0, size: int | None = None) -> bytes:
        self._maybe_fail("read")
        return self.inner.read(name, offset, size)

    def truncate(self, name: str, size: int) -> None:
        self.inner.truncate(name, size)

    def delete(self, name: str) -> None:
        self._maybe_fail("delete")
        self.deletes.append(name)
        self.inner.delete(name)

    def retire(self, name: str) -> None:
        self._maybe_fail("delete")
        self.deletes.append(name)
        self.inner.retire(name)

    def lock(self) -> WalLockHandle:
        return self.inner.lock()

    def close(self) -> None:
        self.inner.close()



def payload_for(seq: int, size: int = 100) -> bytes:
    """A payload that names its seq, so a misplaced or corrupted entry is visible."""
    head = f"entry-{seq}:".encode()
    return (head * (size // len(head) + 1))[:size]
