"""The commit protocol: dense versions, rebase on 412, read-back on lost responses, fencing, deadlines,
crash points and the LIST/probe discovery of the latest version."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from s3stream.base import layout
from s3stream.base.clock import ManualClock, SystemClock
from s3stream.base.crashpoints import CrashPoints, SimulatedCrash
from s3stream.base.errors import CommitConflict, CommitTimeout, CorruptData, Fenced, InternalError
from s3stream.base.ids import IdSource, ulid_time_ms
from s3stream.manifest.codec import encode_manifest
from s3stream.manifest.intents import Intent, add_segment, advance_log_start, claim_cleaner, claim_writer
from s3stream.manifest.model import Epoch, Manifest
from s3stream.manifest.versioned import ManifestStore, cleaner_fence, manifest_store, writer_fence
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.objectstore.protocol import ListEntry, ObjectStore

from .helpers import PARTITION, TOPIC, TOPIC_ID, FaultyStore, seg

PREFIX = f"{layout.log_prefix(TOPIC_ID, PARTITION)}manifest/"


def mstore(store: ObjectStore, *, clock: ManualClock | SystemClock | None = None, seed: int = 1,
           crash: CrashPoints | None = None, timeout_s: float = 10.0, **kw: float) -> ManifestStore:
    return ManifestStore(store, topic=TOPIC, topic_id=TOPIC_ID, partition=PARTITION,
                         clock=clock or ManualClock(1_000), ids=IdSource(seed), crash_points=crash,
                         commit_timeout_s=timeout_s, **kw)  # type: ignore[arg-type]


def append_one(key: str) -> Intent:
    """Append a one-offset segment at whatever the end is (idempotent through the key)."""

    def apply(cur: Manifest) -> Manifest | None:
        if any(s.key == key for s in cur.segments):
            return None
        return add_segment(seg(cur.next_offset, cur.next_offset, key=key), None)(cur)

    return apply


def manifest_puts(store: FaultyStore) -> list[str]:
    return [k for k in store.puts if k.startswith(PREFIX)]


# --- basics -----------------------------------------------------------------------------------------


def test_commits_are_dense_and_stamped() -> None:
    clock = ManualClock(5_000)
    vs = mstore(MemoryObjectStore(), clock=clock)
    assert vs.load_latest() is None
    first = vs.commit(claim_writer("node-a"))
    assert (first.seq, first.parent_seq, first.committed_at_ms) == (1, None, 5_000)
    assert ulid_time_ms(first.commit_id) == 5_000
    clock.advance(10)
    second = vs.commit(add_segment(seg(0, 9), None))
    assert (second.seq, second.parent_seq, second.committed_at_ms) == (2, 1, 5_010)
    assert second.commit_id != first.commit_id
    assert vs.list_seqs() == [1, 2]
    assert vs.load(1) == first and vs.load(2) == second
    assert mstore(vs._store).load_latest() == second  # a fresh process finds it too


def test_intent_with_nothing_to_change_writes_nothing() -> None:
    inner = FaultyStore()
    vs = mstore(inner)
    assert vs.commit(advance_log_start(0)) == Manifest.empty(TOPIC, TOPIC_ID, PARTITION)
    m = vs.commit(advance_log_start(5))
    assert vs.commit(advance_log_start(5)) == m
    assert len(manifest_puts(inner)) == 1


def test_intents_see_the_empty_manifest_on_a_new_log() -> None:
    seen: list[Manifest] = []

    def spy(cur: Manifest) -> Manifest | None:
        seen.append(cur)
        return None

    mstore(MemoryObjectStore()).commit(spy, check=seen.append)
    assert seen == [Manifest.empty(TOPIC, TOPIC_ID, PARTITION)] * 2


def test_invalid_result_is_refused_before_the_put() -> None:
    inner = FaultyStore()
    vs = mstore(inner)

    def broken(cur: Manifest) -> Manifest:
        return dataclasses.replace(cur, next_offset=10, segments=(seg(0, 3),))

    with pytest.raises(InternalError, match="invalid manifest"):
        vs.commit(broken)
    assert manifest_puts(inner) == []


def test_manifest_store_factory() -> None:
    vs = manifest_store(MemoryObjectStore(), topic=TOPIC, topic_id=TOPIC_ID, partition=PARTITION,
                        clock=ManualClock(0), ids=IdSource(3))
    assert vs.commit(claim_writer("n")).seq == 1
    assert vs.key_for_seq(1) == layout.manifest_key(TOPIC_ID, PARTITION, 1)


# --- races --------------------------------------------------------------------------------------------


def test_racing_stores_every_commit_lands_exactly_once() -> None:
    inner = FaultyStore(latency_s=0.001)
    per_thread = 12
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def run(name: str, seed: int) -> None:
        vs = mstore(inner, clock=SystemClock(), seed=seed)
        barrier.wait()
        try:
            for i in range(per_thread):
                vs.commit(append_one(f"{PREFIX}x/{name}-{i}"))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n, s)) for n, s in (("a", 1), ("b", 2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    assert inner.conflicts > 0  # the stores really raced (412s) and rebased
    vs = mstore(inner)
    latest = vs.load_latest()
    assert latest is not None
    keys = [s.key for s in latest.segments]
    assert sorted(keys) == sorted(f"{PREFIX}x/{n}-{i}" for n in "ab" for i in range(per_thread))
    assert vs.list_seqs() == list(range(1, 2 * per_thread + 1))  # dense, no duplicates
    for seq in vs.list_seqs():
        assert vs.load(seq).parent_seq == (seq - 1 if seq > 1 else None)
    assert [s.base_offset for s in latest.segments] == list(range(2 * per_thread))


def test_412_rebases_onto_the_winner() -> None:
    inner = FaultyStore(prefix=PREFIX)
    a, b = mstore(inner, seed=1), mstore(inner, seed=2)
    a.commit(add_segment(seg(0, 9), None))
    assert b.load_latest() is not None
    inner.before_put = lambda: b.commit(add_segment(seg(10, 19), None))
    result = a.commit(advance_log_start(5))  # stamped as seq 2, loses to b, rebased to seq 3
    assert result.seq == 3 and result.parent_seq == 2
    assert result.log_start_offset == 5 and result.next_offset == 20
    assert a.list_seqs() == [1, 2, 3]


def test_rebase_raises_conflict_when_the_intent_no_longer_applies() -> None:
    inner = FaultyStore(prefix=PREFIX)
    a, b = mstore(inner, seed=1), mstore(inner, seed=2)
    inner.before_put = lambda: b.commit(add_segment(seg(0, 4), None))
    with pytest.raises(CommitConflict):
        a.commit(add_segment(seg(0, 9), None))
    assert a.list_seqs() == [1]


def test_lost_response_is_recognised_as_ours() -> None:
    inner = FaultyStore(prefix=PREFIX)
    inner.script.extend(["lost"])
    vs = mstore(inner)
    m = vs.commit(add_segment(seg(0, 9), None))
    assert m.seq == 1 and vs.list_seqs() == [1]
    assert mstore(inner.inner).load_latest() == m
    assert len(manifest_puts(inner)) == 1  # no duplicate commit


def test_sdk_retry_412_on_our_own_landed_put_is_success() -> None:
    inner = FaultyStore(prefix=PREFIX)
    inner.script.extend(["lost412"])
    vs = mstore(inner)
    m = vs.commit(add_segment(seg(0, 9), None))
    assert m.seq == 1 and vs.list_seqs() == [1]
    assert len(manifest_puts(inner)) == 1


@pytest.mark.parametrize("fault", ["timeout", "throttle"])
def test_failure_before_the_put_arrived_retries_the_same_body(fault: str) -> None:
    inner = FaultyStore(prefix=PREFIX)
    inner.script.extend([fault])
    vs = mstore(inner, clock=SystemClock())
    m = vs.commit(add_segment(seg(0, 9), None))
    assert m.seq == 1 and vs.list_seqs() == [1]
    assert manifest_puts(inner) == [vs.key_for_seq(1)] * 2
    assert vs.load(1).commit_id == m.commit_id


def test_unknown_outcome_with_a_rival_at_the_key_rebases() -> None:
    inner = FaultyStore(prefix=PREFIX)
    a, b = mstore(inner, seed=1), mstore(inner, seed=2)

    def rival_then_timeout() -> None:
        b.commit(add_segment(seg(0, 4), None))
        inner.script.appendleft("timeout")

    inner.before_put = rival_then_timeout
    m = a.commit(advance_log_start(2))
    assert (m.seq, m.next_offset, m.log_start_offset) == (2, 5, 2)


def test_permanent_412_storm_times_out() -> None:
    inner = FaultyStore(prefix=PREFIX)
    inner.storm_412 = True
    vs = mstore(inner, clock=SystemClock(), timeout_s=0.3)
    started = time.monotonic()
    with pytest.raises(CommitTimeout):
        vs.commit(add_segment(seg(0, 9), None))
    assert time.monotonic() - started < 2.0
    assert len(manifest_puts(inner)) >= 2
    assert vs.list_seqs() == []


# --- fencing ------------------------------------------------------------------------------------------


def test_newer_writer_fences_the_old_one() -> None:
    inner = MemoryObjectStore()
    a, b = mstore(inner, seed=1), mstore(inner, seed=2)
    me_a = a.commit(claim_writer("node-a")).writer
    assert me_a == Epoch(1, "node-a")
    a.commit(add_segment(seg(0, 9), None), check=writer_fence(me_a))
    assert b.commit(claim_writer("node-b")).writer == Epoch(2, "node-b")
    with pytest.raises(Fenced, match="node-a"):
        a.commit(add_segment(seg(10, 19), None), check=writer_fence(me_a))
    assert a.list_seqs() == [1, 2, 3]


def test_fence_detected_after_a_rebase() -> None:
    inner = FaultyStore(prefix=PREFIX)
    a, b = mstore(inner, seed=1), mstore(inner, seed=2)
    me = a.commit(claim_writer("node-a")).writer
    assert me is not None
    inner.before_put = lambda: b.commit(claim_writer("node-b"))
    with pytest.raises(Fenced):
        a.commit(add_segment(seg(0, 9), None), check=writer_fence(me))
    assert a.load_latest() is not None and a.load_latest().segments == ()  # type: ignore[union-attr]


def test_same_epoch_other_owner_is_fenced_and_cleaner_fence() -> None:
    m = dataclasses.replace(Manifest.empty(TOPIC, TOPIC_ID, PARTITION), writer=Epoch(3, "x"),
                            cleaner=Epoch(2, "c2"))
    writer_fence(Epoch(3, "x"))(m)
    writer_fence(Epoch(4, "x"))(m)  # not newer than me: not fenced
    with pytest.raises(Fenced):
        writer_fence(Epoch(3, "y"))(m)
    cleaner_fence(Epoch(2, "c2"))(m)
    with pytest.raises(Fenced):
        cleaner_fence(Epoch(1, "c1"))(m)
    writer_fence(Epoch(1, "w"))(Manifest.empty(TOPIC, TOPIC_ID, PARTITION))


def test_cleaner_claim_fences_the_previous_cleaner() -> None:
    inner = MemoryObjectStore()
    c1 = mstore(inner, seed=1).commit(claim_cleaner("c1")).cleaner
    assert c1 is not None
    mstore(inner, seed=2).commit(claim_cleaner("c2"))
    with pytest.raises(Fenced):
        mstore(inner, seed=3).commit(advance_log_start(1), check=cleaner_fence(c1))


# --- crash points ---------------------------------------------------------------------------------------


def test_crash_before_put_leaves_nothing() -> None:
    inner, crash = MemoryObjectStore(), CrashPoints()
    crash.arm("manifest.before_put")
    with pytest.raises(SimulatedCrash):
        mstore(inner, crash=crash).commit(add_segment(seg(0, 9), None))
    assert mstore(inner).load_latest() is None


def test_crash_after_put_is_committed_and_replay_is_a_no_op() -> None:
    inner, crash = MemoryObjectStore(), CrashPoints()
    crash.arm("manifest.after_put")
    intent = add_segment(seg(0, 9), None)
    with pytest.raises(SimulatedCrash):
        mstore(inner, crash=crash).commit(intent)
    restarted = mstore(inner)
    m = restarted.load_latest()
    assert m is not None and m.seq == 1 and m.next_offset == 10
    assert restarted.commit(intent) == m  # the retried intent finds itself landed
    assert restarted.list_seqs() == [1]


# --- discovering the latest version -----------------------------------------------------------------


def _commit_n(store: ObjectStore, n: int) -> list[Manifest]:
    vs = mstore(store)
    return [vs.commit(append_one(f"{PREFIX}k{i}")) for i in range(n)]


def test_probe_finds_what_a_lagging_list_misses() -> None:
    inner = FaultyStore()
    committed = _commit_n(inner, 3)
    inner.hide_from_list = {layout.manifest_key(TOPIC_ID, PARTITION, 3)}
    assert mstore(inner).load_latest() == committed[-1]
    inner.hide_from_list = {layout.manifest_key(TOPIC_ID, PARTITION, s) for s in (1, 2, 3)}
    assert mstore(inner).load_latest() == committed[-1]  # empty listing: probe from seq 1


def test_listed_key_deleted_by_gc_retries_the_listing() -> None:
    inner = FaultyStore()
    committed = _commit_n(inner, 2)
    inner.phantoms = [ListEntry(layout.manifest_key(TOPIC_ID, PARTITION, 9), 10, 0)]
    lists_before = inner.lists
    assert mstore(inner).load_latest() == committed[-1]
    assert inner.lists - lists_before == 2


def test_far_behind_reader_jumps_with_one_list() -> None:
    inner = FaultyStore()
    reader = mstore(inner)
    _commit_n(inner, 1)
    assert reader.load_latest() is not None
    writer = mstore(inner, seed=5)
    for i in range(20):
        writer.commit(append_one(f"{PREFIX}more{i}"))
    inner.gets.clear()
    latest = reader.load_latest()
    assert latest is not None and latest.seq == 21
    assert len(inner.gets) < 10


def test_stale_cache_past_its_ttl_relists() -> None:
    inner = FaultyStore()
    reader = mstore(inner, cache_ttl_s=0.0)
    _commit_n(inner, 1)
    assert reader.load_latest() is not None
    writer = mstore(inner, seed=5)
    for i in range(3):
        writer.commit(append_one(f"{PREFIX}more{i}"))
    inner.delete(layout.manifest_key(TOPIC_ID, PARTITION, 2))  # GC took the direct successor
    latest = reader.load_latest()
    assert latest is not None and latest.seq == 4


def test_manifest_stored_under_the_wrong_seq_or_log_is_corrupt() -> None:
    inner = MemoryObjectStore()
    m = dataclasses.replace(Manifest.empty(TOPIC, TOPIC_ID, PARTITION), seq=5, parent_seq=4)
    inner.put(layout.manifest_key(TOPIC_ID, PARTITION, 1), encode_manifest(m))
    with pytest.raises(CorruptData, match="seq 5"):
        mstore(inner).load_latest()
    other = MemoryObjectStore()
    foreign = dataclasses.replace(Manifest.empty(TOPIC, "other-id", PARTITION), seq=1)
    other.put(layout.manifest_key(TOPIC_ID, PARTITION, 1), encode_manifest(foreign))
    with pytest.raises(CorruptData, match="other-id"):
        mstore(other).load(1)
