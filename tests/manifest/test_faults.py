"""The commit protocol against ``s3stream.testing.faults.FaultyObjectStore``: lost acks, 409s, timeouts,
throttling and failing reads, alone and as a seeded storm with racing writers."""

from __future__ import annotations

import threading

import pytest

from s3stream.base import layout
from s3stream.base.clock import SystemClock
from s3stream.base.errors import CommitTimeout
from s3stream.base.ids import IdSource
from s3stream.manifest.versioned import ManifestStore
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.objectstore.protocol import ObjectStore
from s3stream.testing.faults import FaultKind, FaultRule, FaultyObjectStore

from .helpers import PARTITION, TOPIC, TOPIC_ID
from .test_versioned import append_one

PREFIX = f"{layout.log_prefix(TOPIC_ID, PARTITION)}manifest/"


def mstore(store: ObjectStore, *, seed: int = 1, timeout_s: float = 20.0) -> ManifestStore:
    return ManifestStore(store, topic=TOPIC, topic_id=TOPIC_ID, partition=PARTITION, clock=SystemClock(),
                         ids=IdSource(seed), commit_timeout_s=timeout_s)


@pytest.mark.parametrize("kind", ["lost_response", "timeout_before", "throttle", "error", "precondition",
                                  "conflict409"])
def test_single_fault_on_the_manifest_put_commits_exactly_once(kind: FaultKind) -> None:
    faulty = FaultyObjectStore(MemoryObjectStore(), ids=IdSource(1),
                               rules=[FaultRule("put", PREFIX, kind, count=1)])
    vs = mstore(faulty)
    m = vs.commit(append_one(f"{PREFIX}x/one"))
    assert faulty.injected() == {kind: 1}
    assert m.seq == 1 and vs.list_seqs() == [1]
    assert mstore(faulty.inner).load_latest() == m


def test_failing_reads_during_commit_are_ridden_out() -> None:
    faulty = FaultyObjectStore(MemoryObjectStore(), ids=IdSource(2), rules=[
        FaultRule("list", PREFIX, "error", count=1), FaultRule("get", PREFIX, "throttle", count=2)])
    m = mstore(faulty).commit(append_one(f"{PREFIX}x/one"))
    assert m.seq == 1 and sum(faulty.injected().values()) == 3


def test_409_storm_ends_in_commit_timeout() -> None:
    faulty = FaultyObjectStore(MemoryObjectStore(), ids=IdSource(3),
                               rules=[FaultRule("put", PREFIX, "conflict409")])
    with pytest.raises(CommitTimeout):
        mstore(faulty, timeout_s=0.3).commit(append_one(f"{PREFIX}x/one"))
    assert mstore(faulty.inner).list_seqs() == []


def test_seeded_fault_storm_with_racing_writers_lands_every_commit_once() -> None:
    rules = [FaultRule("put", PREFIX, "lost_response", rate=0.15),
             FaultRule("put", PREFIX, "timeout_before", rate=0.1),
             FaultRule("put", PREFIX, "conflict409", rate=0.05),
             FaultRule("get", PREFIX, "error", rate=0.05)]
    faulty = FaultyObjectStore(MemoryObjectStore(), ids=IdSource(42), rules=rules)
    per_thread, errors = 6, []

    def run(name: str, seed: int) -> None:
        vs = mstore(faulty, seed=seed)
        try:
            for i in range(per_thread):
                vs.commit(append_one(f"{PREFIX}x/{name}-{i}"))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n, s)) for n, s in (("a", 1), ("b", 2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert faulty.injected().get("lost_response", 0) > 0
    clean = mstore(faulty.inner)
    latest = clean.load_latest()
    assert latest is not None
    assert sorted(s.key for s in latest.segments) == sorted(
        f"{PREFIX}x/{n}-{i}" for n in "ab" for i in range(per_thread))
    assert clean.list_seqs() == list(range(1, 2 * per_thread + 1))
