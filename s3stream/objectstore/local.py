"""A local-directory ObjectStore: the embedded default backend (URL ``file:///ABS/DIR``).

It gives a single host the same object semantics s3stream relies on from S3 (atomic visibility,
put-if-absent and If-Match that hold across processes, last writer wins for plain puts), so the whole
engine runs and is tested without a server. The file-tree rules behind those guarantees (layout,
temp-file-then-rename publishing, the If-Match lock files, containment under the root, the mapping of
``OSError`` to typed errors) are :mod:`~s3stream.objectstore.local_files`; streamed uploads are
:mod:`~s3stream.objectstore.local_upload`. This module is the ``ObjectStore`` verbs over them:

* The ETag is a hash of the content (:mod:`s3stream.objectstore.etag`), cached per inode identity for
  ``head`` and recomputed from the file when a CAS decides on it.
* Files of a MiB or more are written with ``O_DIRECT``: they are fsynced before they are published
  anyway, and copying them into the page cache only cost CPU (:mod:`~s3stream.objectstore.directwrite`).
  Those writes run behind the writer on the process-wide I/O threads, or on ``io_executor`` (a store
  without background threads passes an inline one: they run in the writer's thread, in order).
* Unconditional puts do not lock: last writer wins, as on S3. Listings never follow symlinks.
* Object modification times come from the injected :class:`Clock` (set with ``os.utime`` before
  publishing), so a ``ManualClock`` drives GC ages on this backend exactly as on the memory backend.

Limitation (inherent to a file tree): a key cannot be both an object and a "directory" of other keys
(``a`` and ``a/b``); such a put raises :class:`InvalidRequest`. s3stream's own layout never does this.
"""

from __future__ import annotations

import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from pathlib import Path

import pyarrow as pa

from s3stream.base.clock import Clock, SystemClock
from s3stream.base.errors import InvalidRequest, ObjectNotFound, S3StreamError, TransientError
from s3stream.objectstore.etag import content_etag
from s3stream.objectstore.keys import validate_key, validate_prefix
from s3stream.objectstore.local_files import RESERVED, LocalFiles, file_etag, fsync_dir, unlink_quiet
from s3stream.objectstore.local_upload import LocalUpload
from s3stream.objectstore.protocol import DEFAULT_PART_BYTES, Body, ByteRange, ListEntry, ObjectMeta

__all__ = ["LocalObjectStore"]

_ETAG_CACHE_MAX = 4096


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


class LocalObjectStore:
    """Objects as files under ``root``; thread- and process-safe for the conditional writes."""

    def __init__(self, root: str | Path, *, clock: Clock | None = None, io_executor: Executor | None = None) -> None:
        self._clock = clock or SystemClock()
        self._io = io_executor  # runs direct writes of full staging buffers (None: the process-wide I/O threads)
        self._files = LocalFiles(root)
        self._etags: OrderedDict[str, tuple[int, int, int, int, str]] = OrderedDict()
        self._etags_lock = threading.Lock()

    @property
    def root(self) -> Path:
        """The resolved root directory."""
        return self._files.root

    @property
    def url(self) -> str:
        return self._files.root.as_uri()

    # -- writes -----------------------------------------------------------------------------------

    def put(self, key: str, data: bytes | bytearray | memoryview, *, if_none_match: bool = False,
            if_match: str | None = None) -> ObjectMeta:
        files = self._files
        path = files.path(key)
        if if_none_match and if_match is not None:
            raise InvalidRequest("put: if_none_match and if_match are mutually exclusive")
        etag = content_etag(data)
        now_ms = self._clock.now_ms()
        try:
            tmp = files.write_temp(data, now_ms, writes=self._io)
        except OSError as exc:
            raise files.error(exc, key, "write") from exc
        try:
            if if_match is not None:
                files.publish_if_match(tmp, path, key, if_match)
            else:
                files.publish(tmp, path, key, exclusive=if_none_match)
        except OSError as exc:
            raise files.error(exc, key, "put") from exc
        finally:
            unlink_quiet(tmp)
        return ObjectMeta(key, len(memoryview(data).cast("B")), etag, now_ms)

    def open_upload(self, key: str, *, part_bytes: int = DEFAULT_PART_BYTES) -> LocalUpload:
        """Bytes go to the temp file as they come, whatever ``part_bytes``: a file has no minimum part and
        no per-request cost, so the writer holds less and the disk works while it produces the rest."""
        self._files.path(key)  # refuse bad keys now, not at the end
        return LocalUpload(key, part_bytes, files=self._files, clock=self._clock, put=self.put, writes=self._io)

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
        etag = file_etag(path)
        if path.stat() == st:  # unchanged while we read it
            self._remember_etag(path, st, etag)
        return etag

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
            fd = self._files.open_object(key)
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise ObjectNotFound(f"{key} not found", key=key)
                out: list[Body] = []
                for byte_range in ranges:
                    start, end = (0, st.st_size) if byte_range is None else byte_range.resolve(st.st_size)
                    data = read(fd, start, end - start)
                    if len(data) != end - start:
                        raise TransientError(f"local store {self._files.root}: short read of {key!r}", key=key)
                    out.append(data)
                return out
            finally:
                os.close(fd)
        except S3StreamError:  # ObjectNotFound and TransientError are OSErrors too
            raise
        except OSError as exc:
            raise self._files.error(exc, key, "get") from exc

    def head(self, key: str) -> ObjectMeta:
        path = self._files.path(key)
        try:
            st = path.stat()
            is_file = path.is_file()
            etag = self._cached_etag(path) if is_file else ""
        except (IsADirectoryError, NotADirectoryError):
            is_file = False
        except OSError as exc:
            raise self._files.error(exc, key, "head") from exc
        if not is_file:
            raise ObjectNotFound(f"{key} not found", key=key)
        return ObjectMeta(key, st.st_size, etag, st.st_mtime_ns // 1_000_000)

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ListEntry]:
        validate_prefix(prefix)
        base = prefix[: prefix.rfind("/") + 1]  # the deepest directory the prefix names
        if base.split("/", 1)[0] in RESERVED:
            return iter(())
        directory = self._files.root / base if base else self._files.root
        if base:
            self._files.check_inside(directory, prefix)
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
            raise self._files.error(exc, dir_key, "list") from exc
        entries.sort(key=lambda pair: pair[0])
        for name, entry in entries:
            key = dir_key + name
            if not dir_key and name.rstrip("/") in RESERVED:
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
            raise self._files.error(exc, key, "list") from exc
        return ListEntry(key, st.st_size, st.st_mtime_ns // 1_000_000)

    # -- delete -----------------------------------------------------------------------------------

    def delete(self, key: str) -> None:
        path = self._files.path(key)
        try:
            with self._files.key_lock(key, create=False) as lock_path:
                if lock_path is not None:
                    lock_path.unlink()  # If-Match keys: no lock file outlives its object
                path.unlink()
            fsync_dir(path.parent)
        except (FileNotFoundError, IsADirectoryError):
            return
        except OSError as exc:
            raise self._files.error(exc, key, "delete") from exc
        self._files.prune(path.parent)

    def close(self) -> None:
        pass
