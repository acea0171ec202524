"""The file backend cannot be made to write (or read, list or delete) outside its root: not with keys or
prefixes holding ``..``, absolute paths, NUL or other control bytes, backslashes or lone surrogates, not
through symlinks or hard links planted in the root, not through a store URL or a topic name. Every such
request is refused with a typed error (InvalidRequest, InvalidTopic), and nothing outside the root changes."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import s3stream
from s3stream.base.errors import InvalidRequest, InvalidTopic, S3StreamError
from s3stream.objectstore.local import LocalObjectStore
from s3stream.objectstore.prefixed import PrefixedObjectStore
from s3stream.objectstore.protocol import ByteRange, ObjectStore
from tests.fuzz.kit import fuzz

_NASTY = ["..", "../x", "a/../../x", "/etc/passwd", "//x", "a/./b", "x\x00y", "\x00", "a\\..\\b", "..\\x", "\ud800",
          "a/\n/b", ".tmp/x", ".locks/x", "~/x", "a/" * 600 + "b", "x" * 2000, "%2e%2e/x", "\u2025/x", "．．/x"]
keys = st.one_of(st.sampled_from(_NASTY), st.lists(st.one_of(st.sampled_from(["..", ".", "", "a", "/", "\x00", "\\"]),
                                                          st.text(max_size=6)), min_size=1, max_size=6).map("/".join))


def _tree(path: Path) -> dict[str, str]:
    """Every file (and symlink) under ``path`` with a digest of its content, for before/after comparisons."""
    out = {}
    for p in sorted(path.rglob("*")):
        rel = p.relative_to(path).as_posix()
        if p.is_symlink():
            out[rel] = "-> " + os.readlink(p)
        elif p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[rel] = "dir"
    return out


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``(root, outside)``: a store root, and a sibling directory with a file a key might aim at."""
    base = tmp_path_factory.mktemp("file-root")
    (base / "outside").mkdir()
    (base / "outside" / "passwd").write_bytes(b"root:x:0:0")
    (base / "root").mkdir()
    return base / "root", base / "outside"


def _every_verb(store: ObjectStore, key: str) -> list[object]:
    """Each verb of the ObjectStore on ``key``: its result, or the typed error it raised."""
    calls: list[Callable[[], object]] = [
        lambda: store.put(key, b"x"), lambda: store.put(key, b"y", if_none_match=True),
        lambda: store.put(key, b"z", if_match='"0"'), lambda: store.get(key), lambda: store.get(key, ByteRange(0, 1)),
        lambda: store.head(key), lambda: list(store.list(key)), lambda: store.delete(key),
        lambda: store.get_views(key, [ByteRange(0, 1)]),  # type: ignore[attr-defined]
    ]
    out: list[object] = []
    for call in calls:
        try:
            out.append(call())
        except S3StreamError as exc:
            out.append(exc)
    try:
        with store.open_upload(key, part_bytes=1 << 20) as upload:
            upload.write(b"u")
            out.append(upload.complete())
    except S3StreamError as exc:
        out.append(exc)
    return out


@fuzz(80)
@given(key=keys)
def test_no_key_reaches_outside_the_root(sandbox: tuple[Path, Path], key: str) -> None:
    root, outside = sandbox
    before = _tree(root.parent)
    _every_verb(LocalObjectStore(root), key)
    after = _tree(root.parent)
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    assert all(k.startswith("root/") for k in changed), sorted(changed)
    assert _tree(outside) == {"passwd": hashlib.sha256(b"root:x:0:0").hexdigest()}


@fuzz(40)
@given(prefix=keys, key=keys)
def test_no_prefix_reaches_outside_its_prefix(prefix: str, key: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        try:
            store = PrefixedObjectStore(LocalObjectStore(root), prefix)
        except S3StreamError:
            return
        base = prefix.strip("/")
        before = _tree(root)
        _every_verb(store, key)
        after = _tree(root)
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    # the prefix's own directories, and what lies under it
    assert all(not base or k == base or k.startswith(base + "/") or base.startswith(k + "/") for k in changed), (
        prefix, sorted(changed))


def test_symlinks_and_hard_links_planted_in_the_root(tmp_path: Path) -> None:
    """Symlinks to outside files or directories, dangling ones, and a hard link to an outside file: the store
    refuses what resolves outside, and replacing a hard-linked key never writes through to the other name."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "passwd").write_bytes(b"root:x:0:0")
    root = tmp_path / "root"
    store = LocalObjectStore(root)
    os.symlink(outside / "passwd", root / "file-link")
    os.symlink(outside, root / "dir-link")
    os.symlink(outside / "not-yet", root / "dangling")
    os.symlink(outside / "new-dir", root / "dangling-dir")
    os.link(outside / "passwd", root / "hard-link")
    before = _tree(outside)
    for key in ("file-link", "dir-link/passwd", "dir-link/new", "dangling", "dangling-dir/x", "dangling-dir/a/b"):
        for result in _every_verb(store, key)[:3]:
            assert isinstance(result, InvalidRequest), (key, result)
    store.put("hard-link", b"replaced")
    with store.open_upload("hard-link", part_bytes=1 << 20) as upload:
        upload.write(b"uploaded")
        upload.complete()
    store.delete("hard-link")
    assert _tree(outside) == before and (outside / "passwd").read_bytes() == b"root:x:0:0"
    assert not (outside / "not-yet").exists() and not (outside / "new-dir").exists()


@pytest.mark.parametrize("url", ["file:///x\x00y", "file:///%00", "file://../x", "file://relative/x", "file:x",
                                 "file://host/x"])
def test_file_urls_that_name_no_absolute_directory_are_refused(url: str, tmp_path: Path) -> None:
    """Regression (``%00``): a NUL byte in the path raised ValueError out of the backend."""
    with pytest.raises(InvalidRequest):
        s3stream.open_store(url, wal_dir=str(tmp_path / "wal"), probe=False)
    with pytest.raises(InvalidRequest):
        LocalObjectStore("/tmp/x\x00y")


@pytest.mark.parametrize("name", ["..", ".", "../outside", "a/../../outside", "/etc", "a\x00", "a/b", ".tmp/x"])
def test_topic_names_never_become_paths(name: str, tmp_path: Path) -> None:
    before = _tree(tmp_path)
    with s3stream.open_store((tmp_path / "root").as_uri(), wal_dir=str(tmp_path / "wal"), probe=False) as store:
        with pytest.raises(InvalidTopic):
            store.create_topic(name)
    after = {k: v for k, v in _tree(tmp_path).items() if not k.startswith(("root/", "wal/")) and k not in (
        "root", "wal")}
    assert after == before


def test_dump_refuses_keys_that_climb_out(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from s3stream.apps.cli import app

    (tmp_path / "secret.wal").write_bytes(b"S3WO")
    root = tmp_path / "root"
    root.mkdir()
    for key in ("../secret.wal", "a/../../secret.wal", "..%2fsecret.wal"):
        result = CliRunner().invoke(app, ["dump", key, "--url", root.as_uri()])
        assert result.exit_code == 1 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.strip().splitlines()[-1].startswith("error: "), result.stderr


@pytest.mark.parametrize("key", ["\ud800", "a/\udfff/b", "logs/\udc80.parquet"])
def test_unencodable_keys_are_invalid_requests(key: str, tmp_path: Path) -> None:
    """Regression: a key holding a lone surrogate (what a JSON ``\\ud800`` escape in a forged manifest decodes
    to) raised UnicodeEncodeError out of key validation, on every backend."""
    from s3stream.objectstore.memory import MemoryObjectStore

    for store in (LocalObjectStore(tmp_path / "root"), MemoryObjectStore("unencodable"),
                  PrefixedObjectStore(LocalObjectStore(tmp_path / "root"), "p")):
        for result in _every_verb(store, key):
            assert isinstance(result, InvalidRequest) and "UTF-8" in str(result), (store, result)
    MemoryObjectStore.drop_namespace("unencodable")
