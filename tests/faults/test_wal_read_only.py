"""The WAL disk turning read-only while the store runs (a file system remounted ``ro`` after an error).

Designed behaviour (``s3stream/write/localwal.py``): a read-only directory is :class:`LocalWalUnavailable`,
not retriable, and not resumed in place: "fix the disk, then reopen the store (acknowledged records are
replayed from the local WAL at the next open)". Proven here, with every write-side call of the WAL's file
storage (``pwrite``/``pwritev``/``fsync``/``fdatasync``/``ftruncate``, opens for writing) failing EROFS:

* every append (``append``, ``append_async``, ``ack=s3``) then fails with that typed error, promptly, each
  time: no traceback of another type, no hang (with ``ack=s3`` the first append may still be acknowledged:
  its WAL object reached the bucket, which is what ``ack=s3`` waits for; it is then recovered from there);
* the store keeps refusing (typed) after the disk is writable again, until it is reopened, and ``close``
  returns;
* the reopened store has every record acknowledged before, at its offset, exactly once, both those already
  uploaded and those only in the local WAL, and appends again.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path
from typing import Any

import pytest

import s3stream
from s3stream import Record
from s3stream.base.errors import LocalWalFull, LocalWalUnavailable, S3StreamError
from tests.engine.helpers import open_mem, read_all
from wal import file_storage

TOPIC = "t"


class ReadOnlyDisk:
    """Makes the WAL's write-side os calls fail with EROFS while :attr:`read_only` (reads keep working)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
        self.read_only = False
        self.refused = 0
        real = {name: getattr(os, name) for name in ("pwrite", "pwritev", "fsync", "fdatasync", "ftruncate",
                                                     "open")}

        def refusing(name: str) -> Any:
            def call(*args: Any, **kwargs: Any) -> Any:
                self._check()
                return real[name](*args, **kwargs)
            return call

        def open_(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            if str(path).startswith(str(root)) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
                self._check()
            return int(real["open"](path, flags, *args, **kwargs))

        for name in ("pwrite", "pwritev", "fsync", "fdatasync", "ftruncate"):
            monkeypatch.setattr(file_storage.os, name, refusing(name))
        monkeypatch.setattr(file_storage.os, "open", open_)

    def _check(self) -> None:
        if self.read_only:
            self.refused += 1
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))


def _values(store: s3stream.Store) -> list[tuple[int | None, bytes | None]]:
    return [(r.offset, r.value) for r in read_all(store.partition(TOPIC, 0))]


def _refused_promptly(call: Any) -> LocalWalUnavailable:
    started = time.monotonic()
    with pytest.raises(LocalWalUnavailable) as caught:
        call()
    assert time.monotonic() - started < 5.0
    err = caught.value
    assert not isinstance(err, LocalWalFull) and not err.retriable and err.errno == errno.EROFS
    assert "read-only" in str(err) and "reopen" in str(err)
    return err


@pytest.mark.parametrize("ack", ["wal", "s3"])
def test_wal_turning_read_only_mid_run_refuses_appends_typed_and_a_reopen_recovers_everything(
        mem_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ack: str) -> None:
    disk = ReadOnlyDisk(monkeypatch, tmp_path / "wal")
    # ack=s3 needs flushes to acknowledge; ack=wal keeps the later records in the local WAL only
    store = open_mem(mem_url, tmp_path, ack=ack, flush_interval_ms=20 if ack == "s3" else 30_000)
    acked: list[tuple[int | None, bytes | None]] = []
    try:
        store.create_topic(TOPIC, partitions=1)
        log = store.partition(TOPIC, 0)

        def append(value: bytes) -> None:
            acked.append((log.append([Record(b"k", value)]).base_offset, value))

        for i in range(10):
            append(b"uploaded-%02d" % i)
        store.flush()  # these are in the bucket too
        for i in range(10):
            append(b"local-%02d" % i)  # with ack=wal, only in the local WAL (no flush is due for minutes)
        disk.read_only = True
        if ack == "s3":  # an ack=s3 append waits for its WAL object, not the local disk: it may still land
            try:
                append(b"durable in the bucket")
            except LocalWalUnavailable:
                pass
        else:
            _refused_promptly(lambda: log.append([Record(b"k", b"refused")]))
        _refused_promptly(lambda: log.append([Record(b"k", b"refused again")]))  # stopped: still typed
        future = log.append_async([Record(b"k", b"refused async")])
        _refused_promptly(lambda: future.result(timeout=10))
        _refused_promptly(lambda: log.append([Record(b"k", b"refused s3")], ack="s3"))
        assert disk.refused >= 1
        disk.read_only = False  # the disk is fixed; this store stays stopped, as designed (reopen)
        _refused_promptly(lambda: log.append([Record(b"k", b"still refused")]))
    finally:
        started = time.monotonic()
        try:
            store.close()
        except S3StreamError:  # close may report the stopped WAL (typed), never anything else
            pass
        assert time.monotonic() - started < 30
    with open_mem(mem_url, tmp_path) as again:
        got = _values(again)
        assert got[:len(acked)] == acked  # everything acknowledged, at its offset, once
        # the refused appends may have been written to the page cache before the fsync failed (the WAL cannot
        # tell): like a timed-out Kafka produce they may appear after the acknowledged records, never between
        extra = {v for _, v in got[len(acked):]}
        assert extra <= {b"refused", b"refused again", b"refused async", b"refused s3", b"still refused"}
        assert [o for o, _ in got] == list(range(len(got)))
        after = again.partition(TOPIC, 0).append([Record(b"k", b"after")])
        assert after.base_offset == len(got)
    with open_mem(mem_url, tmp_path, wal="reader") as reader:  # and it all reaches the bucket
        assert _values(reader)[:len(acked)] == acked
