"""Fuzzing the local WAL through a store: a node directory left by a dead writer, damaged anywhere (its frames,
or an entry inside a frame whose CRC was patched), is replayed or refused at open with an S3StreamError
(LocalWalCorrupt, CorruptData) that changes nothing in the directory; what opens serves a prefix of the
acknowledged records of every partition, never a wrong one."""

from __future__ import annotations

import shutil
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import s3stream
from s3stream import ManualClock, Record
from s3stream.base.errors import S3StreamError, StoreAccessError
from s3stream.objectstore.forwarding import ForwardingObjectStore
from s3stream.objectstore.local import LocalObjectStore
from s3stream.objectstore.protocol import ObjectMeta
from tests.engine.helpers import abandon
from wal.frame import FILE_HEADER_SIZE, FRAME_HEADER_SIZE, encode_frame

from .kit import SLOW_FUZZ, mutated, mutations, typed_or_value

T0 = 1_700_000_000_000
_FRAME = struct.Struct("<HBBIQI")
_WRITTEN = {0: [b"v0", b"v2", b"v4"], 1: [b"v1", b"v3"]}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file store and the WAL directory of a writer that died with 5 acknowledged, unflushed records."""
    root = tmp_path_factory.mktemp("localwal")
    store = s3stream.open_store((root / "data").as_uri(), wal_dir=str(root / "wal"), probe=False,
                                flush_interval_ms=3_600_000, clock=ManualClock(T0))
    store.create_topic("t", partitions=2)
    for i in range(5):
        store.partition("t", i % 2).append([Record(b"k%d" % i, b"v%d" % i, T0 + i)])
    abandon(store)
    return root


def _log(root: Path) -> Path:
    (path,) = sorted((root / "wal").rglob("*.log"))
    return path


def _frames(data: bytes) -> list[tuple[int, int, bytes]]:
    """``(position, seq, payload)`` of each frame of a WAL file."""
    out, pos = [], FILE_HEADER_SIZE
    while pos + FRAME_HEADER_SIZE <= len(data):
        magic, _, _, length, seq, _ = _FRAME.unpack_from(data, pos)
        if magic != 0x5357:
            break
        out.append((pos, seq, data[pos + FRAME_HEADER_SIZE: pos + FRAME_HEADER_SIZE + length]))
        pos += FRAME_HEADER_SIZE + length
    return out


def _open_damaged(template: Path, damage: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copytree(template, root, dirs_exist_ok=True)
        log = _log(root)
        log.write_bytes(damage)
        node_files = {p.name: p.read_bytes() for p in log.parent.iterdir()}
        got = typed_or_value(lambda: s3stream.open_store((root / "data").as_uri(), wal_dir=str(root / "wal"),
                                                         probe=False, clock=ManualClock(T0)), S3StreamError)
        if isinstance(got, S3StreamError):
            assert {p.name: p.read_bytes() for p in log.parent.iterdir()} == node_files, "a refused open changed it"
            return
        assert isinstance(got, s3stream.Store)
        with got as store:
            for partition, written in _WRITTEN.items():
                values = [r.value for r in store.partition("t", partition).read(0)]
                assert values == written[:len(values)], (partition, values)


def test_the_template_replays_every_record(template: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(template, tmp, dirs_exist_ok=True)
        with s3stream.open_store((Path(tmp) / "data").as_uri(), wal_dir=f"{tmp}/wal", probe=False,
                                 clock=ManualClock(T0)) as store:
            assert {p: [r.value for r in store.partition("t", p).read(0)] for p in _WRITTEN} == _WRITTEN


@SLOW_FUZZ
@given(ops=mutations(3))
def test_damaged_wal_files(template: Path, ops: list[tuple[str, int, int, int]]) -> None:
    _open_damaged(template, mutated(_log(template).read_bytes(), ops))


@SLOW_FUZZ
@given(which=st.integers(0, 4), ops=mutations(3))
def test_damaged_entries_in_valid_frames(template: Path, which: int, ops: list[tuple[str, int, int, int]]) -> None:
    """The frame CRC is recomputed over the damaged entry: the entry decoder's own checks refuse it."""
    data = _log(template).read_bytes()
    frames = _frames(data)
    pos, seq, payload = frames[which % len(frames)]
    end = pos + FRAME_HEADER_SIZE + len(payload)
    _open_damaged(template, data[:pos] + encode_frame(seq, mutated(payload, ops)) + data[end:])


class _ManifestsRefused(ForwardingObjectStore):
    """The bucket refuses manifest writes (credentials expired mid-restart); WAL objects still land."""

    def put(self, key: str, data: bytes | bytearray | memoryview, *, if_none_match: bool = False,
            if_match: str | None = None) -> ObjectMeta:
        if key.startswith("logs/"):
            raise StoreAccessError(f"PUT {key}: 403 ExpiredToken (simulated)")
        return self.inner.put(key, data, if_none_match=if_none_match, if_match=if_match)


@pytest.mark.parametrize("failure", ["corrupt entry", "expired credentials"])
def test_an_open_refused_during_recovery_loses_no_acknowledged_record(template: Path, failure: str) -> None:
    """An open whose replay fails must leave the local WAL as it found it: the failed open's cleanup used
    to close the node as after a clean run, trimming the whole local WAL, so the next open (the entry
    repaired, the credentials renewed) silently replayed nothing: every acknowledged, unflushed record
    was lost, not only the damaged one."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copytree(template, root, dirs_exist_ok=True)
        log = _log(root)
        good = log.read_bytes()
        kwargs: dict[str, object] = {}
        if failure == "corrupt entry":
            pos, seq, payload = _frames(good)[2]
            end = pos + FRAME_HEADER_SIZE + len(payload)
            log.write_bytes(good[:pos] + encode_frame(seq, b"\0" + payload[1:]) + good[end:])
        else:
            kwargs["object_store"] = _ManifestsRefused(LocalObjectStore(root / "data"))
        with pytest.raises(S3StreamError):
            s3stream.open_store((root / "data").as_uri(), wal_dir=str(root / "wal"), probe=False,
                                clock=ManualClock(T0), **kwargs)
        log.write_bytes(good)  # the operator repairs the entry / renews the credentials
        with s3stream.open_store((root / "data").as_uri(), wal_dir=str(root / "wal"), probe=False,
                                 clock=ManualClock(T0)) as store:
            assert {p: [r.value for r in store.partition("t", p).read(0)] for p in _WRITTEN} == _WRITTEN
