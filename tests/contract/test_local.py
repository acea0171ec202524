"""The contract against the local-directory backend, plus what only a file tree can get wrong:
symlink escapes, reserved directories, directory pruning, and put-if-absent raced across processes."""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from s3stream.base.clock import ManualClock
from s3stream.base.errors import InvalidRequest, ObjectNotFound, PreconditionFailed, TransientError
from s3stream.objectstore.local import LocalObjectStore
from s3stream.objectstore.prefixed import PrefixedObjectStore
from s3stream.objectstore.protocol import ByteRange, ObjectStore
from s3stream.testing.contract import ObjectStoreContract


class TestLocalContract(ObjectStoreContract):
    offers_get_views = True

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[ObjectStore]:
        yield LocalObjectStore(tmp_path / "root")


class TestPrefixedLocalContract(ObjectStoreContract):
    offers_get_views = True
    pagination_keys = 300

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[ObjectStore]:
        yield PrefixedObjectStore(LocalObjectStore(tmp_path / "root"), "pre/fix")


# -- path escapes ---------------------------------------------------------------------------------


def test_symlinked_directory_escaping_root_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"outside data")
    store = LocalObjectStore(tmp_path / "root")
    os.symlink(outside, tmp_path / "root" / "evil")
    with pytest.raises(InvalidRequest, match="outside the store root"):
        store.get("evil/secret")
    with pytest.raises(InvalidRequest):
        store.put("evil/new", b"x")
    with pytest.raises(InvalidRequest):
        store.put("evil/deeper/new", b"x")
    with pytest.raises(InvalidRequest):
        store.delete("evil/secret")
    with pytest.raises(InvalidRequest):
        list(store.list("evil/"))
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    assert (outside / "secret").read_bytes() == b"outside data"
    assert [e.key for e in store.list("")] == []  # listings never follow symlinks


def test_symlinked_file_escaping_root_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "passwd"
    target.write_bytes(b"root:x:0:0")
    store = LocalObjectStore(tmp_path / "root")
    os.symlink(target, tmp_path / "root" / "link")
    with pytest.raises(InvalidRequest):
        store.get("link")
    with pytest.raises(InvalidRequest):
        store.head("link")
    with pytest.raises(InvalidRequest):
        store.put("link", b"overwrite", if_match='"x"')
    assert target.read_bytes() == b"root:x:0:0"


def test_symlink_appearing_in_a_checked_directory_is_refused(tmp_path: Path) -> None:
    """Directories are remembered as symlink-free, but every file is still checked for being a link."""
    target = tmp_path / "passwd"
    target.write_bytes(b"root:x:0:0")
    store = LocalObjectStore(tmp_path / "root")
    store.put("dir/ok", b"fine")
    assert store.get("dir/ok") == b"fine"  # "dir" is now known to hold no symlink
    os.symlink(target, tmp_path / "root" / "dir" / "link")
    with pytest.raises(InvalidRequest, match="outside the store root"):
        store.get("dir/link")
    with pytest.raises(InvalidRequest):
        store.put("dir/link", b"overwrite", if_match='"x"')
    assert target.read_bytes() == b"root:x:0:0"


def test_a_symlink_inside_the_root_is_followed_after_the_full_check(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "root")
    store.put("dir/real", b"0123456789")
    assert store.get("dir/real") == b"0123456789"  # "dir" is now known to hold no symlink
    os.symlink(tmp_path / "root" / "dir" / "real", tmp_path / "root" / "dir" / "alias")
    assert store.get("dir/alias", ByteRange(2, 5)) == b"234"  # O_NOFOLLOW refuses it, the check allows it
    assert [v.tobytes() for v in store.get_views("dir/alias", [ByteRange(0, 2), ByteRange(8)])] == [b"01", b"89"]
    os.symlink(tmp_path, tmp_path / "root" / "dir" / "up")
    with pytest.raises(InvalidRequest, match="outside the store root"):
        store.get_views("dir/up", [ByteRange(0, 1)])


def test_get_views_opens_the_file_once_for_all_its_ranges(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalObjectStore(tmp_path / "root")
    data = os.urandom(1 << 20)
    store.put("seg/a", data)
    opened: list[str] = []
    real_open = os.open

    def counting_open(path: str, flags: int, *args: int) -> int:
        opened.append(path)
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", counting_open)
    ranges = [ByteRange(i * 10_000, i * 10_000 + 3_000) for i in range(64)]
    views = store.get_views("seg/a", ranges)
    assert [v.tobytes() for v in views] == [data[r.start:r.end] for r in ranges]
    assert len(opened) == 1
    with pytest.raises(ObjectNotFound):
        store.get_views("seg", [ByteRange(0, 1)])  # a directory is no object


def test_reserved_directories_are_not_keys(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    for key in (".tmp/x", ".locks/y"):
        with pytest.raises(InvalidRequest):
            store.put(key, b"x")
    store.put("gc/boundary", b"1")
    store.put("gc/boundary", b"2", if_match=store.head("gc/boundary").etag)  # creates a lock file
    assert [e.key for e in store.list("")] == ["gc/boundary"]
    assert list(store.list(".locks/")) == []
    assert os.listdir(tmp_path / ".tmp") == []  # no temp file left behind


def test_stray_files_no_key_can_name_are_skipped(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    store.put("d/ok", b"1")
    (tmp_path / "d" / "back\\slash").write_bytes(b"stray")
    assert [e.key for e in store.list("d/")] == ["d/ok"]


# -- file-tree behaviour --------------------------------------------------------------------------


def test_delete_prunes_empty_directories_but_never_the_root(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    store.put("a/b/c/one", b"1")
    store.put("a/two", b"2")
    store.delete("a/b/c/one")
    assert not (tmp_path / "a" / "b").exists()
    assert (tmp_path / "a" / "two").exists()
    store.delete("a/two")
    assert not (tmp_path / "a").exists()
    assert tmp_path.is_dir()


def test_object_and_directory_of_the_same_name_conflict(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    store.put("x", b"file")
    with pytest.raises(InvalidRequest):
        store.put("x/y", b"under a file")
    store.put("d/e", b"1")
    with pytest.raises(ObjectNotFound):
        store.get("d")  # a directory is not an object
    with pytest.raises(ObjectNotFound):
        store.head("d")


def test_mtime_comes_from_the_injected_clock(tmp_path: Path) -> None:
    clock = ManualClock(1_700_000_000_123)
    store = LocalObjectStore(tmp_path, clock=clock)
    meta = store.put("k", b"v")
    assert meta.last_modified_ms == 1_700_000_000_123
    assert store.head("k").last_modified_ms == 1_700_000_000_123
    clock.advance(5_000)
    store.put("k2", b"v")
    assert [e.last_modified_ms for e in store.list("")] == [1_700_000_000_123, 1_700_000_005_123]


def test_etag_seen_by_head_tracks_writes_by_other_store_instances(tmp_path: Path) -> None:
    clock = ManualClock(0)  # same mtime for every version: the ETag must still follow the content
    a, b = LocalObjectStore(tmp_path, clock=clock), LocalObjectStore(tmp_path, clock=clock)
    first = a.put("k", b"aaaa")
    assert a.head("k").etag == first.etag
    second = b.put("k", b"bbbb")
    assert a.head("k").etag == second.etag
    with pytest.raises(PreconditionFailed):
        a.put("k", b"cccc", if_match=first.etag)


def test_get_view_reads_into_arrows_pool_and_releases_it_with_the_view(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "root")
    data = os.urandom(3 << 20)
    store.put("seg/a", data)
    before = pa.total_allocated_bytes()
    view = store.get_view("seg/a", ByteRange(1 << 20))
    assert pa.total_allocated_bytes() - before >= 2 << 20  # pooled memory, not a fresh bytes object
    assert view.tobytes() == data[1 << 20:]
    del view
    assert pa.total_allocated_bytes() - before < 1 << 20


def test_get_view_of_a_file_cut_short_under_it_is_transient(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalObjectStore(tmp_path / "root")
    store.put("seg/a", b"x" * 4096)
    real_fstat = os.fstat

    def fstat_claiming_more(fd: int) -> os.stat_result:  # the size seen before another writer truncated it
        st = real_fstat(fd)
        return os.stat_result((*st[:6], st.st_size + 100, *st[7:]))

    monkeypatch.setattr(os, "fstat", fstat_claiming_more)
    with pytest.raises(TransientError, match="short read"):
        store.get_view("seg/a")
    with pytest.raises(TransientError, match="short read"):
        store.get("seg/a")


def test_a_reopened_store_sees_the_same_objects(tmp_path: Path) -> None:
    LocalObjectStore(tmp_path).put("m/00000000000000000001.json", b"{}", if_none_match=True)
    again = LocalObjectStore(tmp_path)
    assert again.get("m/00000000000000000001.json") == b"{}"
    with pytest.raises(PreconditionFailed):
        again.put("m/00000000000000000001.json", b"{}", if_none_match=True)


# -- put-if-absent across processes ---------------------------------------------------------------


def _race_worker(root: str, ident: int, rounds: int, barrier: multiprocessing.synchronize.Barrier,
                 results: multiprocessing.queues.Queue[tuple[int, int, str]]) -> None:
    store = LocalObjectStore(root)
    for r in range(rounds):
        barrier.wait(30)  # both processes start each round together
        try:
            store.put(f"race/{r:020d}.json", f"process-{ident}".encode(), if_none_match=True)
        except PreconditionFailed:
            results.put((r, ident, "lost"))
        else:
            results.put((r, ident, "won"))


def test_processes_racing_put_if_absent_have_one_winner(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # spawn (not fork: this process has threads) re-imports this module by name in each child, so
    # the directory holding the ``contract`` test package must be on the children's sys.path (at the
    # end: tests/wal must not shadow the real ``wal`` package). Two processes race many rounds, as
    # starting a process costs far more than a round.
    monkeypatch.setattr(sys, "path", [*sys.path, str(Path(__file__).resolve().parents[1])])
    ctx = multiprocessing.get_context("spawn")
    n, rounds = 2, 25
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_race_worker, args=(str(tmp_path), i, rounds, barrier, results))
             for i in range(n)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=30) for _ in range(n * rounds)]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    store = LocalObjectStore(tmp_path)
    for r in range(rounds):
        winners = [ident for rr, ident, o in outcomes if rr == r and o == "won"]
        assert len(winners) == 1, f"round {r}: {len(winners)} winners"
        assert store.get(f"race/{r:020d}.json") == f"process-{winners[0]}".encode()
