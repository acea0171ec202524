"""The WalStorage contract, run against both implementations, plus the memory storage's crash model."""

from __future__ import annotations

from pathlib import Path

import pytest

from wal import FileWalStorage, MemoryWalStorage, WalStorage


@pytest.fixture(params=["file", "memory"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> WalStorage:
    if request.param == "file":
        return FileWalStorage(tmp_path / "wal")
    return MemoryWalStorage("contract")


def test_implements_the_protocol(storage: WalStorage) -> None:
    assert isinstance(storage, WalStorage)


def test_create_append_read(storage: WalStorage) -> None:
    storage.create("a.log", b"head")
    storage.append("a.log", [b"one", b"", b"two"])
    storage.fsync("a.log")
    storage.append("a.log", [b"three"])  # visible before fsync
    assert storage.read("a.log") == b"headonetwothree"
    assert storage.read("a.log", 4, 3) == b"one"
    assert storage.read("a.log", 10, 100) == b"three"
    assert storage.read("a.log", 100) == b""
    assert storage.list_files() == ["a.log"]


def test_many_chunks_in_one_append(storage: WalStorage) -> None:
    chunks = [bytes([i % 256]) * (i % 7) for i in range(5000)]  # more than IOV_MAX
    storage.create("b.log", b"")
    storage.append("b.log", chunks)
    assert storage.read("b.log") == b"".join(chunks)


def test_create_refuses_an_existing_name(storage: WalStorage) -> None:
    storage.create("c.log", b"x")
    with pytest.raises(FileExistsError):
        storage.create("c.log", b"y")


def test_missing_files(storage: WalStorage) -> None:
    with pytest.raises(FileNotFoundError):
        storage.read("missing.log")
    storage.delete("missing.log")  # idempotent


def test_truncate_and_delete(storage: WalStorage) -> None:
    storage.create("d.log", b"0123456789")
    storage.truncate("d.log", 4)
    assert storage.read("d.log") == b"0123"
    storage.append("d.log", [b"++"])
    assert storage.read("d.log") == b"0123++"
    storage.delete("d.log")
    assert storage.list_files() == []


def test_close_then_reuse(storage: WalStorage) -> None:
    storage.create("e.log", b"a")
    storage.close()
    storage.append("e.log", [b"b"])
    storage.fsync("e.log")
    assert storage.read("e.log") == b"ab"


def test_file_storage_rejects_path_names(tmp_path: Path) -> None:
    storage = FileWalStorage(tmp_path)
    for bad in ("", ".", "..", "a/b"):
        with pytest.raises(ValueError):
            storage.read(bad)


# -- the memory storage's crash model --------------------------------------------------------------


def test_crash_drops_unsynced_bytes() -> None:
    storage = MemoryWalStorage()
    storage.create("f.log", b"created")
    storage.append("f.log", [b"-synced"])
    storage.fsync("f.log")
    storage.append("f.log", [b"-lost"])
    assert storage.unsynced_bytes() == 5
    storage.crash(torn_tail=False)
    assert storage.read("f.log") == b"created-synced"
    assert storage.unsynced_bytes() == 0


def test_torn_crash_keeps_a_seeded_prefix() -> None:
    kept = set()
    for seed in range(50):
        storage = MemoryWalStorage()
        storage.create("g.log", b"S")
        storage.append("g.log", [b"0123456789"])
        storage.crash(torn_tail=True, rng_seed=seed)
        data = storage.read("g.log")
        assert b"S0123456789".startswith(data) and data.startswith(b"S")
        kept.add(len(data) - 1)
        twin = MemoryWalStorage()
        twin.create("g.log", b"S")
        twin.append("g.log", [b"0123456789"])
        twin.crash(torn_tail=True, rng_seed=seed)
        assert twin.read("g.log") == data  # the same seed tears the same way
    assert 0 in kept and 10 in kept and len(kept) > 5


def test_a_crashed_storage_refuses_writes_until_a_new_writer_locks_it() -> None:
    storage = MemoryWalStorage()
    storage.create("h.log", b"x")
    storage.crash()
    for write in (lambda: storage.append("h.log", [b"y"]), lambda: storage.fsync("h.log"),
                  lambda: storage.create("i.log", b""), lambda: storage.delete("h.log"),
                  lambda: storage.truncate("h.log", 0)):
        with pytest.raises(OSError, match="simulated crash"):
            write()
    assert storage.read("h.log") == b"x"  # the "disk" stays readable
    storage.lock().release()
    storage.append("h.log", [b"y"])
