"""A local-directory ObjectStore: the embedded default backend (URL ``file:///ABS/DIR``).

Layout and vocabulary:

* ``root/<key>`` is the object: one regular file per key, ``/`` in keys are directories.
* ``root/.tmp/`` holds in-flight writes, ``root/.locks/<sha1 of key>`` the If-Match lock files.
  Both names are reserved: keys starting with them are refused, and listings skip them.
* The ETag is a hash of the content (:mod:`s3stream.objectstore.etag`), recomputed from the file when
  a CAS decides on it.

Invariants:

* **Atomic visibility.** A write goes to a temp file in ``.tmp``, is fsynced and then published with
  one rename/link, so a reader sees the old or the new object, never a torn one; the parent directory
  is fsynced after a publish and after creating directories, so the new entry survives a crash. A
  streamed upload (``open_upload``) writes its bytes into one such temp file as they come (one staging
  buffer in memory) and publishes it like an unconditional put on ``complete``; ``abort`` deletes the
  temp file. Files of a MiB or more are written with ``O_DIRECT``: they are fsynced before they are
  published anyway, and copying them into the page cache only cost CPU (:mod:`~s3stream.objectstore.directwrite`).
* **Put-if-absent is atomic across processes** on one host: ``os.link(tmp, final)`` fails with
  ``EEXIST`` if the key exists (POSIX ``link(2)`` never replaces).
* **If-Match is atomic** across processes: an exclusive ``flock`` on the key's lock file spans
  compare-ETag and replace; a delete takes it too and removes the lock file (none outlives its
  object). Unconditional puts do not lock: last writer wins, as on S3.
* **No path escapes the root.** Keys pass :func:`validate_key` and the real path (symlinks resolved)
  must lie inside the real root; symlinks are never followed by listings.
* Object modification times come from the injected :class:`Clock` (set with ``os.utime`` before
  publishing), so a ``ManualClock`` drives GC ages on this backend exactly as on the memory backend.

Limitation (inherent to a file tree): a key cannot be both an object and a "directory" of other keys
(``a`` and ``a/b``); such a put raises :class:`InvalidRequest`. s3stream's own layout never does this.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import stat
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pyarrow as pa

from s3stream.base.clock import Clock, SystemClock
from s3stream.base.errors import (
    InvalidRequest,
    ObjectNotFound,
    PreconditionFailed,
    S3StreamError,
    StoreAccessError,
    TransientError,
)
from s3stream.objectstore.directwrite import FileWriter, write_file
from s3stream.objectstore.etag import EtagHasher, content_etag
from s3stream.objectstore.keys import validate_key, validate_prefix
from s3stream.objectstore.protocol import DEFAULT_PART_BYTES, Body, ByteRange, ListEntry, ObjectMeta
from s3stream.objectstore.upload import UploadState, check_part_bytes

__all__ = ["LOCAL_SYNC_BYTES", "LocalObjectStore"]

_TMP_DIR = ".tmp"
_LOCK_DIR = ".locks"
_RESERVED = frozenset({_TMP_DIR, _LOCK_DIR})
_ETAG_CACHE_MAX = 4096
_CHUNK = 1 << 20
#: An upload to a local directory is fdatasync-ed each time this many more bytes were written to it.
LOCAL_SYNC_BYTES = 8 << 20
# A concurrent delete may prune the parent directory between our mkdir and our rename; retry then.
_PUBLISH_ATTEMPTS = 5
_TRANSIENT_ERRNOS = frozenset({errno.EIO, errno.EAGAIN, errno.EINTR, errno.EBUSY, errno.ETIMEDOUT})
_SHAPE_ERRNOS = frozenset({errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ENOTEMPTY, errno.ENAMETOOLONG})


_PLAIN_DIRS_CACHED = 4096  # directories known to hold no symlink (see _check_inside)
_READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC


def _read_bytes(fd: int, start: int, n: int) -> bytes:
    """Up to ``n`` bytes at ``start`` (fewer only at the end of the file)."""
    data = os.pread(fd, n, start)
    if len(data) == n or not data:
        return data
    parts, got = [data], len(data)
    while got < n and (more := os.pread(fd, n - got, start + got)):
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def _read_pooled(fd: int, start: int, n: int) -> memoryview:
    """Up to ``n`` bytes at ``start`` (fewer only at the end of the file) in a buffer from Arrow's pool."""
    view = memoryview(pa.allocate_buffer(n)).cast("B")
    got = 0
    while got < n:
        step = os.preadv(fd, [view[got:]], start + got)
        if step == 0:
            break
        got += step
    return view[:got].toreadonly()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalObjectStore:
    """Objects as files under ``root``; thread- and process-safe for the conditional writes."""

    def __init__(self, root: str | Path, *, clock: Clock | None = None) -> None:
        self._clock = clock or SystemClock()
        try:
            Path(root).mkdir(parents=True, exist_ok=True)
            self._root = Path(os.path.realpath(root))
            self._root_dir = str(self._root).rstrip("/")  # keys join it with one "/" (the root "/" gives "")
            (self._root / _TMP_DIR).mkdir(exist_ok=True)
            (self._root / _LOCK_DIR).mkdir(exist_ok=True)
        except OSError as exc:
            raise StoreAccessError(f"cannot use local store directory {root}: {exc.strerror}") from exc
        self._etags: OrderedDict[str, tuple[int, int, int, int, str]] = OrderedDict()
        self._etags_lock = threading.Lock()
        self._plain_dirs: set[str] = set()

    @property
    def root(self) -> Path:
        """The resolved root directory."""
        return self._root

    @property
    def url(self) -> str:
        return self._root.as_uri()

    # -- paths and errors -------------------------------------------------------------------------

    def _path(self, key: str) -> Path:
        """The file of ``key``, refusing reserved names and anything resolving outside the root."""
        path = Path(self._key_path(key))
        self._check_inside(path, key)
        return path

    def _key_path(self, key: str) -> str:
        """Where ``key``'s file is (not checked for symlinks), refusing invalid keys and reserved names."""
        validate_key(key)
        if key.split("/", 1)[0] in _RESERVED:
            raise InvalidRequest(f"invalid object key {key!r}: {_TMP_DIR}/{_LOCK_DIR} are reserved")
        return f"{self._root_dir}/{key}"

    def _check_inside(self, path: Path, key: str) -> None:
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
            with self._etags_lock:
                if len(self._plain_dirs) >= _PLAIN_DIRS_CACHED:
                    self._plain_dirs.clear()
                self._plain_dirs.add(parent)

    def _error(self, exc: OSError, key: str, op: str) -> S3StreamError:
        """The one place that maps an OSError of this backend to the typed error taxonomy."""
        where = f"local store {self._root}: {op} {key!r}"
        if exc.errno == errno.ENOENT:
            return ObjectNotFound(f"{key} not found ({where})", key=key)
        if exc.errno in _SHAPE_ERRNOS:
            return InvalidRequest(f"{where}: key conflicts with an object or directory ({exc.strerror})")
        if exc.errno in _TRANSIENT_ERRNOS:
            return TransientError(f"{where}: {exc.strerror}", key=key)
        return StoreAccessError(f"{where}: {exc.strerror or exc}")  # EACCES, EROFS, ENOSPC, ...

    # -- writes -----------------------------------------------------------------------------------

    def put(self, key: str, data: bytes | bytearray | memoryview, *, if_none_match: bool = False,
            if_match: str | None = None) -> ObjectMeta:
        path = self._path(key)
        if if_none_match and if_match is not None:
            raise InvalidRequest("put: if_none_match and if_match are mutually exclusive")
        etag = content_etag(data)
        now_ms = self._clock.now_ms()
        try:
            tmp = self._write_temp(data, now_ms)
        except OSError as exc:
            raise self._error(exc, key, "write") from exc
        try:
            if if_match is not None:
                self._publish_if_match(tmp, path, key, if_match)
            else:
                self._publish(tmp, path, key, exclusive=if_none_match)
        except OSError as exc:
            raise self._error(exc, key, "put") from exc
        finally:
            self._unlink_quiet(tmp)
        return ObjectMeta(key, len(memoryview(data).cast("B")), etag, now_ms)

    def open_upload(self, key: str, *, part_bytes: int = DEFAULT_PART_BYTES) -> _LocalUpload:
        """Bytes go to the temp file as they come, whatever ``part_bytes``: a file has no minimum part and
        no per-request cost, so the writer holds less and the disk works while it produces the rest."""
        self._path(key)  # refuse bad keys now, not at the end
        return _LocalUpload(self, key, part_bytes)

    def _write_temp(self, data: bytes | bytearray | memoryview, now_ms: int) -> Path:
        """Write ``data`` to a fresh temp file stamped with ``now_ms`` and fsync it."""
        fd, name = tempfile.mkstemp(dir=self._root / _TMP_DIR, prefix="put-", suffix=".tmp")
        try:
            write_file(fd, data)
            now_ns = now_ms * 1_000_000
            os.utime(fd, ns=(now_ns, now_ns))
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            self._unlink_quiet(Path(name))
            raise
        os.close(fd)
        return Path(name)

    def _publish(self, tmp: Path, path: Path, key: str, *, exclusive: bool) -> None:
        """Rename (or, for put-if-absent, hard-link) ``tmp`` to ``path`` and fsync the directory."""
        for attempt in range(_PUBLISH_ATTEMPTS):
            self._makedirs(path.parent, key)
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
            _fsync_dir(path.parent)
            return

    def _publish_if_match(self, tmp: Path, path: Path, key: str, if_match: str) -> None:
        with self._key_lock(key, create=True):
            try:
                current = self._content_etag(path)  # never the cache: this decides a CAS
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
                raise PreconditionFailed(f"{key}: If-Match on a missing key", key=key) from exc
            if current != if_match:
                raise PreconditionFailed(f"{key}: ETag does not match", key=key)
            self._publish(tmp, path, key, exclusive=False)

    @contextlib.contextmanager
    def _key_lock(self, key: str, *, create: bool) -> Iterator[Path | None]:
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

    def _makedirs(self, directory: Path, key: str) -> None:
        """Create missing directories up to ``directory``, fsyncing each parent of a new one."""
        missing: list[Path] = []
        cur = directory
        while cur != self._root and not cur.is_dir():
            missing.append(cur)
            cur = cur.parent
        for d in reversed(missing):
            self._check_inside(d, key)
            try:
                d.mkdir()
            except FileExistsError:
                if not d.is_dir():
                    raise
                continue
            _fsync_dir(d.parent)

    @staticmethod
    def _unlink_quiet(path: Path) -> None:
        try:
            path.unlink()
        except FileNotFoundError:
            pass

    # -- ETags ------------------------------------------------------------------------------------

    def _remember_etag(self, path: Path, st: os.stat_result, etag: str) -> None:
        # Writes always publish a new inode, and linking/renaming sets its ctime (kernel time, not the
        # injected clock), so (inode, size, mtime, ctime) identifies one content version.
        with self._etags_lock:
            self._etags[str(path)] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, etag)
            self._etags.move_to_end(str(path))
            while len(self._etags) > _ETAG_CACHE_MAX:
                self._etags.popitem(last=False)

    def _cached_etag(self, path: Path) -> str:
        """The ETag for ``head``: from the cache when the inode identity matches, else computed."""
        st = path.stat()
        with self._etags_lock:
            hit = self._etags.get(str(path))
        if hit is not None and hit[:4] == (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns):
            return hit[4]
        etag = self._content_etag(path)
        if path.stat() == st:  # unchanged while we read it
            self._remember_etag(path, st, etag)
        return etag

    @staticmethod
    def _content_etag(path: Path) -> str:
        """The ETag computed from the file's bytes (cost: one read; fine for metadata objects)."""
        digest = EtagHasher()
        with path.open("rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
        return digest.etag

    # -- reads ------------------------------------------------------------------------------------

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        return self._read(key, [byte_range], _read_bytes)[0]

    def get_view(self, key: str, byte_range: ByteRange | None = None) -> memoryview:
        """Read into Arrow's pooled memory: its pages are reused, where a fresh ``bytes`` of MiBs is new
        pages from the kernel every time (measured: ~3/4 of a cleaning round's page faults)."""
        return self._read(key, [byte_range], _read_pooled)[0]

    def get_views(self, key: str, ranges: Sequence[ByteRange]) -> list[memoryview]:
        """Several ranges of one object with one ``open``, read in order on the caller's thread.

        A ranged read here costs no request latency, only its per-call work (~26 us through
        :meth:`get_view`, ~6 us a range here): a reader wanting many small ranges (the cleaner's scan of
        key columns, one range per row group) is better served by this than by one task per range.
        """
        return self._read(key, ranges, _read_pooled)

    def _read(self, key: str, ranges: Sequence[ByteRange | None], read: Callable[[int, int, int], Body]
              ) -> list[Body]:
        try:
            fd = self._open_object(key)
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise ObjectNotFound(f"{key} not found", key=key)
                out: list[Body] = []
                for byte_range in ranges:
                    start, end = (0, st.st_size) if byte_range is None else byte_range.resolve(st.st_size)
                    data = read(fd, start, end - start)
                    if len(data) != end - start:
                        raise TransientError(f"local store {self._root}: short read of {key!r}", key=key)
                    out.append(data)
                return out
            finally:
                os.close(fd)
        except S3StreamError:  # ObjectNotFound and TransientError are OSErrors too
            raise
        except OSError as exc:
            raise self._error(exc, key, "get") from exc

    def _open_object(self, key: str) -> int:
        """A read-only descriptor of ``key``'s file, never one outside the root.

        In a directory known free of symlinks the file is opened with ``O_NOFOLLOW`` (a symlink there fails
        with ``ELOOP``), which spares every read the ``lstat`` of :meth:`_check_inside`; anything else
        (a symlink, a directory not checked yet) takes the full check first.
        """
        path = self._key_path(key)
        if os.path.dirname(path) in self._plain_dirs:
            try:
                return os.open(path, _READ_FLAGS | os.O_NOFOLLOW)
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise
        self._check_inside(Path(path), key)
        return os.open(path, _READ_FLAGS)

    def head(self, key: str) -> ObjectMeta:
        path = self._path(key)
        try:
            st = path.stat()
            is_file = path.is_file()
            etag = self._cached_etag(path) if is_file else ""
        except (IsADirectoryError, NotADirectoryError):
            is_file = False
        except OSError as exc:
            raise self._error(exc, key, "head") from exc
        if not is_file:
            raise ObjectNotFound(f"{key} not found", key=key)
        return ObjectMeta(key, st.st_size, etag, st.st_mtime_ns // 1_000_000)

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ListEntry]:
        validate_prefix(prefix)
        base = prefix[: prefix.rfind("/") + 1]  # the deepest directory the prefix names
        if base.split("/", 1)[0] in _RESERVED:
            return iter(())
        directory = self._root / base if base else self._root
        if base:
            self._check_inside(directory, prefix)
        return self._walk(directory, base, prefix, start_after)

    def _walk(self, directory: Path, dir_key: str, prefix: str, start_after: str | None) -> Iterator[ListEntry]:
        """Yield objects under ``directory`` in key order, lazily, one directory level at a time.

        A subdirectory ``d`` sorts as ``d + "/"``: every key inside it starts with that string, so
        sorting names this way yields the global lexicographic order of keys without a full scan.
        """
        try:
            with os.scandir(directory) as it:
                entries = [(e.name + "/" if e.is_dir(follow_symlinks=False) else e.name, e) for e in it]
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            raise self._error(exc, dir_key, "list") from exc
        entries.sort(key=lambda pair: pair[0])
        for name, entry in entries:
            key = dir_key + name
            if not dir_key and name.rstrip("/") in _RESERVED:
                continue
            if name.endswith("/"):
                if not (key.startswith(prefix) or prefix.startswith(key)):
                    continue
                if start_after is not None and start_after > key and not start_after.startswith(key):
                    continue  # the whole subtree sorts before start_after
                yield from self._walk(Path(entry.path), key, prefix, start_after)
                continue
            if not key.startswith(prefix) or (start_after is not None and key <= start_after):
                continue
            found = self._list_entry(entry, key)
            if found is not None:
                yield found

    def _list_entry(self, entry: os.DirEntry[str], key: str) -> ListEntry | None:
        try:
            validate_key(key)
            if not entry.is_file(follow_symlinks=False):
                return None  # symlinks and special files are not objects
            st = entry.stat(follow_symlinks=False)
        except (FileNotFoundError, InvalidRequest):
            return None  # deleted while listing, or a stray file no key can name (a backslash...)
        except OSError as exc:
            raise self._error(exc, key, "list") from exc
        return ListEntry(key, st.st_size, st.st_mtime_ns // 1_000_000)

    # -- delete -----------------------------------------------------------------------------------

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            with self._key_lock(key, create=False) as lock_path:
                if lock_path is not None:
                    lock_path.unlink()  # If-Match keys: no lock file outlives its object
                path.unlink()
            _fsync_dir(path.parent)
        except (FileNotFoundError, IsADirectoryError):
            return
        except OSError as exc:
            raise self._error(exc, key, "delete") from exc
        self._prune(path.parent)

    def _prune(self, directory: Path) -> None:
        """Remove now-empty parent directories, best effort, never the root."""
        cur = directory
        while cur != self._root and self._root in cur.parents:
            try:
                cur.rmdir()
            except OSError:
                return  # not empty (or a concurrent put): stop
            cur = cur.parent

    def close(self) -> None:
        pass


class _LocalUpload(UploadState):
    """Streams the bytes into one temp file in ``.tmp`` as they come (only a staging buffer in memory:
    :class:`~s3stream.objectstore.directwrite.FileWriter`), then publishes it exactly as :meth:`put` does.

    A file has no parts: ``part_bytes`` is only checked. Where the writer goes through the page cache
    (no ``O_DIRECT``), each time :data:`LOCAL_SYNC_BYTES` more were written the file is ``fdatasync``-ed,
    so the disk takes the object while the writer produces the rest instead of all of it in
    ``complete``'s fsync (measured: ~150 ms for a 46 MiB segment here, the object's last wait); direct
    writes leave nothing cached to flush.
    """

    def __init__(self, store: LocalObjectStore, key: str, part_bytes: int) -> None:
        check_part_bytes(part_bytes)
        super().__init__(key)
        self._store = store
        self._fd: int | None = None
        self._tmp: Path | None = None
        self._writer: FileWriter | None = None
        self._etag = EtagHasher()
        self._size = 0
        self._synced = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._check_open("write")
        view = memoryview(data).cast("B")
        try:
            try:
                if self._fd is None:
                    fd, name = tempfile.mkstemp(dir=self._store.root / _TMP_DIR, prefix="upload-", suffix=".tmp")
                    self._fd, self._tmp, self._writer = fd, Path(name), FileWriter(fd)
                assert self._writer is not None
                self._writer.write(view)
                self._etag.update(view)
                self._size += len(view)
                if self._size - self._synced >= LOCAL_SYNC_BYTES and not self._writer.direct:
                    os.fdatasync(self._fd)  # direct writes leave nothing in the page cache to flush
                    self._synced = self._size
            except OSError as exc:
                raise self._store._error(exc, self.key, "write") from exc
        except BaseException:
            self.abort()
            raise

    def complete(self) -> ObjectMeta:
        self._check_open("complete")
        try:
            meta = self._store.put(self.key, b"") if self._fd is None else self._publish()
        except BaseException:
            self.abort()
            raise
        self._state = "completed"
        return meta

    def _publish(self) -> ObjectMeta:
        assert self._fd is not None
        assert self._tmp is not None
        assert self._writer is not None
        store = self._store
        now_ms = store._clock.now_ms()
        fd, self._fd = self._fd, None
        try:
            try:
                self._writer.close()
                now_ns = now_ms * 1_000_000
                os.utime(fd, ns=(now_ns, now_ns))
                os.fsync(fd)
            finally:
                os.close(fd)
            store._publish(self._tmp, store._path(self.key), self.key, exclusive=False)
        except OSError as exc:
            raise store._error(exc, self.key, "put") from exc
        finally:
            store._unlink_quiet(self._tmp)
        return ObjectMeta(self.key, self._size, self._etag.etag, now_ms)

    def abort(self) -> None:
        if self._state != "open":
            return
        self._state = "aborted"
        if self._writer is not None:
            self._writer.abandon()
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        if self._tmp is not None:
            with contextlib.suppress(OSError):
                self._store._unlink_quiet(self._tmp)
