"""Idempotent producers at the store (KIP-98): retries are deduplicated, sequences and epochs are enforced,
and the state survives a clean close, a crash and a takeover by another store on the same bucket.

Kafka's current rules (``ProducerStateManager`` since 2.5): a duplicate of one of the producer's last five
batches gets its original offsets; a gap or an older retry is OutOfOrderSequence; an older epoch is
ProducerFenced; a new epoch starts at sequence 0; an unknown producer may start at any sequence.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import Future
from pathlib import Path

import pyarrow as pa
import pytest

import s3stream
from s3stream import ManualClock, Record
from s3stream.base.crashpoints import CrashPoints, SimulatedCrash
from s3stream.base.errors import (
    CorruptData,
    InvalidArgument,
    OutOfOrderSequence,
    ProducerFenced,
    S3StreamError,
)
from s3stream.base.producer import (
    MAX_BATCHES_PER_PRODUCER,
    PRODUCER_ID_EXPIRATION_MS,
    ProducerAppend,
    ProducerBatch,
    ProducerSnapshot,
    ProducerStateTable,
)
from s3stream.base.records import AppendResult
from s3stream.format.walentry import AppendEntry, decode_entry, encode_entry
from s3stream.format.walobject import WalChunkInput, decode_wal_index, encode_wal_object
from s3stream.manifest.codec import decode_manifest, encode_manifest
from s3stream.manifest.model import Manifest

from .helpers import T0, abandon, open_mem, read_all

TOPIC = "t"


def _table(values: list[bytes]) -> pa.Table:
    return pa.table({"key": [b"k"] * len(values), "value": values})


class Producer:
    """A client-side idempotent producer: its id, epoch, next sequence, and what it sent with the offsets."""

    def __init__(self, pid: int, epoch: int = 0, seq: int = 0) -> None:
        self.pid, self.epoch, self.seq = pid, epoch, seq
        self.sent: list[tuple[ProducerBatch, list[bytes], AppendResult]] = []

    def batch(self, n: int) -> tuple[ProducerBatch, list[bytes]]:
        values = [b"p%d-e%d-s%d" % (self.pid, self.epoch, self.seq + i) for i in range(n)]
        return ProducerBatch(self.pid, self.epoch, self.seq % (1 << 31), n), values

    def send(self, log: s3stream.PartitionLog, n: int = 2) -> AppendResult:
        pb, values = self.batch(n)
        res = log.append_arrow(_table(values), producer=pb)
        self.seq += n
        self.sent.append((pb, values, res))
        return res

    def retry(self, log: s3stream.PartitionLog, i: int) -> AppendResult:
        pb, values, _ = self.sent[i]
        return log.append_arrow(_table(values), producer=pb)


def _check_deduplicated(log: s3stream.PartitionLog, producers: list[Producer]) -> None:
    """Every remembered batch's retry gets its offsets back and writes nothing; an older one is refused; the
    log holds each sent record exactly once, at the offset its append returned."""
    end = log.log_end_offset
    for p in producers:
        for i in range(max(0, len(p.sent) - MAX_BATCHES_PER_PRODUCER), len(p.sent)):
            assert p.retry(log, i) == p.sent[i][2]
        if len(p.sent) > MAX_BATCHES_PER_PRODUCER:
            with pytest.raises(OutOfOrderSequence):
                p.retry(log, len(p.sent) - MAX_BATCHES_PER_PRODUCER - 1)
    assert log.log_end_offset == end
    by_offset = {r.offset: r.value for r in read_all(log, 0)}
    for p in producers:
        for _, values, res in p.sent:
            assert [by_offset[o] for o in range(res.base_offset, res.last_offset + 1)] == values
    everything = list(by_offset.values())
    assert len(everything) == len(set(everything))


def test_duplicate_retry_returns_the_original_offsets_and_writes_nothing(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic(TOPIC)
        log = store.partition(TOPIC, 0)
        p = Producer(7)
        assert p.send(log, 3) == AppendResult(0, 2)
        log.append([Record(b"k", b"plain")])  # appends without a producer interleave freely
        assert p.send(log, 2) == AppendResult(4, 5)
        assert p.retry(log, 0) == AppendResult(0, 2)
        assert p.retry(log, 1) == AppendResult(4, 5)
        assert log.log_end_offset == 6
        pb, values, _ = p.sent[0]  # the blocking and the record-list APIs take the producer too
        assert log.append([Record(b"k", v) for v in values], producer=pb) == AppendResult(0, 2)
        assert log.append_async([Record(b"k", v) for v in values], producer=pb).result() == AppendResult(0, 2)
        assert log.append_arrow_async(_table(values), producer=pb).result() == AppendResult(0, 2)
        assert p.send(log, 1) == AppendResult(6, 6)
        _check_deduplicated(log, [p])


def test_gaps_and_old_retries_are_out_of_order(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic(TOPIC)
        log = store.partition(TOPIC, 0)
        p = Producer(1)
        for _ in range(MAX_BATCHES_PER_PRODUCER + 1):
            p.send(log, 2)
        end = log.log_end_offset
        _, values = p.batch(1)
        with pytest.raises(OutOfOrderSequence):  # a gap: sequence 14 after 11
            log.append_arrow(_table(values), producer=ProducerBatch(1, 0, p.seq + 2, 1))
        with pytest.raises(OutOfOrderSequence):  # a retry older than the five remembered batches
            p.retry(log, 0)
        with pytest.raises(OutOfOrderSequence):  # overlapping, not an exact duplicate
            log.append_arrow(_table([b"x"]), producer=ProducerBatch(1, 0, p.seq - 1, 1))
        assert log.log_end_offset == end  # nothing of them written
        assert p.send(log, 1).base_offset == end  # the sequence goes on where it was
        _check_deduplicated(log, [p])


def test_older_epochs_are_fenced_and_a_new_epoch_starts_at_zero(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic(TOPIC)
        log = store.partition(TOPIC, 0)
        old = Producer(3, epoch=4)
        old.send(log, 2)
        old.send(log, 2)
        with pytest.raises(ProducerFenced):
            log.append_arrow(_table([b"x"]), producer=ProducerBatch(3, 3, 4, 1))
        with pytest.raises(OutOfOrderSequence):  # epoch 5 must start at sequence 0
            log.append_arrow(_table([b"x"]), producer=ProducerBatch(3, 5, 4, 1))
        new = Producer(3, epoch=5)
        new.send(log, 1)
        with pytest.raises(ProducerFenced):  # epoch 4's retries are fenced now, duplicates included
            old.retry(log, 1)
        with pytest.raises(ProducerFenced):
            old.send(log, 1)
        assert log.log_end_offset == 5
        _check_deduplicated(log, [new])


def test_unknown_producers_start_at_any_sequence_and_sequences_wrap(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic(TOPIC)
        log = store.partition(TOPIC, 0)
        late = Producer(11, seq=12_345)  # Kafka >= 2.5 accepts it (its state expired, say)
        late.send(log, 2)
        wrap = Producer(12, seq=(1 << 31) - 2)
        wrap.send(log, 2)  # sequences 2**31-2 and 2**31-1
        wrap.send(log, 3)  # ... then 0, 1, 2
        assert wrap.sent[-1][0].base_sequence == 0
        _check_deduplicated(log, [late, wrap])


def test_pipelined_batches_are_checked_in_order(mem_url: str, tmp_path: Path) -> None:
    """One producer's async batches, with a gap and duplicates of batches still in flight, in one round."""
    with open_mem(mem_url, tmp_path, flush_interval_ms=30_000) as store:
        store.create_topic(TOPIC)
        log = store.partition(TOPIC, 0)
        futures: list[Future[AppendResult]] = []
        batches = [ProducerBatch(5, 0, seq, 1) for seq in range(8)]
        for i, pb in enumerate(batches):
            futures.append(log.append_arrow_async(_table([b"v%d" % i]), producer=pb, ack="s3"))
            if i == 3:
                gap = log.append_arrow_async(_table([b"gap"]), producer=ProducerBatch(5, 0, 9, 1), ack="s3")
        dups = [log.append_arrow_async(_table([b"v%d" % i]), producer=batches[i], ack="s3") for i in (6, 7, 5)]
        assert not dups[0].done()  # the original awaits its WAL object: so does its duplicate
        store.flush()
        assert [f.result().base_offset for f in futures] == list(range(8))
        assert [f.result().base_offset for f in dups] == [6, 7, 5]
        with pytest.raises(OutOfOrderSequence):
            gap.result()
        assert log.log_end_offset == 8
        assert [r.value for r in read_all(log, 0)] == [b"v%d" % i for i in range(8)]


def test_invalid_producer_fields_are_refused(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic(TOPIC)
        log = store.partition(TOPIC, 0)
        for bad in [ProducerBatch(1, 0, 0, 2), ProducerBatch(-1, 0, 0, 1), ProducerBatch(1, -1, 0, 1),
                    ProducerBatch(1, 1 << 15, 0, 1), ProducerBatch(1, 0, 1 << 31, 1), ProducerBatch(1, 0, -1, 1)]:
            with pytest.raises(InvalidArgument):
                log.append_arrow(_table([b"x"]), producer=bad)
        with pytest.raises(InvalidArgument):
            log.append_arrow(_table([b"x"]), producer=(1, 0, 0, 1))  # type: ignore[arg-type]
        assert log.log_end_offset == 0


def _produce(log: s3stream.PartitionLog, producers: list[Producer], rounds: int) -> None:
    for _ in range(rounds):
        for p in producers:
            p.send(log, 2)
        log.append([Record(b"k", b"plain-%d" % log.log_end_offset)])


@pytest.mark.parametrize("sealed", ["none", "some", "all"])
@pytest.mark.parametrize("wal", ["same", "elsewhere"])
def test_state_survives_close_and_reopen(mem_url: str, tmp_path: Path, sealed: str, wal: str) -> None:
    """Rebuilt from the manifest's snapshot (what was sealed) and the WAL objects' producer batches (the rest)."""
    producers = [Producer(1), Producer(2, epoch=3)]
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic(TOPIC, config={"segment.bytes": 10_000_000})
        log = store.partition(TOPIC, 0)
        _produce(log, producers, 4)
        if sealed != "none":
            log.roll()
        if sealed == "some":
            _produce(log, producers, 3)
    with open_mem(mem_url, tmp_path, wal="elsewhere" if wal == "elsewhere" else "wal") as again:
        log = again.partition(TOPIC, 0)
        _check_deduplicated(log, producers)
        _produce(log, producers, 1)
        _check_deduplicated(log, producers)
        snap = log.manifest().producers
        # another node's WAL directory: the claim seals the first node's records (the snapshot with them)
        assert (snap is not None) == (sealed != "none" or wal == "elsewhere")
        if snap is not None:
            assert snap.through_offset == log.manifest().next_offset
            assert {e.producer_id for e in snap.entries} == {1, 2}


_POINTS = ["flush.before_put", "flush.after_put", "flush.before_trim", "seal.after_segment_put",
           "seal.after_manifest_commit", "manifest.before_put", "manifest.after_put"]


@pytest.mark.parametrize("point", [None, *_POINTS])
def test_state_survives_a_crash(mem_url: str, tmp_path: Path, point: str | None) -> None:
    """Killed at a crash point (or with appends only in the local WAL): the restarted process replays what
    the bucket lacks, producer batches included, so the acknowledged batches' retries stay deduplicated."""
    cp = CrashPoints()
    producers = [Producer(1), Producer(2)]
    store = open_mem(mem_url, tmp_path, crash_points=cp, flush_interval_ms=60_000)
    store.create_topic(TOPIC)
    log = store.partition(TOPIC, 0)
    _produce(log, producers, 3)
    log.roll()
    _produce(log, producers, 2)
    store.flush()
    _produce(log, producers, 3)  # in the local WAL (and the uploader's buffer) only
    if point is not None:
        cp.arm(point)
        with pytest.raises((SimulatedCrash, S3StreamError)):
            if point.startswith("flush."):
                store.flush()
            else:
                log.roll()
    abandon(store)
    with open_mem(mem_url, tmp_path) as recovered:
        log = recovered.partition(TOPIC, 0)
        _check_deduplicated(log, producers)
        _produce(log, producers, 1)
        log.roll()
    with open_mem(mem_url, tmp_path, wal="elsewhere") as again:
        _check_deduplicated(again.partition(TOPIC, 0), producers)


@pytest.mark.parametrize("sealed_before", [False, True])
def test_state_survives_a_takeover(mem_url: str, tmp_path: Path, sealed_before: bool) -> None:
    """Store B takes the partition over from a live store A: A's producers retry against B."""
    producers = [Producer(1), Producer(2), Producer(3, epoch=1)]
    a = open_mem(mem_url, tmp_path, wal="a", flush_interval_ms=60_000)
    b = open_mem(mem_url, tmp_path, wal="b", flush_interval_ms=60_000)
    try:
        a.create_topic(TOPIC)
        la = a.partition(TOPIC, 0)
        _produce(la, producers, 3)
        if sealed_before:
            la.roll()
        _produce(la, producers, 3)
        a.flush()  # A's unsealed batches are in its WAL objects
        lb = b.partition(TOPIC, 0)
        _check_deduplicated(lb, producers)  # the first retry claims the partition
        assert lb.is_writer
        _produce(lb, producers, 1)
        with pytest.raises(OutOfOrderSequence):
            lb.append_arrow(_table([b"x"]), producer=ProducerBatch(1, 0, producers[0].seq + 1, 1))
        with pytest.raises(S3StreamError):  # A was fenced
            producers[0].send(la, 1)
            a.flush()
        lb.roll()
    finally:
        abandon(a)  # fenced: it could flush nothing at a close
        b.close()
    with open_mem(mem_url, tmp_path, wal="c") as c:
        _check_deduplicated(c.partition(TOPIC, 0), producers)


def test_manifests_and_entries_without_producers_are_unchanged(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic(TOPIC)
        log = store.partition(TOPIC, 0)
        log.append([Record(b"k", b"v")])
        log.roll()
        m = log.manifest()
        assert m.producers is None and b"producers" not in encode_manifest(m)


# -- the pure parts: the table, and the producer batches in each format ------------------------------------


def test_table_caps_and_expires_producer_ids() -> None:
    table = ProducerStateTable(max_producers=3)
    for pid in range(5):
        table.record(ProducerAppend(pid, 0, 0, 1, pid), T0 + pid)
    assert [e.producer_id for e in table] == [2, 3, 4]  # least recently appended evicted first
    table.record(ProducerAppend(2, 0, 1, 1, 10), T0 + 10)
    table.record(ProducerAppend(5, 0, 0, 1, 11), T0 + 11)
    assert [e.producer_id for e in table] == [4, 2, 5]
    assert table.check(ProducerBatch(3, 0, 7, 1)) is None  # forgotten: accepted as an unknown producer
    assert table.expire(T0 + 10 + PRODUCER_ID_EXPIRATION_MS) == 1
    assert [e.producer_id for e in table] == [2, 5]
    assert table.check(ProducerBatch(2, 0, 1, 1)) == AppendResult(10, 10)
    assert table.get(2) is not None and len(table.get(2).batches) == 2  # type: ignore[union-attr]


def test_a_forked_table_leaves_its_parent_unchanged() -> None:
    table = ProducerStateTable()
    table.record(ProducerAppend(1, 0, 0, 2, 0), T0)
    fork = table.fork()
    fork.record(ProducerAppend(1, 0, 2, 2, 2), T0)
    assert fork.check(ProducerBatch(1, 0, 2, 2)) == AppendResult(2, 3)
    with pytest.raises(OutOfOrderSequence):
        table.check(ProducerBatch(1, 0, 4, 1))
    assert table.check(ProducerBatch(1, 0, 2, 2)) is None


def test_snapshot_round_trips_in_the_manifest_and_refuses_garbage() -> None:
    table = ProducerStateTable()
    for i in range(7):
        table.record(ProducerAppend(9, 2, i * 3, 3, i * 3), T0 + i)
    table.record(ProducerAppend(4, 0, 0, 1, 21), T0 + 7)
    snap = dataclasses.replace(table.snapshot(), through_offset=22)
    assert len(snap.entries[0].batches) == MAX_BATCHES_PER_PRODUCER
    m = dataclasses.replace(Manifest.empty("t", "tid", 0), next_offset=22, producers=snap)
    decoded = decode_manifest(encode_manifest(m), source="test")
    assert decoded.producers == snap
    rebuilt = ProducerStateTable.from_snapshot(decoded.producers)
    assert rebuilt.check(ProducerBatch(9, 2, 18, 3)) == AppendResult(18, 20)
    good = snap.to_json()
    for bad in [{**good, "extra": 1}, {**good, "through_offset": 20}, {**good, "through_offset": -1},
                {**good, "entries": [[9, 2, T0, []]]}, {**good, "entries": [[9, 2, T0, [[0, 0, 0]]]]},
                {**good, "entries": [[9, 2, T0, [[0, 1, 5], [1, 1, 4]]]]}, {**good, "entries": [["9", 2, T0, []]]},
                {**good, "entries": good["entries"] * 2}, {**good, "entries": [[9, 1 << 15, T0, [[0, 1, 0]]]]}]:
        with pytest.raises(CorruptData):
            ProducerSnapshot.from_json(bad, source="test")
    with pytest.raises(CorruptData, match="past next_offset"):
        decode_manifest(encode_manifest(dataclasses.replace(m, next_offset=21)), source="test")


def test_wal_entries_and_objects_carry_producer_batches() -> None:
    offsets = pa.array([10, 11, 12, 13], type=pa.int64())
    batch = pa.RecordBatch.from_arrays(
        [offsets, pa.array([T0] * 4, type=pa.int64()), pa.array([b"k"] * 4), pa.array([b"v"] * 4),
         pa.nulls(4, type=s3stream.base.records.HEADER_TYPE), pa.nulls(4, type=pa.int64())],
        schema=s3stream.base.records.RECORD_SCHEMA)
    producers = (ProducerAppend(1, 0, 5, 2, 10), ProducerAppend(2, 7, 0, 1, 13))
    entry = decode_entry(encode_entry(AppendEntry("t/x/0", batch, producers)), source="test")
    assert isinstance(entry, AppendEntry) and entry.producers == producers and entry.batch.equals(batch)
    plain = encode_entry(AppendEntry("t/x/0", batch))
    assert plain[1] == 1 and decode_entry(plain, source="test").producers == ()  # type: ignore[union-attr]
    for bad in [(ProducerAppend(1, 0, 5, 2, 9),), (ProducerAppend(1, 0, 5, 5, 10),),
                (ProducerAppend(2, 0, 0, 1, 12), ProducerAppend(1, 0, 0, 1, 11))]:
        with pytest.raises(S3StreamError):
            encode_entry(AppendEntry("t/x/0", batch, bad))
    data, index = encode_wal_object(node_id="n", seq=1, created_ms=T0,
                                    chunks=[WalChunkInput("t/x/0", batch, (), producers),
                                            WalChunkInput("t/x/1", batch)])
    decoded = decode_wal_index(data, len(data), source="test")
    assert not isinstance(decoded, int)
    assert decoded.chunks[0].producers == producers and decoded.chunks[1].producers == ()
    assert decoded == index


def test_snapshot_expires_idle_producers_at_the_next_seal(mem_url: str, tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with open_mem(mem_url, tmp_path, clock=clock) as store:
        store.create_topic(TOPIC)
        log = store.partition(TOPIC, 0)
        idle, busy = Producer(1), Producer(2)
        idle.send(log)
        log.roll()
        assert {e.producer_id for e in log.manifest().producers.entries} == {1}  # type: ignore[union-attr]
        clock.advance(PRODUCER_ID_EXPIRATION_MS + 1)
        busy.send(log)
        log.roll()
        assert {e.producer_id for e in log.manifest().producers.entries} == {2}  # type: ignore[union-attr]
