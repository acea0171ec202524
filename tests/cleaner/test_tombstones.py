"""Tombstones end to end (issue 4, item 4 and item 8): rules CLEAN-TOMB-1..3, KIP-534, KT-23/KT-24/KD-05.

A tombstone (``value=None``) is kept, readable, by the first round that retains it, which stamps its delete
horizon ``now + delete.retention.ms`` (whatever the tombstone's own timestamp); the first later round at
or after the horizon drops it; a tombstone superseded by a later record of its key is dropped at once.
Kafka runs no round only because a horizon passed; ``s3stream.tombstone.cleanup.on.idle`` does.
The KT-24 case runs on memory:// and on SeaweedFS (``any_env``).
"""

from __future__ import annotations

from s3stream import Record

from .conftest import Env
from .kit import DAY, T0, cleaned, horizons, kv, put_segment, read_all, topic, triples


def test_kt24_two_phase_tombstone_with_the_horizon_set_by_the_first_round(any_env: Env) -> None:
    env = any_env
    store = env.open()
    log = topic(store, **{"delete.retention.ms": 10_000, "message.timestamp.before.max.ms": 30 * DAY})
    put_segment(log, [("a", "1"), ("b", "1")])
    log.append([Record(b"a", None, env.t0 - 20 * DAY)])     # a very old tombstone timestamp: irrelevant (KAFKA-4529)
    log.roll()
    env.clock.advance(5_000)
    cleaned(store.run_cleaner())
    assert horizons(log) == {2: env.t0 + 5_000 + 10_000}    # phase 1: now + delete.retention.ms
    assert triples(read_all(log)) == [(1, b"b", b"1"), (2, b"a", None)]     # CLEAN-GUAR-4: the tombstone is readable
    env.clock.advance(9_999)                             # one ms before the horizon
    put_segment(log, [("c", "1")])
    cleaned(store.run_cleaner())
    assert horizons(log) == {2: env.t0 + 15_000}             # still kept, horizon unchanged
    env.clock.advance(1)                                 # now == horizon
    put_segment(log, [("d", "1")])
    r = cleaned(store.run_cleaner())
    assert r.tombstones_dropped == 1
    assert horizons(log) == {}
    assert triples(read_all(log)) == [(1, b"b", b"1"), (3, b"c", b"1"), (4, b"d", b"1")]
    assert log.log_end_offset == 5


def test_tombstone_survives_without_a_new_round_kafka_semantics(env: Env) -> None:
    # CLEAN-TOMB-2 / KAFKA-8522: no round is triggered only because a horizon passed
    store = env.open()
    log = topic(store)
    put_segment(log, [("a", "1"), ("a", None)])
    cleaned(store.run_cleaner())
    env.clock.advance(60_000)
    assert store.run_cleaner().cleaned is None
    assert triples(read_all(log)) == [(1, b"a", None)]


def test_tombstone_cleanup_on_idle_drops_expired_tombstones(env: Env) -> None:
    store = env.open()
    log = topic(store, **{"s3stream.tombstone.cleanup.on.idle": "true"})
    put_segment(log, [("a", "1"), ("b", "1"), ("a", None)])
    cleaned(store.run_cleaner())
    assert store.run_cleaner().cleaned is None          # horizon not reached: nothing to do
    env.clock.advance(1_000)
    r = store.run_cleaner()
    assert r.chosen is not None and r.chosen.tombstones_due
    assert cleaned(r).tombstones_dropped == 1
    assert triples(read_all(log)) == [(1, b"b", b"1")]
    assert store.run_cleaner().cleaned is None          # no horizon left: idle again
    assert log.log_end_offset == 3


def test_last_record_removed_the_log_end_survives_restart(env: Env) -> None:
    store = env.open()
    log = topic(store, **{"s3stream.tombstone.cleanup.on.idle": "true"})
    put_segment(log, [("a", "1"), ("a", None)])
    cleaned(store.run_cleaner())
    env.clock.advance(1_000)
    cleaned(store.run_cleaner())
    assert read_all(log) == [] and log.log_end_offset == 2 and log.log_start_offset == 0
    store.close()
    log2 = env.open().partition("t", 0)
    assert (log2.log_start_offset, log2.log_end_offset) == (0, 2)
    assert log2.read(0) == []
    assert log2.append([kv("b", "1")]).base_offset == 2


def test_kd05_superseded_tombstone_is_dropped_without_waiting(env: Env) -> None:
    store = env.open()
    log = topic(store, **{"delete.retention.ms": DAY})
    put_segment(log, [("a", "1"), ("a", None), ("a", "2")])
    r = cleaned(store.run_cleaner())
    assert r.tombstones_dropped == 1
    assert triples(read_all(log)) == [(2, b"a", b"2")]
    assert horizons(log) == {}


def test_kd05_tombstone_in_the_clean_section_superseded_by_a_later_value(env: Env) -> None:
    store = env.open()
    log = topic(store, **{"delete.retention.ms": DAY})
    put_segment(log, [("a", "1"), ("a", None)])
    cleaned(store.run_cleaner())
    assert horizons(log) == {1: T0 + DAY}
    put_segment(log, [("a", "2")])
    cleaned(store.run_cleaner())
    assert triples(read_all(log)) == [(2, b"a", b"2")]


def test_kt23_tombstone_in_the_dirty_range_removes_earlier_values_in_the_same_round(env: Env) -> None:
    store = env.open()
    log = topic(store, **{"delete.retention.ms": DAY})
    put_segment(log, [("a", "1"), ("b", "1")])
    cleaned(store.run_cleaner())
    put_segment(log, [("a", None)])
    cleaned(store.run_cleaner())
    assert triples(read_all(log)) == [(1, b"b", b"1"), (2, b"a", None)]


def test_another_node_reads_past_a_sealed_tier_emptied_by_compaction(env: Env) -> None:
    # a reader that is not the writer skips the WAL scan for reads starting in the sealed tier; when the
    # sealed tier holds no record at or after the offset (a dropped tombstone at its end), the read must
    # still return the tail's records, never [] before the log end
    store = env.open()
    log = topic(store, **{"s3stream.tombstone.cleanup.on.idle": "true"})
    put_segment(log, [("a", "1"), ("a", None)])
    cleaned(store.run_cleaner())
    env.clock.advance(1_000)
    cleaned(store.run_cleaner())                         # the horizon passed: [0, 2) now holds nothing
    log.append([kv("b", "2")])
    store.flush()                                        # offset 2 is in a WAL object, not sealed
    reader = env.open("reader").partition(log.topic, 0)
    assert not reader.is_writer
    assert triples(reader.read(0)) == [(2, b"b", b"2")]
    assert triples(reader.read(1)) == [(2, b"b", b"2")]
