"""One writer per WAL: the directory flock across processes and objects, and the memory storage's lock."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest

from wal import MemoryWalStorage, WalLocked, WalWriter
from wal.lock import DirLock

ROOT = Path(__file__).resolve().parents[2]
SPAWN_WAIT_S = 20.0


def hold_wal(directory: str, ready: Any, release: Any) -> None:
    """Child process: open a writer, append, report, and keep the lock until told to stop."""
    with WalWriter(directory) as writer:
        writer.append(b"from the child")
        ready.set()
        release.wait(SPAWN_WAIT_S)


@pytest.fixture
def spawn(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(ROOT))  # the spawned child imports this module by name
    return multiprocessing.get_context("spawn")


def test_lock_held_by_another_process(tmp_path: Path, spawn: Any) -> None:
    ready, release = spawn.Event(), spawn.Event()
    child = spawn.Process(target=hold_wal, args=(str(tmp_path), ready, release))
    child.start()
    try:
        assert ready.wait(SPAWN_WAIT_S)
        with pytest.raises(WalLocked, match=rf"{tmp_path} is locked by another writer \(pid {child.pid}\)"):
            WalWriter(tmp_path)
    finally:
        release.set()
        child.join(SPAWN_WAIT_S)
    assert child.exitcode == 0
    with WalWriter(tmp_path) as writer:
        assert [e.payload for e in writer.entries()] == [b"from the child"]


def test_lock_dies_with_its_process(tmp_path: Path, spawn: Any) -> None:
    ready, release = spawn.Event(), spawn.Event()
    child = spawn.Process(target=hold_wal, args=(str(tmp_path), ready, release))
    child.start()
    assert ready.wait(SPAWN_WAIT_S)
    child.kill()  # no close, no cleanup: the kernel drops the flock
    child.join(SPAWN_WAIT_S)
    with WalWriter(tmp_path) as writer:
        assert writer.next_seq == 1


def test_second_writer_in_the_same_process_is_locked_out(tmp_path: Path) -> None:
    first = WalWriter(tmp_path)
    with pytest.raises(WalLocked, match=str(tmp_path)):
        WalWriter(tmp_path)
    first.close()
    WalWriter(tmp_path).close()


def test_lock_false_skips_the_lock(tmp_path: Path) -> None:
    holder = DirLock(str(tmp_path))  # exclusivity guaranteed by the caller, by other means
    try:
        with WalWriter(tmp_path, lock=False) as writer:
            assert writer.append(b"x") == 0
    finally:
        holder.release()


def test_dir_lock_release_is_idempotent_and_writes_the_pid(tmp_path: Path) -> None:
    lock = DirLock(str(tmp_path))
    assert lock.held
    assert (tmp_path / "LOCK").read_text().strip() == str(os.getpid())
    lock.release()
    lock.release()
    assert not lock.held
    DirLock(str(tmp_path)).release()


def test_memory_storage_lock(mem: MemoryWalStorage) -> None:
    writer = WalWriter(storage=mem)
    with pytest.raises(WalLocked, match="memory:test is locked"):
        WalWriter(storage=mem)
    writer.close()
    WalWriter(storage=mem).close()


def test_a_crash_releases_the_memory_lock_and_a_stale_release_is_harmless(mem: MemoryWalStorage) -> None:
    old = WalWriter(storage=mem)
    mem.crash()
    new = WalWriter(storage=mem)
    old.close()  # releases a lock of the previous generation: the new writer keeps its own
    with pytest.raises(WalLocked):
        WalWriter(storage=mem)
    new.close()
