"""A WAL object that holds unsealed records and is gone: readers and claiming writers get CorruptData.

Sequence numbers of a WAL namespace are dense, and every WAL object records the range of sequence numbers
its node had committed before it (a clean close adds a marker with each log's end), so a hole that was
committed is told apart from an upload still in flight. Before this, a missing object silently
shortened the log and a claiming writer reassigned acknowledged offsets.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import s3stream
from s3stream.base import layout
from s3stream.base.errors import CorruptData, PreconditionFailed
from s3stream.format.walobject import WalChunkIndex, WalObjectIndex, encode_fence_object
from s3stream.manifest.model import WalCursor
from s3stream.partition.claim import plug_holes
from s3stream.read.walscan import WalIndexCache, contiguous_chunks
from tests.engine.helpers import open_mem, read_all, recs

LOG = "t/tid/0"


def _write_three_objects(url: str, tmp: Path, *, close: bool) -> tuple[s3stream.Store, list[str]]:
    """A writer with three flushed WAL objects of partition 0 (nothing sealed); their keys in order."""
    a = open_mem(url, tmp, wal="a")
    a.create_topic("t", partitions=1, config={"segment.bytes": 1 << 30})
    log = a.partition("t", 0)
    for i in range(3):
        log.append(recs(10, start=10 * i))
        log.flush()
    node = a.runtime.node_runtime().node_id
    data_keys = [e.key for e in a.runtime.objstore.list(layout.wal_prefix(node))
                 if not a.runtime.walindex.get(e.key).fence]
    assert len(data_keys) == 3
    if close:
        a.close()
    return a, data_keys


def _reader(url: str, tmp: Path, name: str) -> s3stream.Store:
    return open_mem(url, tmp, wal=name)


@pytest.mark.parametrize("which", ["middle", "newest", "first"])
@pytest.mark.parametrize("close", [True, False])
def test_missing_wal_object_is_reported_to_readers(mem_url: str, tmp_path: Path, which: str, close: bool) -> None:
    a, keys = _write_three_objects(mem_url, tmp_path, close=close)
    if which == "newest" and not close:
        a.partition("t", 0).append(recs(5, start=30))  # a later object makes the deleted one a middle hole
        a.partition("t", 0).flush()
    victim = {"first": keys[0], "middle": keys[1], "newest": keys[2]}[which]
    b = _reader(mem_url, tmp_path, "b")
    try:
        b.runtime.objstore.delete(victim)
        log = b.partition("t", 0)
        with pytest.raises(CorruptData, match="missing"):
            read_all(log)
        with pytest.raises(CorruptData):
            log.read(25 if which != "newest" else 0)
    finally:
        b.close()
        if not close:
            a.close()


@pytest.mark.parametrize("which", ["middle", "newest"])
def test_claiming_writer_never_reuses_acknowledged_offsets(mem_url: str, tmp_path: Path, which: str) -> None:
    _, keys = _write_three_objects(mem_url, tmp_path, close=True)
    c = _reader(mem_url, tmp_path, "c")
    try:
        c.runtime.objstore.delete(keys[1] if which == "middle" else keys[2])
        log = c.partition("t", 0)
        with pytest.raises(CorruptData):
            log.append(recs(1, prefix="new"))
        with pytest.raises(CorruptData):  # still refused: nothing was assigned on the way
            log.append(recs(1, prefix="new"))
        assert log.manifest().next_offset == 0
    finally:
        c.close()


def test_restart_of_the_writer_reports_the_missing_object(mem_url: str, tmp_path: Path) -> None:
    _, keys = _write_three_objects(mem_url, tmp_path, close=True)
    b = _reader(mem_url, tmp_path, "b")
    b.runtime.objstore.delete(keys[2])
    b.close()
    with pytest.raises(CorruptData):
        again = open_mem(mem_url, tmp_path, wal="a")
        try:
            again.partition("t", 0).append(recs(1, prefix="new"))
        finally:
            again.close()


def test_intact_log_reads_back_after_close_marker(mem_url: str, tmp_path: Path) -> None:
    _write_three_objects(mem_url, tmp_path, close=True)
    b = _reader(mem_url, tmp_path, "b")
    try:
        got = read_all(b.partition("t", 0))
        assert [r.offset for r in got] == list(range(30))
        assert b.partition("t", 0).append(recs(1)).base_offset == 30
    finally:
        b.close()


# -- the pure rule ---------------------------------------------------------------------------------


def _obj(seq: int, base: int | None, last: int = 0, *, committed: tuple[int, int] | None = None,
         ends: tuple[tuple[str, int], ...] = (), hole: bool = False) -> tuple[str, int, WalObjectIndex]:
    chunks = () if base is None else (WalChunkIndex(LOG, base, last, last - base + 1, 100, 1, 1, 8, 9, 0, ()),)
    index = WalObjectIndex("n", seq, 0, base is None, chunks, committed, ends, hole)
    return f"wal/n/{seq}", seq, index


def test_hole_in_flight_ends_the_readable_range() -> None:
    objects = [_obj(1, 0, 9, committed=(1, 1)), _obj(3, 20, 29, committed=(1, 2))]
    chunks, _ = contiguous_chunks(objects, LOG, 0, from_seq=1)
    assert [c.seq for c in chunks] == [1]


def test_committed_hole_raises() -> None:
    objects = [_obj(1, 0, 9, committed=(1, 1)), _obj(3, 20, 29, committed=(1, 3))]
    with pytest.raises(CorruptData, match=r"\[10, 20\)"):
        contiguous_chunks(objects, LOG, 0, from_seq=1)


def test_committed_hole_before_the_first_object_raises() -> None:
    objects = [_obj(6, 20, 29, committed=(5, 6))]
    with pytest.raises(CorruptData):
        contiguous_chunks(objects, LOG, 10, from_seq=5)


def test_collected_object_of_other_logs_is_no_loss() -> None:
    # seq 2 was committed and later collected, but the offsets continue: it held nothing of ours
    objects = [_obj(1, 0, 9, committed=(1, 1)), _obj(3, 10, 19, committed=(1, 3))]
    chunks, _ = contiguous_chunks(objects, LOG, 0, from_seq=1)
    assert [c.seq for c in chunks] == [1, 3]


def test_close_marker_reveals_a_missing_newest_object() -> None:
    objects = [_obj(1, 0, 9, committed=(1, 1)), _obj(3, None, committed=(0, 3), ends=((LOG, 20),))]
    with pytest.raises(CorruptData):
        contiguous_chunks(objects, LOG, 0, from_seq=1)
    whole = [*objects[:1], _obj(2, 10, 19, committed=(1, 2)), objects[1]]
    chunks, _ = contiguous_chunks(whole, LOG, 0, from_seq=1)
    assert chunks[-1].chunk.last_offset == 19


def test_plugged_hole_ends_the_range_without_error() -> None:
    objects = [_obj(1, 0, 9, committed=(1, 1)), _obj(2, None, hole=True), _obj(3, 20, 29, committed=(1, 2))]
    chunks, _ = contiguous_chunks(objects, LOG, 0, from_seq=1)
    assert [c.seq for c in chunks] == [1]


def test_takeover_plugs_uncommitted_holes(mem_url: str, tmp_path: Path) -> None:
    """An upload in flight below the fenced node's newest object can never land after the takeover read."""
    store = _reader(mem_url, tmp_path, "p")
    try:
        objstore = store.runtime.objstore
        for seq, committed in ((1, (1, 1)), (3, (1, 2))):
            objstore.put(layout.wal_key("n-z", seq), encode_fence_object(node_id="n-z", seq=seq, created_ms=0,
                                                                         committed=committed))
        found = plug_holes(objstore, WalIndexCache(objstore), WalCursor("n-z", 1), 0)
        assert [seq for _, seq, _ in found] == [1, 3]
        with pytest.raises(PreconditionFailed):  # the zombie's late PUT of seq 2 now fails: it is fenced
            objstore.put(layout.wal_key("n-z", 2), b"late", if_none_match=True)
        assert WalIndexCache(objstore).get(layout.wal_key("n-z", 2)).hole
    finally:
        store.close()
