"""Stores under different prefixes of one bucket (memory, a local directory, S3 on moto) never see each other's
data: not through topics of the same name, reads, listings, deletes, retention, compaction or garbage
collection; including prefixes where one is a string prefix of the other (``a``, ``ab``) or nested in it
(``a``, ``a/b``), and a store at the bucket's root beside them."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pytest

import s3stream
from s3stream import ManualClock, Record
from s3stream.objectstore.local import LocalObjectStore
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.objectstore.prefixed import PrefixedObjectStore
from s3stream.objectstore.protocol import ObjectStore
from s3stream.objectstore.s3 import S3ObjectStore

T0 = 1_700_000_000_000
DAY_MS = 86_400_000
_BUCKETS = itertools.count()
#: sibling, string-prefix, nested, and a store at the root of the bucket beside a prefixed one
PREFIX_PAIRS = [("a", "ab"), ("a", "a/b"), ("", "tenant")]

#: opens a store on the bucket under a prefix ('' for the root), with this clock and WAL directory
Opener = Callable[[str, ManualClock, Path], s3stream.Store]
_FAST = {"probe": False, "flush_interval_ms": 20, "seal_workers": "thread", "orphan_min_age_ms": 0,
         "manifest_min_age_ms": 0}


def _memory(bucket: str) -> tuple[Opener, Callable[[], list[str]]]:
    MemoryObjectStore.drop_namespace(bucket)

    def open_(prefix: str, clock: ManualClock, wal: Path) -> s3stream.Store:
        url = f"memory://{bucket}/{prefix}" if prefix else f"memory://{bucket}"
        return s3stream.open_store(url, clock=clock, wal_dir=str(wal), **_FAST)

    return open_, lambda: sorted(e.key for e in MemoryObjectStore(bucket).list(""))


def _local(root: Path) -> tuple[Opener, Callable[[], list[str]]]:
    def open_(prefix: str, clock: ManualClock, wal: Path) -> s3stream.Store:
        inner: ObjectStore = LocalObjectStore(root, clock=clock)
        objects = PrefixedObjectStore(inner, prefix) if prefix else inner
        return s3stream.open_store(root.as_uri(), clock=clock, wal_dir=str(wal), object_store=objects, **_FAST)

    return open_, lambda: sorted(e.key for e in LocalObjectStore(root).list(""))


def _s3(endpoint: str) -> tuple[Opener, Callable[[], list[str]]]:
    bucket = f"isolation-{next(_BUCKETS)}"
    admin = S3ObjectStore(bucket, endpoint_url=endpoint, region="us-east-1")
    admin.ensure_bucket()

    def open_(prefix: str, clock: ManualClock, wal: Path) -> s3stream.Store:
        url = f"s3://{bucket}/{prefix}?endpoint_url={endpoint}&region=us-east-1"
        return s3stream.open_store(url, clock=clock, wal_dir=str(wal), **_FAST)

    def listing() -> list[str]:
        return sorted(e.key for e in admin.list(""))

    return open_, listing


def _values(store: s3stream.Store, topic: str, partition: int = 0) -> list[bytes | None]:
    """Every record's value, log start to log end (a read ends where the sealed tier does: page on)."""
    log = store.partition(topic, partition)
    out, pos = [], log.log_start_offset
    while got := log.read(pos):
        out += [r.value for r in got]
        pos = got[-1].offset + 1  # type: ignore[operator]
    return out


def _isolation(open_: Opener, listing: Callable[[], list[str]], tmp: Path, pa: str, pb: str) -> None:
    clock = ManualClock(T0)
    a, b = open_(pa, clock, tmp / "wal-a"), open_(pb, clock, tmp / "wal-b")
    try:
        # the same topic name in both, and one topic only B has
        a.create_topic("orders", partitions=2, config={"retention.ms": "-1"})  # kept: only B's actions may remove
        b.create_topic("orders", partitions=1, config={"cleanup.policy": "compact"})
        b.create_topic("b-only", config={"retention.ms": "1000"})
        log_a, log_b = a.partition("orders", 0), b.partition("orders", 0)
        log_a.append([Record(b"k", b"a%d" % i, T0 + i) for i in range(5)])
        log_a.roll()
        log_a.append([Record(b"k", b"a-tail", T0 + 9)])
        log_b.append([Record(b"k", b"b%d" % i, T0 + i) for i in range(3)])
        log_b.roll()
        b.partition("b-only", 0).append([Record(b"x", b"old", T0)])
        b.partition("b-only", 0).roll()
        a.flush()
        b.flush()
        want_a = [b"a0", b"a1", b"a2", b"a3", b"a4", b"a-tail"]
        assert a.list_topics() == ["orders"] and b.list_topics() == ["b-only", "orders"]
        assert a.topic_id("orders") != b.topic_id("orders") and a.partitions("orders") == 2
        assert _values(a, "orders") == want_a and _values(b, "orders") == [b"b0", b"b1", b"b2"]
        # maintenance of every kind, with every grace period long past, leaves the other store's data alone
        clock.advance(30 * DAY_MS)
        for store in (b, a, b):
            store.run_retention()
            store.run_cleaner()
            store.collect_garbage()
        assert _values(a, "orders") == want_a
        assert _values(b, "orders")[-1:] == [b"b2"] and _values(b, "b-only") == []  # B's own retention ran
        b_orders = f"{pb}/logs/{b.topic_id('orders')}/".lstrip("/")
        b.delete_topic("orders")
        clock.advance(30 * DAY_MS)
        b.collect_garbage()
        b.collect_garbage()
        assert not [k for k in listing() if k.startswith(b_orders)]  # B's GC did delete B's topic
        assert _values(a, "orders") == want_a
        with pytest.raises(s3stream.UnknownTopic):
            a.topic_id("b-only")
    finally:
        a.close()
        b.close()
    # a reader opened fresh on each prefix sees exactly its own topics and records
    with open_(pa, ManualClock(T0 + 61 * DAY_MS), tmp / "read-a") as again:
        assert again.list_topics() == ["orders"] and _values(again, "orders") == want_a
    with open_(pb, ManualClock(T0 + 61 * DAY_MS), tmp / "read-b") as again:
        assert again.list_topics() == ["b-only"]
    keys = listing()
    assert keys, "nothing was written"
    for key in keys:  # every object lies under one of the two prefixes
        assert any(key.startswith(p + "/") if p else True for p in (pa, pb)), key


@pytest.mark.parametrize(("pa", "pb"), PREFIX_PAIRS)
def test_memory_prefixes(tmp_path: Path, pa: str, pb: str) -> None:
    open_, listing = _memory(f"isolation-{next(_BUCKETS)}")
    _isolation(open_, listing, tmp_path, pa, pb)


@pytest.mark.parametrize(("pa", "pb"), PREFIX_PAIRS)
def test_local_directory_prefixes(tmp_path: Path, pa: str, pb: str) -> None:
    open_, listing = _local(tmp_path / "bucket")
    _isolation(open_, listing, tmp_path, pa, pb)


@pytest.mark.s3
@pytest.mark.parametrize(("pa", "pb"), PREFIX_PAIRS)
def test_s3_prefixes(moto_endpoint: str, tmp_path: Path, pa: str, pb: str) -> None:
    open_, listing = _s3(moto_endpoint)
    _isolation(open_, listing, tmp_path, pa, pb)


@pytest.mark.parametrize("prefix", ["../x", "a/../../b", "..", "a//b", "./a", "a/%2e%2e"])
def test_a_prefix_cannot_climb_out(prefix: str, tmp_path: Path) -> None:
    """A prefix is validated like a key: ``..`` segments cannot address another prefix's keys."""
    from s3stream.base.errors import InvalidRequest

    with pytest.raises(InvalidRequest):
        s3stream.open_store(f"memory://climb/{prefix}", wal_dir=str(tmp_path), probe=False).close()
    with pytest.raises(InvalidRequest):
        PrefixedObjectStore(MemoryObjectStore("climb"), prefix.replace("%2e", "."))


def test_a_store_nested_in_another_stores_job_directory_keeps_its_data(tmp_path: Path) -> None:
    """A store whose prefix is ``<another store's prefix>/_spark/jobs``: the outer store's GC took each of
    its top-level directories (``topics``, ``logs``, ``wal``, ...) for an abandoned Spark job's scratch
    directory and deleted every object of the inner store once they were a day old. (Every other layout
    directory as the nesting point is safe: ``logs``, ``wal``, ``topics``, ``catalog``, ``_probe``, ``_spark``.)"""
    open_, listing = _memory(f"isolation-{next(_BUCKETS)}")
    clock = ManualClock(T0)
    with open_("a", clock, tmp_path / "outer") as outer, open_("a/_spark/jobs", clock, tmp_path / "inner") as inner:
        inner.create_topic("t", config={"retention.ms": "-1"})
        inner.partition("t", 0).append([Record(b"k", b"v")])
        inner.partition("t", 0).roll()
        before = [k for k in listing() if k.startswith("a/_spark/jobs/")]
        clock.advance(30 * DAY_MS)
        outer.collect_garbage()
        assert [k for k in listing() if k.startswith("a/_spark/jobs/")] == before
        assert _values(inner, "t") == [b"v"]
