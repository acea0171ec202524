"""The file tree under a local store's root: where a key's file lives and how a file becomes an object.

Both the store's verbs (:mod:`~s3stream.objectstore.local`) and its streamed upload
(:mod:`~s3stream.objectstore.local_upload`) publish files into the tree, and a put, an upload and a
delete racing each other (threads or processes) must agree on every rule, so the rules live in one place,
:class:`LocalFiles`:

* ``root/<key>`` is the object: one regular file per key, ``/`` in keys are directories.
  ``root/.tmp/`` holds in-flight writes, ``root/.locks/<sha1 of key>`` the If-Match lock files; both names
  are reserved: keys starting with them are refused, and listings skip them.
* **Atomic visibility.** A write goes to a temp file in ``.tmp``, is fsynced and then published with
  one rename/link, so a reader sees the old or the new object, never a torn one; the parent directory
  is fsynced after a publish and after creating directories, so the new entry survives a crash.
* **Put-if-absent is atomic across processes** on one host: ``os.link(tmp, final)`` fails with
  ``EEXIST`` if the key exists (POSIX ``link(2)`` never replaces).
* **If-Match is atomic** across processes: an exclusive ``flock`` on the key's lock file spans
  compare-ETag and replace; a delete takes it too and removes the lock file (none outlives its object).
* **No path escapes the root.** Keys pass :func:`validate_key` and the real path (symlinks resolved)
  must lie inside the real root.
* Every ``OSError`` of the backend becomes a typed error in one place (:meth:`LocalFiles.error`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import tempfile
import threading
from collections.abc import Iterator
from concurrent.futures import Executor
from pathlib import Path

from s3stream.base.errors import (
    InvalidRequest,
    ObjectNotFound,
    PreconditionFailed,
    S3StreamError,
    StoreAccessError,
    TransientError,
)
from s3stream.objectstore.directwrite import write_file
from s3stream.objectstore.etag import EtagHasher
from s3stream.objectstore.keys import validate_key

__all__ = ["RESERVED", "LocalFiles", "file_etag", "fsync_dir", "unlink_quiet"]

_TMP_DIR = ".tmp"
_LOCK_DIR = ".locks"
#: Top-level names of the tree that are no object's (keys starting with them are refused).
RESERVED = frozenset({_TMP_DIR, _LOCK_DIR})
_CHUNK = 1 << 20
# A concurrent delete may prune the parent directory between our mkdir and our rename; retry then.
_PUBLISH_ATTEMPTS = 5
_TRANSIENT_ERRNOS = frozenset({errno.EIO, errno.EAGAIN, errno.EINTR, errno.EBUSY, errno.ETIMEDOUT})
_SHAPE_ERRNOS = frozenset({errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ENOTEMPTY, errno.ENAMETOOLONG})
_PLAIN_DIRS_CACHED = 4096  # directories known to hold no symlink (see LocalFiles.check_inside)
_READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC


def fsync_dir(path: Path) -> None:
    """fsync a directory, so a name created or removed in it survives a crash."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def unlink_quiet(path: Path) -> None:
    """Remove ``path``; a missing file is fine."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def file_etag(path: Path) -> str:
    """The ETag computed from the file's bytes (cost: one read; fine for metadata objects)."""
    digest = EtagHasher()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.etag


class LocalFiles:
    """The tree under ``root`` (created if missing); thread- and process-safe for the conditional writes."""

    def __init__(self, root: str | Path) -> None:
        """Create the root and its reserved directories if missing.

        Raises:
            InvalidRequest: the path holds a NUL byte (no file system path can).
            StoreAccessError: the directory cannot be created or used.
        """
        if "\0" in os.fspath(root):
            raise InvalidRequest(f"local store directory {os.fspath(root)!r} contains a NUL byte")
        try:
            Path(root).mkdir(parents=True, exist_ok=True)
            self._root = Path(os.path.realpath(root))
            self._root_dir = str(self._root).rstrip("/")  # keys join it with one "/" (the root "/" gives "")
            (self._root / _TMP_DIR).mkdir(exist_ok=True)
            (self._root / _LOCK_DIR).mkdir(exist_ok=True)
        except OSError as exc:
            raise StoreAccessError(f"cannot use local store directory {root}: {exc.strerror}") from exc
        self._plain_dirs: set[str] = set()
        self._plain_dirs_lock = threading.Lock()

    @property
    def root(self) -> Path:
        """The resolved root directory."""
        return self._root

    @property
    def tmp_dir(self) -> Path:
        """Where in-flight writes go (on the root's file system, so a publish is a rename)."""
        return self._root / _TMP_DIR

    # -- paths and errors -------------------------------------------------------------------------

    def path(self, key: str) -> Path:
        """The file of ``key``, refusing reserved names and anything resolving outside the root."""
        path = Path(self.key_path(key))
        self.check_inside(path, key)
        return path

    def key_path(self, key: str) -> str:
        """Where ``key``'s file is (not checked for symlinks), refusing invalid keys and reserved names."""
        validate_key(key)
        if key.split("/", 1)[0] in RESERVED:
            raise InvalidRequest(f"invalid object key {key!r}: {_TMP_DIR}/{_LOCK_DIR} are reserved")
        return f"{self._root_dir}/{key}"

    def check_inside(self, path: Path, key: str) -> None:
        """Refuse a path that a symlink under the root sends elsewhere.

        Resolving every component costs one ``lstat`` each on every request; directories found free of
        symlinks are remembered, so a request usually pays one ``lstat`` (is the file itself a link?).
        Someone able to swap a checked directory for a symlink can already write the root directly.
        """
        parent = str(path.parent)
        if parent in self._plain_dirs and not os.path.islink(path):
            return
        real = os.path.realpath(path)
        root = str(self._root)
        if real != root and not real.startswith(root + os.sep):
            raise InvalidRequest(f"object key {key!r} resolves outside the store root (symlink?)")
        if os.path.realpath(parent) == parent:
            with self._plain_dirs_lock:
                if len(self._plain_dirs) >= _PLAIN_DIRS_CACHED:
                    self._plain_dirs.clear()
                self._plain_dirs.add(parent)

    def error(self, exc: OSError, key: str, op: str) -> S3StreamError:
        """The one place that maps an OSError of this backend to the typed error taxonomy."""
        where = f"local store {self._root}: {op} {key!r}"
        if exc.errno == errno.ENOENT:
            return ObjectNotFound(f"{key} not found ({where})", key=key)
        if exc.errno in _SHAPE_ERRNOS:
            return InvalidRequest(f"{where}: key conflicts with an object or directory ({exc.strerror})")
        if exc.errno in _TRANSIENT_ERRNOS:
            return TransientError(f"{where}: {exc.strerror}", key=key)
        return StoreAccessError(f"{where}: {exc.strerror or exc}")  # EACCES, EROFS, ENOSPC, ...

    def open_object(self, key: str) -> int:
        """A read-only descriptor of ``key``'s file, never one outside the root.

        In a directory known free of symlinks the file is opened with ``O_NOFOLLOW`` (a symlink there fails
        with ``ELOOP``), which spares every read the ``lstat`` of :meth:`check_inside`; anything else
        (a symlink, a directory not checked yet) takes the full check first.
        """
        path = self.key_path(key)
        if os.path.dirname(path) in self._plain_dirs:
            try:
                return os.open(path, _READ_FLAGS | os.O_NOFOLLOW)
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise
        self.check_inside(Path(path), key)
        return os.open(path, _READ_FLAGS)

    # -- publishing -------------------------------------------------------------------------------

    def write_temp(self, data: bytes | bytearray | memoryview, now_ms: int, *,
                   writes: Executor | None = None) -> Path:
        """Write ``data`` to a fresh temp file stamped with ``now_ms`` and fsync it (``writes``: where its
        direct writes run, see :class:`~s3stream.objectstore.directwrite.FileWriter`)."""
        fd, name = tempfile.mkstemp(dir=self.tmp_dir, prefix="put-", suffix=".tmp")
        try:
            write_file(fd, data, executor=writes)
            now_ns = now_ms * 1_000_000
            os.utime(fd, ns=(now_ns, now_ns))
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            unlink_quiet(Path(name))
            raise
        os.close(fd)
        return Path(name)

    def publish(self, tmp: Path, path: Path, key: str, *, exclusive: bool) -> None:
        """Rename (or, for put-if-absent, hard-link) ``tmp`` to ``path`` and fsync the directory."""
        for attempt in range(_PUBLISH_ATTEMPTS):
            self.makedirs(path.parent, key)
            try:
                if exclusive:
                    os.link(tmp, path)
                else:
                    os.replace(tmp, path)
            except FileExistsError as exc:
                raise PreconditionFailed(f"{key} already exists", key=key) from exc
            except FileNotFoundError:
                if attempt + 1 == _PUBLISH_ATTEMPTS:
                    raise
                continue  # a concurrent delete pruned the parent directory: recreate it
            fsync_dir(path.parent)
            return

    def publish_if_match(self, tmp: Path, path: Path, key: str, if_match: str) -> None:
        with self.key_lock(key, create=True):
            try:
                current = file_etag(path)  # never the cache: this decides a CAS
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
                raise PreconditionFailed(f"{key}: If-Match on a missing key", key=key) from exc
            if current != if_match:
                raise PreconditionFailed(f"{key}: ETag does not match", key=key)
            self.publish(tmp, path, key, exclusive=False)

    @contextlib.contextmanager
    def key_lock(self, key: str, *, create: bool) -> Iterator[Path | None]:
        """Hold the exclusive flock of ``key``'s lock file (yields None if absent and not ``create``).

        A delete unlinks the lock file while holding it; a waiter that locked the unlinked inode
        sees the path now names another inode (or none) and starts over, so two holders never lock
        different inodes of one path.
        """
        lock_path = self._root / _LOCK_DIR / hashlib.sha1(key.encode("utf-8"), usedforsecurity=False).hexdigest()
        while True:
            try:
                fd = os.open(lock_path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
            except FileNotFoundError:
                if create:
                    raise
                yield None
                return
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    same = os.stat(lock_path).st_ino == os.fstat(fd).st_ino
                except FileNotFoundError:
                    same = False
                if same:
                    yield lock_path
                    return
            finally:
                os.close(fd)  # closing the descriptor releases the flock

    def makedirs(self, directory: Path, key: str) -> None:
        """Create missing directories up to ``directory``, fsyncing each parent of a new one."""
        missing: list[Path] = []
        cur = directory
        while cur != self._root and not cur.is_dir():
            missing.append(cur)
            cur = cur.parent
        for d in reversed(missing):
            self.check_inside(d, key)
            try:
                d.mkdir()
            except FileExistsError:
                if not d.is_dir():
                    raise
                continue
            fsync_dir(d.parent)

    def prune(self, directory: Path) -> None:
        """Remove now-empty parent directories, best effort, never the root."""
        cur = directory
        while cur != self._root and self._root in cur.parents:
            try:
                cur.rmdir()
            except OSError:
                return  # not empty (or a concurrent put): stop
            cur = cur.parent
