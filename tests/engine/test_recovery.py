"""Restart and crash recovery: every acknowledged record is readable exactly once at its offset.

A crash is simulated by arming a named crash point, letting SimulatedCrash stop the operation (or the
flush thread), then abandoning the store object without close() (helpers.abandon stops its threads and
releases the WAL directory lock, as the kernel would) and opening a new store on the same bucket and WAL
directory, as a restarted process would.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest

import s3stream
from s3stream import Record
from s3stream.base.crashpoints import CrashPoints, SimulatedCrash
from s3stream.base.errors import S3StreamError

from .helpers import T0, abandon, open_mem, read_all

TOPIC = "t"
PARTS = 2


def _append(log: s3stream.PartitionLog, acked: list[bytes], n: int) -> None:
    """Append ``n`` records one batch each; remember the acknowledged values in order."""
    for _ in range(n):
        value = b"%d-%d" % (log.partition, len(acked))
        res = log.append([Record(b"k%d" % (len(acked) % 7), value, T0 + len(acked))])
        assert res.base_offset == len(acked)
        acked.append(value)


def _check(store: s3stream.Store, acked: dict[int, list[bytes]]) -> None:
    for p, values in acked.items():
        log = store.partition(TOPIC, p)
        got = read_all(log, 0)
        assert [r.offset for r in got] == list(range(len(got))), f"partition {p}: offsets not dense"
        assert [r.value for r in got] == values, f"partition {p}"
        assert log.log_end_offset == len(values)
        sealed = [s for s in log.segments() if s.sealed]
        assert all(a.last_offset + 1 == b.base_offset for a, b in itertools.pairwise(sealed))


def test_close_and_reopen_sees_everything(mem_url: str, tmp_path: Path) -> None:
    acked: dict[int, list[bytes]] = {p: [] for p in range(PARTS)}
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic(TOPIC, partitions=PARTS, config={"segment.bytes": 200})
        for p in range(PARTS):
            _append(store.partition(TOPIC, p), acked[p], 9 + p)
    with open_mem(mem_url, tmp_path) as again:
        _check(again, acked)
        for p in range(PARTS):
            _append(again.partition(TOPIC, p), acked[p], 3)
        _check(again, acked)
    with open_mem(mem_url, tmp_path, wal="elsewhere") as third:  # no local WAL at all
        _check(third, acked)


_FLUSH_POINTS = ["flush.before_put", "flush.after_put", "flush.before_trim"]
_SEAL_POINTS = ["seal.after_segment_put", "seal.after_manifest_commit", "manifest.before_put",
                "manifest.after_put"]


_CASES = [(point, after, "memory") for point in _FLUSH_POINTS + _SEAL_POINTS for after in (0, 1)]
_CASES += [(point, 0, "file") for point in _FLUSH_POINTS + _SEAL_POINTS]


@pytest.mark.parametrize(("point", "after", "backend"), _CASES)
def test_crash_at_every_point(mem_url: str, tmp_path: Path, point: str, after: int, backend: str) -> None:
    """``after``: how many hits of the point pass before the crash (a later flush or seal dies)."""
    url = mem_url if backend == "memory" else f"file://{tmp_path}/data"
    acked: dict[int, list[bytes]] = {p: [] for p in range(PARTS)}
    cp = CrashPoints()
    store = open_mem(url, tmp_path, crash_points=cp, flush_interval_ms=60_000)
    store.create_topic(TOPIC, partitions=PARTS)
    logs = [store.partition(TOPIC, p) for p in range(PARTS)]
    for log in logs:
        _append(log, acked[log.partition], 3)
    logs[0].roll()
    for log in logs:
        _append(log, acked[log.partition], 2)
    store.flush()  # a first WAL object and a sealed segment exist
    for log in logs:
        _append(log, acked[log.partition], 4)
    before = cp.hits(point)
    cp.arm(point, after=after)
    crashed = False
    try:
        if point in _FLUSH_POINTS:
            store.flush()
            if after:
                _append(logs[1], acked[1], 1)
                store.flush()
        else:
            logs[0].roll()
            if after:
                _append(logs[1], acked[1], 1)
                logs[1].roll()
    except SimulatedCrash:
        crashed = True
    except S3StreamError:  # a flush waiter learns that the flush thread died
        crashed = True
    assert crashed and cp.hits(point) == before + after + 1
    if point in _FLUSH_POINTS:  # the flush thread died: the node acknowledges nothing more
        with pytest.raises(S3StreamError):
            logs[0].append([Record(b"k", b"not-acked")])
    abandon(store)

    with open_mem(url, tmp_path) as recovered:
        _check(recovered, acked)
        for p in range(PARTS):
            _append(recovered.partition(TOPIC, p), acked[p], 2)
        recovered.partition(TOPIC, 0).roll()
        _check(recovered, acked)
    with open_mem(url, tmp_path) as again:
        _check(again, acked)
    with open_mem(url, tmp_path, wal="elsewhere") as reader:
        _check(reader, acked)


@pytest.mark.parametrize("point", ["manifest.before_put", "manifest.after_put"])
def test_crash_while_claiming_the_partition(mem_url: str, tmp_path: Path, point: str) -> None:
    cp = CrashPoints()
    store = open_mem(mem_url, tmp_path, crash_points=cp)
    store.create_topic(TOPIC, partitions=PARTS)
    cp.arm(point)
    with pytest.raises(SimulatedCrash):
        store.partition(TOPIC, 0).append([Record(b"k", b"never-acked")])
    abandon(store)
    acked: dict[int, list[bytes]] = {p: [] for p in range(PARTS)}
    with open_mem(mem_url, tmp_path) as recovered:
        _check(recovered, acked)
        _append(recovered.partition(TOPIC, 0), acked[0], 3)
        _check(recovered, acked)
    with open_mem(mem_url, tmp_path) as again:
        _check(again, acked)


def test_crash_with_background_seals_pending(mem_url: str, tmp_path: Path) -> None:
    """Size-triggered rolls sealed in the background, then the process dies before they all land."""
    acked: dict[int, list[bytes]] = {p: [] for p in range(PARTS)}
    store = open_mem(mem_url, tmp_path, flush_interval_ms=10)
    store.create_topic(TOPIC, partitions=PARTS, config={"segment.bytes": 150})
    for _ in range(5):
        for p in range(PARTS):
            _append(store.partition(TOPIC, p), acked[p], 3)
    abandon(store)
    with open_mem(mem_url, tmp_path) as recovered:
        _check(recovered, acked)
        recovered.flush()
        for p in range(PARTS):
            segs = recovered.partition(TOPIC, p).segments()
            assert all(s.size_bytes <= 150 for s in segs)
            assert all(s.sealed for s in segs[:-1])
    with open_mem(mem_url, tmp_path, wal="elsewhere") as reader:
        _check(reader, acked)


def test_torn_local_wal_tail_is_truncated(mem_url: str, tmp_path: Path) -> None:
    store = open_mem(mem_url, tmp_path, flush_interval_ms=60_000)
    store.create_topic(TOPIC, partitions=1)
    log = store.partition(TOPIC, 0)
    acked: list[bytes] = []
    _append(log, acked, 3)
    store.flush()  # offsets 0..2 are in the bucket
    _append(log, acked, 4)  # offsets 3..6 only in the local WAL
    abandon(store)
    node_dirs = [d for d in (tmp_path / "wal").iterdir() if d.is_dir()]
    assert len(node_dirs) == 1
    files = sorted(node_dirs[0].glob("*.log"))
    last = files[-1]
    data = last.read_bytes()
    last.write_bytes(data[:-3])  # tear the last entry (offset 6)
    with open_mem(mem_url, tmp_path) as recovered:
        log = recovered.partition(TOPIC, 0)
        assert log.log_end_offset == 6
        assert [r.value for r in read_all(log)] == acked[:6]
        assert log.append([Record(b"k", b"after")]).base_offset == 6
    with open_mem(mem_url, tmp_path) as again:
        assert [r.value for r in read_all(again.partition(TOPIC, 0))] == [*acked[:6], b"after"]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("point", _SEAL_POINTS)
def test_crash_kills_the_background_sealer(mem_url: str, tmp_path: Path, point: str) -> None:
    """A size-triggered roll is sealed by the background thread; the crash kills that thread."""
    acked: dict[int, list[bytes]] = {p: [] for p in range(PARTS)}
    cp = CrashPoints()
    store = open_mem(mem_url, tmp_path, crash_points=cp)
    store.create_topic(TOPIC, partitions=PARTS, config={"segment.bytes": 150})
    for p in range(PARTS):
        _append(store.partition(TOPIC, p), acked[p], 1)
    cp.arm(point)
    for _ in range(3):
        for p in range(PARTS):
            _append(store.partition(TOPIC, p), acked[p], 2)
    deadline = time.monotonic() + 10
    while cp.hits(point) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cp.hits(point) >= 1
    abandon(store)
    with open_mem(mem_url, tmp_path) as recovered:
        _check(recovered, acked)
        recovered.flush()
        for p in range(PARTS):
            assert all(s.sealed for s in recovered.partition(TOPIC, p).segments()[:-1])
    with open_mem(mem_url, tmp_path, wal="elsewhere") as reader:
        _check(reader, acked)


def test_ack_s3_survives_losing_the_local_disk(mem_url: str, tmp_path: Path) -> None:
    """ack=s3 acknowledges only what a WAL object holds: a new node without the old WAL sees all of it."""
    acked: dict[int, list[bytes]] = {p: [] for p in range(PARTS)}
    store = open_mem(mem_url, tmp_path, ack="s3", flush_interval_ms=5)
    store.create_topic(TOPIC, partitions=PARTS, config={"segment.bytes": 150})
    for _ in range(4):
        for p in range(PARTS):
            _append(store.partition(TOPIC, p), acked[p], 2)
    abandon(store)
    with open_mem(mem_url, tmp_path, wal="new-disk") as other:
        _check(other, acked)
        for p in range(PARTS):
            _append(other.partition(TOPIC, p), acked[p], 1)
        _check(other, acked)
