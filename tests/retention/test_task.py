"""The retention task (``Store.run_retention()``): one pass over every partition, its commits, its report.

One manifest commit per changed partition per pass (all three checks land in that one commit), none
for an unchanged partition. When the active segment itself must go, RET-4's roll adds the seal's own
commit before it. A process that does not write a partition never rolls (that would fence the writer):
it deletes only sealed segments and leaves the active one to the writer's own pass.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import s3stream
from s3stream import ManualClock
from s3stream.objectstore.memory import MemoryObjectStore

from .store_kit import DAY, REC_BYTES, T0, HookedStore, manifest_puts, open_at, ranges, shape


@pytest.fixture
def hooked(mem_url: str, tmp_path: Path, clock: ManualClock) -> Iterator[tuple[s3stream.Store, HookedStore]]:
    objstore = HookedStore(MemoryObjectStore(mem_url.removeprefix("memory://"), clock=clock))
    st = open_at(mem_url, tmp_path / "wal", clock, object_store=objstore)
    yield st, objstore
    st.close()


def _puts_by_partition(objstore: HookedStore, since: int, topic_id: str) -> dict[int, int]:
    out: dict[int, int] = {}
    for key in manifest_puts(objstore.puts[since:]):
        parts = key.split("/")
        if parts[1] == topic_id:
            out[int(parts[2])] = out.get(int(parts[2]), 0) + 1
    return out


def test_one_manifest_commit_per_changed_partition(hooked: tuple[s3stream.Store, HookedStore]) -> None:
    store, objstore = hooked
    store.create_topic("t", partitions=4, config={"retention.ms": DAY, "retention.bytes": 4 * REC_BYTES})
    for p in range(4):
        log = store.partition("t", p)
        if p < 2:  # RET-5 + RET-6 + RET-7 all have something to delete, the active segment does not expire
            shape(log, [[T0 - 2 * DAY], [T0 - 2 * DAY] * 2, [T0 - 2 * DAY] * 2, [T0] * 2])
            log.delete_records(1)
        else:      # nothing to delete
            shape(log, [[T0], [T0]])
    topic_id = store.partition("t", 0).topic_id
    since = len(objstore.puts)
    report = store.run_retention()
    assert report.partitions_checked == 4 and report.partitions_changed == 2
    assert set(report.by_reason) == {"log_start_offset", "retention_bytes", "retention_ms"}
    assert _puts_by_partition(objstore, since, topic_id) == {0: 1, 1: 1}
    for p in range(2):
        assert ranges(store.partition("t", p)) == [(5, 6, False)]
    since = len(objstore.puts)
    assert store.run_retention().partitions_changed == 0  # steady state: no commit at all
    assert manifest_puts(objstore.puts[since:]) == []


def test_deleting_the_active_segment_adds_the_seal_commit_of_its_roll(
        hooked: tuple[s3stream.Store, HookedStore], clock: ManualClock) -> None:
    """RET-4: the roll is a seal (its own commit: add_segment), then one retention commit drops everything."""
    store, objstore = hooked
    store.create_topic("t", config={"retention.ms": DAY})
    log = store.partition("t", 0)
    shape(log, [[T0], [T0]])
    clock.set(T0 + DAY + 1)
    since = len(objstore.puts)
    report = store.run_retention()
    assert report.partitions_changed == 1 and report.segments_deleted == 2
    puts = objstore.puts[since:]
    segment_puts = [k for k in puts if "/segments/" in k]
    assert len(segment_puts) == 1  # the rolled active segment was sealed first
    assert len(manifest_puts(puts)) == 2  # the seal's commit, then the retention commit
    m = log.manifest()
    assert m.segments == () and {r.key for r in m.removed} >= set(segment_puts)


def test_report_sums_segments_bytes_and_reasons(store: s3stream.Store, clock: ManualClock) -> None:
    store.create_topic("a", config={"retention.ms": DAY})
    store.create_topic("b", config={"retention.bytes": 2 * REC_BYTES})
    shape(store.partition("a", 0), [[T0 - 2 * DAY] * 2, [T0]])
    shape(store.partition("b", 0), [[T0] * 2, [T0] * 2, [T0] * 2])
    report = store.run_retention()
    assert report.partitions_checked == 2 and report.partitions_changed == 2
    assert report.segments_deleted == 3
    assert report.bytes_deleted == 6 * REC_BYTES
    assert report.by_reason == {"retention_ms": [1, 2 * REC_BYTES], "retention_bytes": [2, 4 * REC_BYTES]}
    assert report.duration_s >= 0


def test_a_process_that_does_not_write_the_partition_never_rolls_it(
        mem_url: str, tmp_path: Path, clock: ManualClock) -> None:
    with open_at(mem_url, tmp_path / "writer", clock) as writer:
        writer.create_topic("t", config={"retention.ms": DAY})
        log = writer.partition("t", 0)
        shape(log, [[T0] * 2, [T0] * 2])
        epoch = log.manifest().writer
        clock.set(T0 + DAY + 1)  # everything expired, the active segment too
        with open_at(mem_url, tmp_path / "admin", clock) as admin:
            report = admin.run_retention()
            assert report.segments_deleted == 1  # only the sealed one
            m = admin.partition("t", 0).manifest()
            assert m.writer == epoch  # not fenced: the writer keeps its epoch
            assert m.log_start_offset == 2 and m.segments == ()
        report = writer.run_retention()  # its own pass rolls and deletes the expired active segment
        assert report.segments_deleted == 1
        assert log.log_start_offset == 4 and ranges(log) == [(4, 3, False)]
        log.append([s3stream.Record(b"k", b"v", T0 + DAY)])  # the writer is still the writer
        assert [r.offset for r in log.read(4)] == [4]


def test_partitions_nobody_wrote_are_checked_without_commits(store: s3stream.Store) -> None:
    store.create_topic("empty", partitions=3)
    report = store.run_retention()
    assert report.partitions_checked == 3 and report.partitions_changed == 0
    for p in range(3):
        assert store.partition("empty", p).manifest().seq == 0  # nothing was ever committed


def test_deleted_topics_are_skipped(store: s3stream.Store, clock: ManualClock) -> None:
    store.create_topic("gone", config={"retention.ms": DAY})
    shape(store.partition("gone", 0), [[T0 - 2 * DAY], [T0]])
    store.delete_topic("gone")
    assert store.run_retention().partitions_checked == 0


def test_a_restarted_writer_process_rolls_its_own_partitions(
        mem_url: str, tmp_path: Path, clock: ManualClock) -> None:
    """The same node (same WAL directory) after a restart may roll: it cannot fence anyone else."""
    with open_at(mem_url, tmp_path / "wal", clock) as first:
        first.create_topic("t", config={"retention.ms": DAY})
        shape(first.partition("t", 0), [[T0], [T0, T0]])
    clock.set(T0 + DAY + 1)
    with open_at(mem_url, tmp_path / "wal", clock) as again:
        log = again.partition("t", 0)
        report = again.run_retention()
        assert report.segments_deleted == 2
        assert log.log_start_offset == log.log_end_offset == 3
        log.append([s3stream.Record(b"k", b"v", clock.now_ms())])
        assert [r.offset for r in log.read(3)] == [3]
