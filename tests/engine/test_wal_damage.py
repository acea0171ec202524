"""A damaged or unusable local WAL: typed errors from ``open_store`` and appends, nothing deleted or lost.

Issue 24, items 4 and 5: one flipped byte in the middle of the local WAL must not drop the acknowledged
entries after it (open fails, naming the file and byte offset, and leaves the directory as it was); a
torn last frame is still cut silently; a gap, a bad header or a garbage file is a typed error; a full
disk, a read-only directory or an I/O error is a typed error at open and at append, and appends work
again once space returns.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import s3stream
from s3stream import Record
from s3stream.base.errors import CorruptData, LocalWalCorrupt, LocalWalFull, LocalWalUnavailable, S3StreamError
from wal import file_storage as wal_storage
from wal import frame as wal_frame

from .helpers import T0, abandon, open_mem, read_all

TOPIC = "t"


def _only_local(mem_url: str, tmp_path: Path, n: int) -> tuple[Path, list[bytes]]:
    """``n`` records acknowledged from the local WAL alone (never flushed), the store then abandoned."""
    store = open_mem(mem_url, tmp_path, flush_interval_ms=600_000)
    store.create_topic(TOPIC, partitions=1)
    log = store.partition(TOPIC, 0)
    acked = []
    for i in range(n):
        value = b"v%03d" % i
        assert log.append([Record(b"k", value, T0 + i)]).base_offset == i
        acked.append(value)
    abandon(store)
    (node_dir,) = [d for d in (tmp_path / "wal").iterdir() if d.is_dir()]
    return node_dir, acked


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def _frame_starts(data: bytes) -> list[int]:
    """Byte offsets (in the file) of the frames of a local WAL file."""
    scan = wal_frame.scan_frames(memoryview(data)[wal_frame.FILE_HEADER_SIZE:])
    return [wal_frame.FILE_HEADER_SIZE + start - wal_frame.FRAME_HEADER_SIZE for _, start, _ in scan.spans]


def _log_files(node_dir: Path) -> list[Path]:
    return sorted(node_dir.glob("*.log"))


# -- item 4: damage in the middle is refused, a torn tail is cut ------------------------------------


def test_a_flipped_byte_in_the_middle_fails_open_and_changes_nothing(mem_url: str, tmp_path: Path) -> None:
    node_dir, _ = _only_local(mem_url, tmp_path, 20)
    (log,) = _log_files(node_dir)
    data = bytearray(log.read_bytes())
    starts = _frame_starts(bytes(data))
    assert len(starts) >= 20
    damaged = starts[len(starts) // 2]
    data[damaged + wal_frame.FRAME_HEADER_SIZE + 5] ^= 0x10  # one payload byte; valid frames follow
    log.write_bytes(bytes(data))
    before = _snapshot(node_dir)
    with pytest.raises(LocalWalCorrupt) as caught:
        open_mem(mem_url, tmp_path)
    err = caught.value
    assert isinstance(err, CorruptData) and isinstance(err, S3StreamError) and not err.retriable
    assert err.path == str(log) and err.offset == damaged and err.directory == str(node_dir)
    assert str(log) in str(err) and f"byte {damaged}" in str(err)
    assert "s3stream wal quarantine" in str(err)
    assert _snapshot(node_dir) == before  # nothing deleted, truncated or rewritten


def test_damage_in_an_earlier_file_keeps_the_later_files(mem_url: str, tmp_path: Path) -> None:
    store = open_mem(mem_url, tmp_path, flush_interval_ms=600_000, wal_file_bytes=2048)
    store.create_topic(TOPIC, partitions=1)
    log = store.partition(TOPIC, 0)
    for i in range(30):
        log.append([Record(b"k", b"x%03d" % i, T0 + i)])
    abandon(store)
    (node_dir,) = [d for d in (tmp_path / "wal").iterdir() if d.is_dir()]
    files = _log_files(node_dir)
    assert len(files) >= 3
    first = files[0]
    data = bytearray(first.read_bytes())
    damaged = _frame_starts(bytes(data))[1]
    data[damaged + 30] ^= 0x01
    first.write_bytes(bytes(data))
    before = _snapshot(node_dir)
    with pytest.raises(LocalWalCorrupt) as caught:
        open_mem(mem_url, tmp_path, wal_file_bytes=2048)
    assert caught.value.path == str(first) and caught.value.offset == damaged
    assert _snapshot(node_dir) == before


def test_a_torn_last_frame_is_still_cut_silently(mem_url: str, tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    node_dir, acked = _only_local(mem_url, tmp_path, 6)
    (log,) = _log_files(node_dir)
    log.write_bytes(log.read_bytes()[:-3])  # the last write torn by a crash: it was never acknowledged
    with caplog.at_level(logging.WARNING), open_mem(mem_url, tmp_path) as store:
        assert [r.value for r in read_all(store.partition(TOPIC, 0))] == acked[:-1]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


# -- item 5: gaps, bad headers and garbage files are typed ------------------------------------------


def _two_files(mem_url: str, tmp_path: Path) -> list[Path]:
    store = open_mem(mem_url, tmp_path, flush_interval_ms=600_000, wal_file_bytes=2048)
    store.create_topic(TOPIC, partitions=1)
    for i in range(30):
        store.partition(TOPIC, 0).append([Record(b"k", b"x%03d" % i, T0 + i)])
    abandon(store)
    (node_dir,) = [d for d in (tmp_path / "wal").iterdir() if d.is_dir()]
    files = _log_files(node_dir)
    assert len(files) >= 3
    return files


def _gap(files: list[Path]) -> None:
    files[1].unlink()


def _bad_header(files: list[Path]) -> None:
    data = bytearray(files[0].read_bytes())
    data[9] ^= 0x01
    files[0].write_bytes(bytes(data))


def _garbage_file(files: list[Path]) -> None:
    # named as the next file would be (so it is no gap), holding no WAL header
    data = files[-1].read_bytes()
    end_seq = int(files[-1].stem) + len(wal_frame.scan_frames(memoryview(data)[wal_frame.FILE_HEADER_SIZE:]).spans)
    (files[0].parent / f"{end_seq:020d}.log").write_bytes(b"not a WAL file at all " * 10)


@pytest.mark.parametrize(("damage", "match"), [(_gap, "previous file ends at"), (_bad_header, "checksum"),
                                               (_garbage_file, "bad file magic")])
def test_gaps_bad_headers_and_garbage_files_are_typed(mem_url: str, tmp_path: Path,
                                                      damage: Callable[[list[Path]], None], match: str) -> None:
    files = _two_files(mem_url, tmp_path)
    damage(files)
    before = _snapshot(files[0].parent)
    with pytest.raises(LocalWalCorrupt, match=match) as caught:
        open_mem(mem_url, tmp_path, wal_file_bytes=2048)
    assert caught.value.directory == str(files[0].parent)
    assert "s3stream wal quarantine" in str(caught.value)
    assert _snapshot(files[0].parent) == before


# -- item 5: a full disk, a read-only directory, an I/O error ---------------------------------------


class _Faults:
    """Makes the WAL's writes (``pwritev``/``pwrite`` in wal.storage) fail with an errno while armed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.errno: int | None = None
        real_pwritev, real_pwrite = os.pwritev, os.pwrite

        def pwritev(fd: int, buffers: Any, offset: int) -> int:
            self._maybe_fail()
            return real_pwritev(fd, buffers, offset)

        def pwrite(fd: int, data: Any, offset: int) -> int:
            self._maybe_fail()
            return real_pwrite(fd, data, offset)

        monkeypatch.setattr(wal_storage.os, "pwritev", pwritev)
        monkeypatch.setattr(wal_storage.os, "pwrite", pwrite)

    def _maybe_fail(self) -> None:
        if self.errno is not None:
            raise OSError(self.errno, os.strerror(self.errno))


def _local_acked(store: s3stream.Store) -> list[bytes | None]:
    return [r.value for r in read_all(store.partition(TOPIC, 0))]


def test_disk_full_at_append_is_retriable_and_appends_resume_when_space_returns(
        mem_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    faults = _Faults(monkeypatch)
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic(TOPIC, partitions=1)
        log = store.partition(TOPIC, 0)
        acked = [b"a", b"b"]
        for value in acked:
            log.append([Record(b"k", value)])
        faults.errno = errno.ENOSPC
        with pytest.raises(LocalWalFull) as caught:
            log.append([Record(b"k", b"refused")])
        assert caught.value.retriable and isinstance(caught.value, LocalWalUnavailable)
        assert "no space left" in str(caught.value).lower() and str(tmp_path / "wal") in str(caught.value)
        with pytest.raises(LocalWalFull):  # still full
            log.append([Record(b"k", b"refused again")])
        faults.errno = None  # space returns
        appended = None
        deadline = time.monotonic() + 20
        while appended is None and time.monotonic() < deadline:
            try:  # the first appends after space returns may still find the writer stopped (it resumes behind)
                appended = log.append([Record(b"k", b"after")])
            except LocalWalFull:
                time.sleep(0.05)
        assert appended is not None
        values = _local_acked(store)
        assert values[:2] == acked and values[-1] == b"after"
    with open_mem(mem_url, tmp_path) as again:  # restart: everything acknowledged is there, once
        got = _local_acked(again)
        assert got[:2] == acked and got[-1] == b"after"
        assert [r.offset for r in read_all(again.partition(TOPIC, 0))] == list(range(len(got)))


@pytest.mark.parametrize(("code", "words"), [(errno.EROFS, "read-only"), (errno.EACCES, "permission"),
                                             (errno.EIO, "i/o error")])
def test_unwritable_wal_at_append_is_typed(mem_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           code: int, words: str) -> None:
    faults = _Faults(monkeypatch)
    store = open_mem(mem_url, tmp_path)
    store.create_topic(TOPIC, partitions=1)
    log = store.partition(TOPIC, 0)
    log.append([Record(b"k", b"acked")])
    faults.errno = code
    with pytest.raises(LocalWalUnavailable) as caught:
        log.append([Record(b"k", b"refused")])
    assert not isinstance(caught.value, LocalWalFull) and not caught.value.retriable
    assert words in str(caught.value).lower()
    faults.errno = None
    store.close()
    with open_mem(mem_url, tmp_path) as again:
        assert _local_acked(again)[0] == b"acked"


def test_read_only_wal_directory_at_open_is_typed(mem_url: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    node_dir, acked = _only_local(mem_url, tmp_path, 3)
    real_open = os.open

    def read_only_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path).startswith(str(tmp_path / "wal")) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only_open)
    with pytest.raises(LocalWalUnavailable, match=r"(?i)read-only") as caught:
        open_mem(mem_url, tmp_path)
    assert str(node_dir) in str(caught.value) and not caught.value.retriable
    monkeypatch.setattr(os, "open", real_open)
    with open_mem(mem_url, tmp_path) as store:  # nothing was lost meanwhile
        assert _local_acked(store) == acked


def test_read_only_wal_root_at_first_write_is_typed(mem_url: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    real_mkdir = Path.mkdir

    def read_only_mkdir(self: Path, *args: Any, **kwargs: Any) -> None:
        if str(self).startswith(str(tmp_path / "wal")):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only_mkdir)
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic(TOPIC, partitions=1)
        with pytest.raises(LocalWalUnavailable, match=r"(?i)read-only"):
            store.partition(TOPIC, 0).append([Record(b"k", b"v")])


# -- the CLI: one error line, and the quarantine command -------------------------------------------


def _cli(*args: str, input: str | None = None) -> Any:
    from typer.testing import CliRunner

    from s3stream.apps.cli import app

    return CliRunner().invoke(app, list(args), input=input)


def _one_error_line(result: Any) -> str:
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("store: ")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_cli_prints_one_line_and_quarantine_lets_the_store_open(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("S3STREAM_URL", raising=False)
    root = tmp_path / "store"
    url = root.as_uri()
    store = s3stream.open_store(url, probe=False, flush_interval_ms=600_000)
    store.create_topic(TOPIC, partitions=1)
    for i in range(12):
        store.partition(TOPIC, 0).append([Record(None, b"r%02d" % i)])
    abandon(store)
    (node_dir,) = [d for d in (root / "_wal").iterdir() if d.is_dir()]
    (log,) = _log_files(node_dir)
    data = bytearray(log.read_bytes())
    damaged = _frame_starts(bytes(data))[6]
    data[damaged + 40] ^= 0x02
    log.write_bytes(bytes(data))
    before = _snapshot(node_dir)

    line = _one_error_line(_cli("produce", TOPIC, "--url", url, "-o", "probe=false", input="x\n"))
    assert line.startswith("corrupt data: ") and f"byte {damaged}" in line
    assert f"s3stream wal quarantine {node_dir}" in line
    assert _snapshot(node_dir) == before

    dry = _cli("wal", "quarantine", str(node_dir), "--dry-run")
    assert dry.exit_code == 0 and "would cut" in dry.stdout and _snapshot(node_dir) == before
    done = _cli("wal", "quarantine", str(node_dir))
    assert done.exit_code == 0, done.stdout
    assert f"at byte {damaged}" in done.stdout and "kept: local WAL entries below seq" in done.stdout
    assert _snapshot(node_dir)[f"quarantine/{log.stem}-at-{damaged}/{log.name}"] == before[log.name]

    assert _cli("produce", TOPIC, "--url", url, "-o", "probe=false", input="after\n").exit_code == 0
    with s3stream.open_store(url, probe=False, wal_dir=str(tmp_path / "reader")) as reader:
        values = [r.value for r in read_all(reader.partition(TOPIC, 0))]
    assert values == [b"r%02d" % i for i in range(len(values) - 1)] + [b"after"]
    assert len(values) - 1 == 6  # the six entries before the damaged one (nothing was uploaded)


def test_cli_quarantine_of_a_directory_in_use_is_one_line(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic(TOPIC, partitions=1)
        store.partition(TOPIC, 0).append([Record(b"k", b"v")])
        (node_dir,) = [d for d in (tmp_path / "wal").iterdir() if d.is_dir()]
        line = _one_error_line(_cli("wal", "quarantine", str(node_dir)))
    assert line.startswith("error: ") and "locked by another writer" in line and "stop the process" in line
