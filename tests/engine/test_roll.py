"""Roll rules ROLL-1..4 (docs/design/kafka-rules.md): size, record time, jitter, compaction lag, explicit roll."""

from __future__ import annotations

from pathlib import Path

import s3stream
from s3stream import IdSource, ManualClock, Record
from s3stream.objectstore.memory import MemoryObjectStore

from .helpers import T0, open_mem, read_all


def _rec(i: int, ts: int | None = None, value_len: int = 79) -> Record:
    return Record(b"%03d" % i, b"x" * value_len, ts)  # 21 + 3 + 79 = 103 bytes


def test_segment_bytes_boundary_exact(mem_url: str, tmp_path: Path) -> None:
    size = _rec(0).size_bytes
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("exact", config={"segment.bytes": 3 * size})
        store.create_topic("under", config={"segment.bytes": 3 * size - 1})
        for topic, per_segment in (("exact", 3), ("under", 2)):
            log = store.partition(topic, 0)
            for i in range(10):
                log.append([_rec(i)])
            log.flush()
            segs = log.segments()
            sealed = [s for s in segs if s.sealed]
            assert [s.record_count for s in sealed] == [per_segment] * ((10 - 1) // per_segment)
            assert all(s.size_bytes == per_segment * size for s in sealed)
            assert all(s.size_bytes <= 3 * size for s in segs)
            assert segs[-1].sealed is False
            assert [s.base_offset for s in segs] == list(range(0, 10, per_segment))
            assert [r.offset for r in read_all(log)] == list(range(10))


def test_segment_bytes_counts_whole_batches(mem_url: str, tmp_path: Path) -> None:
    """A batch never splits across segments; a batch larger than segment.bytes gets its own segment."""
    size = _rec(0).size_bytes
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t", config={"segment.bytes": 4 * size})
        log = store.partition("t", 0)
        log.append([_rec(i) for i in range(3)])       # 3
        log.append([_rec(i) for i in range(3, 5)])    # 3 + 2 > 4: roll
        log.append([_rec(i) for i in range(5, 11)])   # 2 + 6 > 4: roll; 6 alone > 4 but a new segment
        log.append([_rec(11)])                        # 6 + 1 > 4: roll
        log.flush()
        segs = log.segments()
        assert [(s.base_offset, s.last_offset) for s in segs] == [(0, 2), (3, 4), (5, 10), (11, 11)]
        assert [s.sealed for s in segs] == [True, True, True, False]


def test_segment_ms_uses_record_timestamps(mem_url: str, tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with open_mem(mem_url, tmp_path, clock=clock) as store:
        store.create_topic("t", config={"segment.ms": 1000})
        log = store.partition("t", 0)
        log.append([_rec(0, T0), _rec(1, T0 + 200)])   # first batch max ts = T0 + 200
        log.append([_rec(2, T0 + 1200)])               # waited 1000: not > 1000, no roll
        clock.advance(10_000_000)                      # wall clock is irrelevant (ROLL-2)
        log.append([_rec(3, T0 + 900)])
        assert len(log.segments()) == 1
        log.append([_rec(4, T0 + 1201)])               # waited 1001 > 1000: roll
        log.flush()
        segs = log.segments()
        assert [(s.base_offset, s.last_offset, s.sealed) for s in segs] == [(0, 3, True), (4, 4, False)]
        assert segs[0].max_timestamp == T0 + 1200


def test_segment_ms_never_rolls_an_idle_partition(mem_url: str, tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with open_mem(mem_url, tmp_path, clock=clock) as store:
        store.create_topic("t", config={"segment.ms": 100})
        log = store.partition("t", 0)
        log.append([_rec(0)])
        clock.advance(1_000_000)
        store.flush()
        segs = log.segments()
        assert [(s.base_offset, s.sealed) for s in segs] == [(0, False)]
        assert log.manifest().segments == ()
        log.append([_rec(1)])  # timestamp None -> clock: waited 1_000_000 > 100
        log.flush()
        assert [(s.base_offset, s.sealed) for s in log.segments()] == [(0, True), (1, False)]


def test_segment_jitter_shortens_the_deadline(mem_url: str, tmp_path: Path) -> None:
    runs = iter(range(100))

    def segment_sizes(jitter: int, seed: int) -> list[int]:
        run = next(runs)
        url = f"{mem_url}-run{run}"
        store = s3stream.open_store(url, clock=ManualClock(T0), ids=IdSource(seed), probe=False,
                                    wal_dir=str(tmp_path / f"wal{run}"), wal_fsync=False)
        try:
            store.create_topic("t", config={"segment.ms": 100, "segment.jitter.ms": jitter})
            log = store.partition("t", 0)
            for i in range(400):
                log.append([_rec(i, T0 + i)])
            log.flush()
            return [s.record_count for s in log.segments() if s.sealed]
        finally:
            store.close()
            MemoryObjectStore.drop_namespace(url.removeprefix("memory://"))

    plain = segment_sizes(0, 1)
    assert set(plain) == {101}  # ts first .. first + 100 (waited 100 is not > 100)
    jittered = segment_sizes(50, 1)
    assert all(51 <= n <= 101 for n in jittered)
    assert len(jittered) > len(plain)
    assert len(set(jittered)) > 1  # drawn per segment
    assert segment_sizes(50, 1) == jittered  # the seeded IdSource makes it reproducible


def test_compacted_topic_rolls_at_max_compaction_lag(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("c", config={"cleanup.policy": "compact", "segment.ms": 10_000,
                                        "max.compaction.lag.ms": 500})
        store.create_topic("d", config={"cleanup.policy": "delete", "segment.ms": 10_000,
                                        "max.compaction.lag.ms": 500})
        store.create_topic("c2", config={"cleanup.policy": "compact", "segment.ms": 300,
                                         "max.compaction.lag.ms": 500})
        for topic, expected in (("c", 2), ("d", 1), ("c2", 3)):
            log = store.partition(topic, 0)
            for i, ts in enumerate((0, 400, 501, 700, 900)):
                log.append([_rec(i, T0 + ts)])
            log.flush()
            assert len(log.segments()) == expected, topic


def test_roll_is_synchronous_and_empty_roll_is_noop(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t")
        log = store.partition("t", 0)
        log.roll()  # empty log: nothing to seal
        assert [(s.base_offset, s.record_count, s.sealed) for s in log.segments()] == [(0, 0, False)]
        assert log.manifest().segments == ()
        log.append([_rec(i) for i in range(5)])
        log.roll()
        segs = log.segments()
        assert [(s.base_offset, s.last_offset, s.sealed) for s in segs[:1]] == [(0, 4, True)]
        m = log.manifest()
        assert [(s.base_offset, s.last_offset) for s in m.segments] == [(0, 4)]
        assert m.next_offset == 5
        assert store.object_store.head(m.segments[0].key).size == m.segments[0].object_size
        seq = m.seq
        log.roll()  # the active segment is empty again: no-op
        log.roll()
        assert log.manifest().seq == seq
        assert [(s.base_offset, s.sealed) for s in log.segments()] == [(0, True), (5, False)]
        log.append([_rec(5)])
        assert log.read(4) and [r.offset for r in log.read(4)] == [4, 5]
