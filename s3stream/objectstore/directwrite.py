"""How the local store writes an object's bytes: large writes bypass the page cache (``O_DIRECT``).

Every object the local store writes is fsynced before it is published, so its bytes go to the disk at
once anyway; copying them into the page cache first only costs CPU (on this project's benchmark VM,
where every page cache page a write takes is fresh memory, ~12% of a cleaning round's CPU went to that
copy). RocksDB makes the same choice for its flush and compaction outputs
(``use_direct_io_for_flush_and_compaction``). :class:`FileWriter` copies the bytes into a small aligned
staging buffer (reused across writes and files, so its pages stay resident) and writes it with
``O_DIRECT``; the unaligned tail of a file is written through the page cache.

Where ``O_DIRECT`` does not exist or the file system refuses it (tmpfs on older kernels, some FUSE
mounts, macOS), and for files smaller than one staging buffer (a synchronous device write would cost
them more than the copy it saves), writes are plain buffered writes: the result is the same file.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import threading

__all__ = ["ALIGN", "STAGING_BYTES", "FileWriter", "write_file"]

#: Alignment of O_DIRECT offsets, lengths and buffers (the largest logical block size in common use).
ALIGN = 4096
#: Bytes staged per direct write (files smaller than this are written through the page cache).
STAGING_BYTES = 1 << 20
#: Staging buffers kept for reuse (each STAGING_BYTES of resident memory).
_POOL_MAX = 4
_O_DIRECT: int = getattr(os, "O_DIRECT", 0)
_CHUNK = 1 << 20

_pool: list[mmap.mmap] = []
_pool_lock = threading.Lock()


def _take_staging() -> mmap.mmap:
    with _pool_lock:
        if _pool:
            return _pool.pop()
    return mmap.mmap(-1, STAGING_BYTES)  # anonymous mappings are page-aligned


def _give_staging(buf: mmap.mmap) -> None:
    with _pool_lock:
        if len(_pool) < _POOL_MAX:
            _pool.append(buf)
            return
    buf.close()


def _write_all(fd: int, view: memoryview) -> None:
    written = 0
    while written < len(view):
        written += os.write(fd, view[written:written + _CHUNK])


def _set_direct(fd: int, on: bool) -> bool:
    """Turn O_DIRECT on or off for ``fd``; False when the platform or file system refuses it."""
    if not _O_DIRECT:
        return False
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, (flags | _O_DIRECT) if on else (flags & ~_O_DIRECT))
    except OSError:
        return False
    return True


class FileWriter:
    """Sequential writes to a new, empty file ``fd``, from its start; :meth:`close` before fsyncing it.

    Bytes are staged; each full staging buffer is written with O_DIRECT (unless the platform or the file
    system refuses it, then through the page cache). A file that never fills one staging buffer is
    written through the page cache on :meth:`close`: a synchronous device write would cost it more than
    the copy it saves.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._direct: bool | None = None  # decided at the first full staging buffer
        self._staging: mmap.mmap | None = None
        self._fill = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        if self._direct is False:
            _write_all(self._fd, view)
            return
        if self._staging is None:
            self._staging = _take_staging()
        staging = self._staging
        while len(view):
            take = min(len(view), STAGING_BYTES - self._fill)
            staging[self._fill:self._fill + take] = view[:take]
            self._fill += take
            view = view[take:]
            if self._fill == STAGING_BYTES:
                if self._direct is None:
                    self._direct = _set_direct(self._fd, True)
                self._flush()

    def _flush(self) -> None:
        """Write every staged byte (a full buffer)."""
        assert self._staging is not None
        with memoryview(self._staging) as staged:
            self._emit(staged[:self._fill])
        self._fill = 0

    def _emit(self, view: memoryview) -> None:
        """Write ``view``: directly when that is on, else (or if refused now) through the page cache."""
        if self._direct:
            try:
                _write_all(self._fd, view)
                return
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self._buffered()  # refused at write time (alignment, file system): the same bytes, cached
        _write_all(self._fd, view)

    def _buffered(self) -> None:
        if self._direct:
            _set_direct(self._fd, False)
        self._direct = False

    def close(self) -> None:
        """Write what is staged (an unaligned tail through the page cache) and release the staging buffer."""
        if self._staging is None:
            return
        try:
            with memoryview(self._staging) as staged:
                aligned = self._fill - self._fill % ALIGN if self._direct else 0
                if aligned:
                    self._emit(staged[:aligned])
                self._buffered()
                _write_all(self._fd, staged[aligned:self._fill])
            self._fill = 0
        finally:
            self.abandon()

    def abandon(self) -> None:
        """Drop what is staged (the file is being deleted) and release the staging buffer."""
        staging, self._staging = self._staging, None
        self._fill = 0
        if staging is not None:
            _give_staging(staging)


def write_file(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write ``data`` to the new, empty file ``fd`` (directly when it fills a staging buffer)."""
    writer = FileWriter(fd)
    writer.write(data)
    writer.close()
