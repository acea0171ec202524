"""How the local store writes an object's bytes: large writes bypass the page cache (``O_DIRECT``).

Every object the local store writes is fsynced before it is published, so its bytes go to the disk at
once anyway; copying them into the page cache first only costs CPU (on this project's benchmark VM,
where every page cache page a write takes is fresh memory, ~12% of a cleaning round's CPU went to that
copy). RocksDB makes the same choice for its flush and compaction outputs
(``use_direct_io_for_flush_and_compaction``). :class:`FileWriter` copies the bytes into a small aligned
staging buffer (reused across writes and files, so its pages stay resident) and writes it with
``O_DIRECT`` on an I/O thread while the caller fills the next one (a direct write waits for the device;
writing behind the caller took ~7% off a cleaning round, whose output threads had been waiting for it);
the unaligned tail of a file is written through the page cache. A store without background threads
(``background=manual``) hands its writers an executor of its own instead of that pool (an inline one: each
full buffer is written in the caller's thread, at once and in order).

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
from concurrent.futures import Executor, Future, ThreadPoolExecutor

__all__ = ["ALIGN", "STAGING_BYTES", "FileWriter", "write_file"]

#: Alignment of O_DIRECT offsets, lengths and buffers (the largest logical block size in common use).
ALIGN = 4096
#: Bytes staged per direct write (files smaller than this are written through the page cache).
STAGING_BYTES = 1 << 20
#: Staging buffers kept for reuse (each STAGING_BYTES of resident memory).
_POOL_MAX = 8
_O_DIRECT: int = getattr(os, "O_DIRECT", 0)
_CHUNK = 1 << 20

_IO_THREADS = 4

_pool: list[mmap.mmap] = []
_pool_lock = threading.Lock()
_IO_POOL: ThreadPoolExecutor | None = None


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


def _write_all(fd: int, view: memoryview, offset: int) -> None:
    written = 0
    while written < len(view):
        written += os.pwrite(fd, view[written:written + _CHUNK], offset + written)


def _forget_pools_in_child() -> None:
    """A forked child has none of the parent's threads: its writers start a pool (and a lock) of their own."""
    global _IO_POOL, _pool_lock
    _IO_POOL, _pool_lock = None, threading.Lock()
    _pool.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools_in_child)


def _io_pool() -> ThreadPoolExecutor:
    """The threads that write full staging buffers behind their writers (tasks never wait on each other)."""
    global _IO_POOL
    with _pool_lock:
        if _IO_POOL is None:
            _IO_POOL = ThreadPoolExecutor(max_workers=_IO_THREADS, thread_name_prefix="s3stream-direct-write")
        return _IO_POOL


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
    system refuses it, then through the page cache) on an I/O thread while the next buffer fills: a direct
    write waits for the device (~3 ms a MiB on the benchmark VM's disk), which the caller would otherwise
    wait for between its own pieces of work. At most one write of a file is in flight, so its error
    surfaces at the next full buffer or at :meth:`close`. A file that never fills one staging buffer is
    written through the page cache on :meth:`close`: a synchronous device write would cost it more than
    the copy it saves. Every write goes to an explicit offset (``pwrite``). ``executor`` runs the writes of
    full buffers (None: the process-wide I/O threads).
    """

    def __init__(self, fd: int, *, executor: Executor | None = None) -> None:
        self._fd = fd
        self._executor = executor
        self._direct: bool | None = None  # decided at the first full staging buffer
        self._staging: mmap.mmap | None = None
        self._fill = 0
        self._offset = 0  # where the staged bytes go in the file
        self._inflight: tuple[Future[None], mmap.mmap] | None = None

    @property
    def direct(self) -> bool:
        """Whether full buffers go to the disk directly (the page cache holds nothing of them to flush)."""
        return bool(self._direct)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        if self._direct is False:
            _write_all(self._fd, view, self._offset)
            self._offset += len(view)
            return
        if self._staging is None:
            self._staging = _take_staging()
        while len(view):
            staging = self._staging
            take = min(len(view), STAGING_BYTES - self._fill)
            staging[self._fill:self._fill + take] = view[:take]
            self._fill += take
            view = view[take:]
            if self._fill == STAGING_BYTES:
                if self._direct is None:
                    self._direct = _set_direct(self._fd, True)
                self._flush()
                if self._direct is False:  # refused: the rest is written as it comes
                    self.write(view)
                    return

    def _flush(self) -> None:
        """Hand the full staging buffer to an I/O thread (after the write before it finished) and stage
        into another one."""
        assert self._staging is not None
        self._wait()
        full, offset = self._staging, self._offset
        pool = self._executor if self._executor is not None else _io_pool()
        self._inflight = (pool.submit(self._write_staged, full, offset), full)
        self._staging, self._fill = _take_staging(), 0
        self._offset += STAGING_BYTES

    def _write_staged(self, buf: mmap.mmap, offset: int) -> None:
        with memoryview(buf) as staged:
            self._emit(staged, offset)

    def _wait(self) -> None:
        """Wait for the write in flight (raising its error) and take its buffer back to the pool."""
        if self._inflight is None:
            return
        future, buf = self._inflight
        self._inflight = None
        try:
            future.result()
        finally:
            _give_staging(buf)

    def _emit(self, view: memoryview, offset: int) -> None:
        """Write ``view`` at ``offset``: directly when that is on, else (or if refused now) through the cache."""
        if self._direct:
            try:
                _write_all(self._fd, view, offset)
                return
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self._buffered()  # refused at write time (alignment, file system): the same bytes, cached
        _write_all(self._fd, view, offset)

    def _buffered(self) -> None:
        if self._direct:
            _set_direct(self._fd, False)
        self._direct = False

    def close(self) -> None:
        """Wait for the write in flight, write what is staged (an unaligned tail through the page cache) and
        release the staging buffers."""
        try:
            self._wait()
            if self._staging is None:
                return
            with memoryview(self._staging) as staged:
                aligned = self._fill - self._fill % ALIGN if self._direct else 0
                if aligned:
                    self._emit(staged[:aligned], self._offset)
                self._buffered()
                _write_all(self._fd, staged[aligned:self._fill], self._offset + aligned)
            self._offset += self._fill
            self._fill = 0
        finally:
            self.abandon()

    def abandon(self) -> None:
        """Drop what is staged (the file is being deleted) and release the staging buffers (after the write
        in flight, whose error no one wants now)."""
        try:
            self._wait()
        except OSError:
            pass
        staging, self._staging = self._staging, None
        self._fill = 0
        if staging is not None:
            _give_staging(staging)


def write_file(fd: int, data: bytes | bytearray | memoryview, *, executor: Executor | None = None) -> None:
    """Write ``data`` to the new, empty file ``fd`` (directly when it fills a staging buffer; ``executor``
    as in :class:`FileWriter`)."""
    writer = FileWriter(fd, executor=executor)
    writer.write(data)
    writer.close()
