"""Cleaning rounds end to end through the public API (issue 4, items 1-4).

Ported scenarios (docs/design/kafka-rules.md): CLEAN-GUAR-2..5 guarantees, RET-8 (compaction never moves the log start,
KD-08), KT-18 partial cleaning, KT-28 (the log end survives cleaning and restart), KT-50 (the active segment keeps
duplicates), KD-01 (an idle partition under max lag), CLEAN-SEL-3 strict ratio and dirtiest-first, CLEAN-RANGE-2 min
lag, CLEAN-KEEP-1 unkeyed records, CLEAN-SEL-2(b) (KT-07/KT-08) checkpoint reset, RET-2 retention from the cleaner,
CFG-2 ``log.cleaner.enable``. Tombstones are in ``test_tombstones.py``.

Tests taking ``any_env`` run on memory:// and on SeaweedFS; the rest on memory:// only, to stay fast.
"""

from __future__ import annotations

from typing import Any

import pytest

import cleaner.executor
from s3stream import Record
from s3stream.objectstore.protocol import ByteRange, ObjectStore
from s3stream.testing.forwarding import ForwardingObjectStore

from .conftest import Env
from .kit import COMPACT, DAY, T0, cleaned, fold, kv, put_segment, read_all, sealed_ranges, topic, triples


def test_latest_value_per_key_survives_with_its_original_offset(any_env: Env) -> None:
    env = any_env
    store = env.open()
    log = topic(store)
    put_segment(log, [("a", "1"), ("b", "1"), ("a", "2")])
    put_segment(log, [("c", "1"), ("b", "2"), ("a", "3")])
    before = read_all(log)
    r = cleaned(store.run_cleaner())
    after = read_all(log)
    assert triples(after) == [(3, b"c", b"1"), (4, b"b", b"2"), (5, b"a", b"3")]
    assert fold(after) == fold(before)                  # CLEAN-GUAR-5
    assert (r.records_read, r.records_kept) == (6, 3)
    assert log.manifest().cleaner_checkpoint == 6       # CLEAN-CKPT-1: the next round starts at U
    assert [a.timestamp for a in after] == [env.t0] * 3


def test_offsets_keep_gaps_and_the_log_end_survives_cleaning_and_restart(any_env: Env) -> None:
    env = any_env
    store = env.open()
    log = topic(store)
    put_segment(log, [("a", "1"), ("a", "2"), ("a", "3"), ("b", "1"), ("a", "4")])
    put_segment(log, [("b", "2"), ("b", "3")])
    cleaned(store.run_cleaner())
    assert [r.offset for r in read_all(log)] == [4, 6]      # CLEAN-GUAR-3: offsets never change; gaps are normal
    assert log.log_end_offset == 7 and log.log_start_offset == 0
    assert sealed_ranges(log) == [(0, 6)]                    # merged, but the covered range is kept (KT-28)
    store.close()
    again = env.open()
    log2 = again.partition("t", 0)
    assert log2.log_end_offset == 7 and log2.log_start_offset == 0
    assert triples(read_all(log2)) == [(4, b"a", b"4"), (6, b"b", b"3")]
    assert log2.append([kv("c", "1")]).base_offset == 7      # LEO never moves back (KAFKA-17076)


def test_reading_inside_a_gap_returns_the_next_records(env: Env) -> None:
    store = env.open()
    log = topic(store)
    put_segment(log, [("a", "1"), ("a", "2"), ("a", "3"), ("b", "1")])
    cleaned(store.run_cleaner())
    assert triples(log.read(0)) == [(2, b"a", b"3"), (3, b"b", b"1")]
    assert triples(log.read(1, max_records=1)) == [(2, b"a", b"3")]


def test_ret8_kd08_compaction_never_moves_the_log_start(env: Env) -> None:
    store = env.open()
    log = topic(store, **{"segment.bytes": 50})            # 2 records = 46 bytes: groups cannot merge
    put_segment(log, [("a", "1"), ("b", "1")])
    put_segment(log, [("a", "2"), ("b", "2")])
    cleaned(store.run_cleaner())
    m = log.manifest()
    assert m.segments[0].record_count == 0                   # the head segment became empty...
    assert log.log_start_offset == 0 and m.log_start_offset == 0   # ...but stays, and so does the start
    assert [s.base_offset for s in log.segments() if s.sealed] == [0, 2]


def test_duplicate_keys_inside_one_batch(env: Env) -> None:
    store = env.open()
    log = topic(store)
    put_segment(log, [("a", "1"), ("a", "2"), ("b", "1"), ("a", "3"), ("b", "2")], one_batch=True)
    cleaned(store.run_cleaner())
    assert triples(read_all(log)) == [(3, b"a", b"3"), (4, b"b", b"2")]
    assert log.log_end_offset == 5


def test_clean_section_is_rewritten_too(env: Env) -> None:
    # CLEAN-GRP-1: a value in an already-cleaned segment disappears once the dirty range updates its key
    store = env.open()
    log = topic(store)
    put_segment(log, [("a", "1"), ("b", "1")])
    cleaned(store.run_cleaner())
    put_segment(log, [("a", "2"), ("c", "1")])
    r = cleaned(store.run_cleaner())
    assert r.first_dirty == 2 and r.end_offset == 4
    assert triples(read_all(log)) == [(1, b"b", b"1"), (2, b"a", b"2"), (3, b"c", b"1")]


def test_the_active_segment_is_never_cleaned(env: Env) -> None:
    store = env.open()
    log = topic(store)
    put_segment(log, [("a", "1"), ("a", "2")])
    log.append([kv("a", "3")])
    log.append([kv("a", "4")])                 # active, unsealed
    cleaned(store.run_cleaner())
    assert triples(read_all(log)) == [(1, b"a", b"2"), (2, b"a", b"3"), (3, b"a", b"4")]   # KT-50: head keeps dups
    assert log.manifest().cleaner_checkpoint == 2


def test_strict_dirty_ratio_threshold(env: Env) -> None:
    store = env.open()
    log = topic(store, **{"min.cleanable.dirty.ratio": "0.5"})
    put_segment(log, [("a", "1"), ("b", "1")])
    cleaned(store.run_cleaner())                        # ratio 1.0
    put_segment(log, [("c", "1"), ("d", "1")])          # same logical size: ratio exactly 0.5
    r = store.run_cleaner()
    assert r.cleaned is None and r.candidates == 1
    put_segment(log, [("e", "1")])                      # now above 0.5
    cleaned(store.run_cleaner())


def test_kd01_idle_partition_under_max_lag_waits_for_an_append_that_rolls(env: Env) -> None:
    store = env.open()
    log = topic(store, **{"min.cleanable.dirty.ratio": "1.0", "max.compaction.lag.ms": 1000})
    for v in ("1", "2", "3"):
        log.append([kv("a", v, T0)])
    env.clock.advance(60_000)
    assert store.run_cleaner().cleaned is None          # the overdue data is in the active segment
    assert len(read_all(log)) == 3
    log.append([kv("b", "1", T0 + 60_000)])             # waited > min(segment.ms, max lag): rolls (ROLL-3)
    r = store.run_cleaner()
    assert r.chosen is not None and r.chosen.need_compaction_now
    assert cleaned(r).end_offset == 3
    assert triples(read_all(log)) == [(2, b"a", b"3"), (3, b"b", b"1")]


def test_min_compaction_lag_keeps_young_segments_dirty(env: Env) -> None:
    store = env.open()
    log = topic(store, **{"min.compaction.lag.ms": 10_000})
    put_segment(log, [("a", "1"), ("a", "2")], ts=T0 - 20_000)
    put_segment(log, [("a", "3"), ("a", "4")], ts=T0 - 1_000)
    r = cleaned(store.run_cleaner())
    assert r.end_offset == 2                           # U stops at the young segment
    assert [x.offset for x in read_all(log)] == [1, 2, 3]
    env.clock.advance(10_000)
    put_segment(log, [("b", "1")])
    cleaned(store.run_cleaner())
    assert [x.offset for x in read_all(log)] == [3, 4]


def test_kt18_partial_cleaning_with_a_tiny_dedupe_buffer_converges(any_env: Env) -> None:
    env = any_env
    store = env.open(log_cleaner_dedupe_buffer_size=24 * 3)     # two map entries per round
    log = topic(store)
    put_segment(log, [("a", "1"), ("b", "1"), ("a", "2"), ("c", "1")])
    put_segment(log, [("b", "2"), ("c", "2"), ("a", "3"), ("b", "3")])
    before = read_all(log)
    leo = log.log_end_offset
    checkpoints: list[int] = []
    for _ in range(20):
        r = store.run_cleaner()
        if r.cleaned is None:
            break
        checkpoint = log.manifest().cleaner_checkpoint
        assert checkpoint is not None
        checkpoints.append(checkpoint)
        assert fold(read_all(log)) == fold(before)           # every round is correct on its own
        assert log.log_end_offset == leo
    assert checkpoints == sorted(checkpoints) and len(checkpoints) >= 3
    assert checkpoints[0] == 2                              # the map filled at offset 2 (a mid-segment checkpoint)
    assert checkpoints[-1] == 8
    assert triples(read_all(log)) == [(5, b"c", b"2"), (6, b"a", b"3"), (7, b"b", b"3")]


def test_partial_round_keeps_records_above_the_map_untouched(env: Env) -> None:
    store = env.open(log_cleaner_dedupe_buffer_size=24 * 3)
    log = topic(store)
    put_segment(log, [("a", "1"), ("a", "2"), ("b", "1"), ("b", "2"), ("c", "1"), ("c", "2")])
    r = cleaned(store.run_cleaner())
    assert r.map_full and r.end_offset == 3              # a@0, a@1, b@2 put; b@3 finds the map full
    assert [x.offset for x in read_all(log)] == [1, 2, 3, 4, 5]


def test_unkeyed_records_of_a_log_that_became_compacted_are_dropped_and_counted(env: Env) -> None:
    store = env.open()
    store.create_topic("t", 1, {"cleanup.policy": "delete", "segment.bytes": 1 << 20})
    log = store.partition("t", 0)
    put_segment(log, [(None, "u1"), ("a", "1"), (None, "u2"), ("a", "2")])
    store.alter_topic_config("t", {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
    r = cleaned(store.run_cleaner())
    assert r.invalid_dropped == 2
    assert triples(read_all(log)) == [(3, b"a", b"2")]


def test_many_segments_merge_into_segment_bytes_groups(env: Env) -> None:
    store = env.open()
    log = topic(store, **{"segment.bytes": 400})
    for i in range(8):
        put_segment(log, [(f"k{j}", f"v{i}") for j in range(5)])
    cleaned(store.run_cleaner())           # first round: pre-clean sizes keep the groups apart
    put_segment(log, [("k0", "last")])
    cleaned(store.run_cleaner())           # second round: tiny cleaned segments merge up to segment.bytes
    segs = log.manifest().segments
    assert len(segs) < 9
    assert sum(s.size_bytes for s in segs[:-1]) <= 400 * len(segs)
    assert segs[0].base_offset == 0 and segs[-1].last_offset == 40
    assert fold(read_all(log)) == {f"k{j}".encode(): (35 + j, b"v7") for j in range(1, 5)} | {b"k0": (40, b"last")}


def test_headers_and_timestamps_are_preserved(env: Env) -> None:
    store = env.open()
    log = topic(store)
    log.append([Record(b"a", b"1", T0 - 5, headers=[("h", b"x")]), Record(b"b", b"1", T0 - 3)])
    log.append([Record(b"a", b"2", T0 - 1, headers=[("h", b"y"), ("i", b"")])])
    log.roll()
    cleaned(store.run_cleaner())
    got = read_all(log)
    assert [(r.offset, r.timestamp, tuple(r.headers)) for r in got] == [
        (1, T0 - 3, ()), (2, T0 - 1, (("h", b"y"), ("i", b"")))]


def test_compact_delete_topic_gets_retention_from_the_cleaner(env: Env) -> None:
    store = env.open()
    log = topic(store, **{"cleanup.policy": "compact,delete", "retention.ms": 10_000, "segment.bytes": 50})
    put_segment(log, [("a", "1"), ("b", "1")], ts=T0 - 60_000)
    put_segment(log, [("a", "2")], ts=T0)
    r = store.run_cleaner()
    assert r.retention_segments_deleted == 1
    assert log.log_start_offset == 2
    assert triples(read_all(log)) == [(2, b"a", b"2")]


def test_compact_only_topic_gets_log_start_retention_only(env: Env) -> None:
    store = env.open()
    log = topic(store, **{"retention.ms": 1})
    put_segment(log, [("a", "1")], ts=T0 - DAY)
    put_segment(log, [("b", "1")], ts=T0 - DAY)
    r = store.run_cleaner()
    assert r.retention_segments_deleted == 0
    assert log.log_start_offset == 0 and len(read_all(log)) == 2


def test_cleaner_disabled_does_nothing(env: Env) -> None:
    store = env.open(log_cleaner_enable=False)
    log = topic(store, **{"cleanup.policy": "compact,delete", "retention.ms": 1})
    put_segment(log, [("a", "1"), ("a", "2")], ts=T0 - DAY)
    put_segment(log, [("a", "3")], ts=T0 - DAY)
    r = store.run_cleaner()
    assert not r.enabled and r.cleaned is None
    store.run_retention()                                    # CFG-2: no retention for compacted topics either
    assert len(read_all(log)) == 3 and log.manifest().cleaner_checkpoint is None


def test_invalid_checkpoint_is_rewritten_even_when_not_chosen(env: Env) -> None:
    # KT-07/KT-08: DeleteRecords moved the log start past the checkpoint; the partition is not cleanable
    store = env.open()
    log = topic(store, **{"cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": "1.0"})
    put_segment(log, [("a", "1")])
    put_segment(log, [("b", "1")])
    put_segment(log, [("c", "1")])
    store.alter_topic_config("t", {"min.cleanable.dirty.ratio": "0.01"})
    cleaned(store.run_cleaner())
    assert log.manifest().cleaner_checkpoint == 3
    put_segment(log, [("d", "1")])
    put_segment(log, [("e", "1")])
    log.delete_records(4)
    store.alter_topic_config("t", {"min.cleanable.dirty.ratio": "1.0"})
    r = store.run_cleaner()
    assert r.cleaned is None and r.checkpoints_reset == 1
    assert log.manifest().cleaner_checkpoint == 4
    assert log.log_start_offset == 4


def test_dirtiest_partition_is_cleaned_first(env: Env) -> None:
    store = env.open()
    store.create_topic("t", 2, dict(COMPACT))
    p0, p1 = store.partition("t", 0), store.partition("t", 1)
    put_segment(p0, [("a", "1")])
    put_segment(p1, [("a", "1")])
    cleaned(store.run_cleaner())
    cleaned(store.run_cleaner())
    put_segment(p0, [("b", "1")])                              # p0: ratio 1/2
    put_segment(p1, [("b", "1")])
    put_segment(p1, [("c", "1")])                              # p1: ratio 2/3
    assert cleaned(store.run_cleaner()).log_id == p1.log_id
    assert cleaned(store.run_cleaner()).log_id == p0.log_id
    assert store.run_cleaner().cleaned is None


def test_reader_in_another_process_sees_the_compacted_log(env: Env) -> None:
    writer = env.open("w")
    log = topic(writer)
    put_segment(log, [("a", "1"), ("a", "2"), ("b", "1")])
    reader = env.open("r")
    cleaner = env.open("c")
    cleaned(cleaner.run_cleaner())
    rlog = reader.partition("t", 0)
    assert triples(read_all(rlog)) == [(1, b"a", b"2"), (2, b"b", b"1")]
    assert rlog.log_end_offset == 3
    log.append([kv("c", "1")])
    assert log.log_end_offset == 4


@pytest.mark.parametrize("value_size", [0, 5000])
def test_value_sizes(env: Env, value_size: int) -> None:
    store = env.open()
    log = topic(store)
    big = b"x" * value_size
    log.append([Record(b"a", big, T0), Record(b"a", big + b"!", T0)])
    log.roll()
    cleaned(store.run_cleaner())
    assert [(r.offset, r.value) for r in read_all(log)] == [(1, big + b"!")]



class _CountingGets(ForwardingObjectStore):
    """Counts the bytes GET returns."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.got = 0

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        data = self.inner.get(key, byte_range)
        self.got += len(data)
        return data


def _skipping_round(env: Env, monkeypatch: pytest.MonkeyPatch, *, skip: bool) -> tuple[Any, list[Any], int]:
    """One round over row groups of ~4 records: superseded keys, tombstones and unkeyed records early on.

    Returns the round, the survivors and the bytes the round fetched.
    """
    if not skip:
        monkeypatch.setattr(cleaner.executor, "droppable", lambda *a: False)
    counting = _CountingGets(env._fresh_raw())
    store = env.open(wal=f"skip-{skip}", object_store=counting, segment_row_group_bytes=120)
    name = f"t-{skip}"
    store.create_topic(name, 1, {**COMPACT, "cleanup.policy": "delete"})
    log = store.partition(name, 0)
    early = [(None if i % 9 == 0 else f"k{i % 6}", None if i % 5 == 0 else f"v{i}") for i in range(40)]
    put_segment(log, early, one_batch=True)
    put_segment(log, [(f"k{i}", f"late{i}") for i in range(6)], one_batch=True)
    put_segment(log, [("k0", "last")], one_batch=True)
    store.alter_topic_config(name, {"cleanup.policy": "compact"})
    before = counting.got
    r = cleaned(store.run_cleaner())
    fetched = counting.got - before
    monkeypatch.undo()
    return r, triples(read_all(log)), fetched


def test_row_groups_dropped_whole_are_never_fetched_and_counted_exactly(env: Env,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """CLEAN-KEEP-1 from the footer alone: the survivors and statistics of decoding every row group, fewer bytes."""
    skipped, survivors, fetched_skipping = _skipping_round(env, monkeypatch, skip=True)
    decoded, expected, fetched_all = _skipping_round(env, monkeypatch, skip=False)
    assert survivors == expected == [(41, b"k1", b"late1"), (42, b"k2", b"late2"), (43, b"k3", b"late3"),
                                     (44, b"k4", b"late4"), (45, b"k5", b"late5"), (46, b"k0", b"last")]
    assert skipped.records_unread > 20 and decoded.records_unread == 0
    assert fetched_skipping < fetched_all
    same = ("records_read", "records_kept", "invalid_dropped", "tombstones_dropped", "bytes_read", "bytes_written",
            "segments_in", "segments_out", "end_offset")
    assert {k: getattr(skipped, k) for k in same} == {k: getattr(decoded, k) for k in same}
    assert (skipped.invalid_dropped, skipped.tombstones_dropped) == (5, 8)
