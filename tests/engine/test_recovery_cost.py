"""Opening a store replays its local WAL at O(partitions) object-store requests, not O(entries) (issue 24).

Before, every WAL entry re-read its topic document (one GET per entry: 20,000 GETs to open a store after
20,000 small appends, even after a clean close). Now each log is resolved once, a clean close leaves
nothing to replay (the WAL is trimmed to its end), and after a crash only the entries past the trim point
are read; without a trim point (lost, or a WAL written before there was one) the published entries are
skipped by their offsets, still without a request each.

One writing phase (20,000 single-record appends over 4 partitions, ~10 s) builds a ``file://`` bucket and
a WAL directory; each test works on a copy of both.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import s3stream
from s3stream import ManualClock, Record
from s3stream.objectstore.recording import RecordingObjectStore
from s3stream.objectstore.url import open_object_store
from wal.storage import TRIM_POINT_FILE_NAME

from .helpers import T0, abandon, read_all

TOPIC = "t"
PARTS = 4
ENTRIES = 20_000
FLUSH_EVERY = 5_000  # a few WAL objects, as 20,000 appends flushed by size would make
MORE = 1_000  # appended after a reopen: published by a flush, then as many again only in the local WAL


def _open(root: Path, *, recorder: list[RecordingObjectStore] | None = None, **opts: Any) -> s3stream.Store:
    url = f"file://{root}/data"
    objstore = None
    if recorder is not None:
        objstore = RecordingObjectStore(open_object_store(url), log_size=1_000_000)
        recorder.append(objstore)
    return s3stream.open_store(url, object_store=objstore, clock=ManualClock(T0), wal_dir=str(root / "wal"),
                               probe=False, wal_fsync=False, flush_interval_ms=600_000, **opts)


def _value(p: int, i: int) -> bytes:
    return b"%d-%d" % (p, i)


def _append(store: s3stream.Store, acked: dict[int, int], count: int, *, flush_every: int | None = None) -> None:
    """``count`` single-record appends round-robin over the partitions; ``acked`` counts them per partition."""
    logs = [store.partition(TOPIC, p) for p in range(PARTS)]
    for n in range(count):
        p = n % PARTS
        assert logs[p].append([Record(None, _value(p, acked[p]))]).base_offset == acked[p]
        acked[p] += 1
        if flush_every is not None and (n + 1) % flush_every == 0:
            store.flush()


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, int]]:
    """The bucket and WAL of 20,000 acknowledged appends, closed cleanly."""
    base = tmp_path_factory.mktemp("recovery-cost")
    acked = dict.fromkeys(range(PARTS), 0)
    store = _open(base)
    store.create_topic(TOPIC, partitions=PARTS)
    _append(store, acked, ENTRIES, flush_every=FLUSH_EVERY)
    store.close()
    return base, acked


@pytest.fixture
def copy(written: tuple[Path, dict[int, int]], tmp_path: Path) -> Iterator[tuple[Path, dict[int, int]]]:
    base, acked = written
    root = tmp_path / "copy"
    shutil.copytree(base, root)
    yield root, dict(acked)


def _requests(store: s3stream.Store) -> dict[str, float]:
    """Object-store requests of ``store`` so far, by op (the store's own metrics)."""
    out: dict[str, float] = {}
    for metric in store.metrics_registry.collect():
        for sample in metric.samples:
            if sample.name == "s3stream_object_store_requests_total" and sample.value:
                out[sample.labels["op"]] = sample.value
    return out


def _check(store: s3stream.Store, acked: dict[int, int]) -> None:
    """Every acknowledged record, exactly once, at its offset."""
    for p, count in acked.items():
        log = store.partition(TOPIC, p)
        got = read_all(log, 0)
        assert [r.offset for r in got] == list(range(count)), f"partition {p}"
        assert [r.value for r in got] == [_value(p, i) for i in range(count)], f"partition {p}"
        assert log.log_end_offset == count


def _node_dir(root: Path) -> Path:
    (node,) = [d for d in (root / "wal").iterdir() if d.is_dir()]
    return node


def test_open_after_a_clean_close_replays_nothing(copy: tuple[Path, dict[int, int]]) -> None:
    root, acked = copy
    recorder: list[RecordingObjectStore] = []
    with _open(root, recorder=recorder) as store:
        requests = _requests(store)
        touched = sorted({key for _op, key, _size in recorder[0].log})
        # only the node's own namespace fence (LIST, HEAD, PUT): no topic document, manifest or WAL object read
        assert sum(requests.values()) <= PARTS, requests
        assert "get" not in requests, requests
        assert all(key.startswith("wal/") for key in touched), touched
        node = store.runtime.existing_node()
        assert node is not None
        assert node.wal.next_seq >= ENTRIES and node.wal.trim_seq == node.wal.next_seq  # nothing left to replay
        _check(store, acked)


@pytest.mark.parametrize("trim_point", ["kept", "lost"])
def test_open_after_a_crash_costs_requests_per_partition_not_per_entry(
        copy: tuple[Path, dict[int, int]], trim_point: str) -> None:
    """A crash with entries both published and only local; ``lost``: no trim point, so all 22,000 entries
    are read back and the 21,000 already in WAL objects are skipped by their offsets."""
    root, acked = copy
    store = _open(root)
    _append(store, acked, MORE)
    store.flush()  # published (and trimmed)
    _append(store, acked, MORE)  # acknowledged from the local WAL only
    abandon(store)
    if trim_point == "lost":
        (_node_dir(root) / TRIM_POINT_FILE_NAME).unlink(missing_ok=True)

    wal_objects = len(list((root / "data" / "wal").rglob("*.wal")))
    assert wal_objects < 20
    with _open(root) as recovered:
        requests = _requests(recovered)
        # per replayed partition its topic document and manifest (owner check, claim, commit), each WAL object
        # of the node's namespace read once for all of them, the fence and one flush: 22,000+ GETs before
        assert sum(requests.values()) <= 10 * PARTS + wal_objects, requests
        assert requests.get("get", 0) <= 6 * PARTS + wal_objects, requests
        _check(recovered, acked)
    with _open(root) as again:  # the recovery flushed what it replayed, and closed cleanly
        requests = _requests(again)
        assert "get" not in requests and sum(requests.values()) <= PARTS, requests
        _check(again, acked)


def test_records_the_trim_point_covers_are_replayed_when_their_wal_object_vanished(tmp_path: Path) -> None:
    """The newest WAL object deleted while the node was down: the local WAL still holds its entries (only
    its trim point says they were published), and they are uploaded again, as before there was one."""
    acked = dict.fromkeys(range(PARTS), 0)
    store = _open(tmp_path)
    store.create_topic(TOPIC, partitions=PARTS)
    _append(store, acked, 3 * PARTS)
    store.flush()
    _append(store, acked, 3 * PARTS)
    store.flush()  # the newest WAL object, then trimmed locally
    newest = max(meta.key for meta in store.runtime.objstore.list("wal/"))
    _append(store, acked, 2 * PARTS)  # only in the local WAL
    abandon(store)
    (tmp_path / "data" / newest).unlink()
    with _open(tmp_path) as recovered:
        _check(recovered, acked)
    with _open(tmp_path) as again:
        _check(again, acked)
