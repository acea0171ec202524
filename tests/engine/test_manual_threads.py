"""``background=manual`` starts no thread at all: not even the pools below the engine (issue 27 item 1).

A ``file://`` store opened as the simulator opens one (a manual pacing clock, seeded ids, ``background=manual``)
runs a workload that reaches every pool the threaded mode has: the capability probe's racing PUTs, appends of
both ack modes (drain, local-WAL write and sync steps), WAL-object uploads and seals of objects over a MiB
(direct writes of full staging buffers), reads of sealed segments by a second store (ranged fetches,
read-ahead, manifest probes), retention, a cleaner pass (its scan, decode and output pools) and GC.
``threading.Thread.start`` and thread-pool submissions are recorded throughout: there must be none, every
file write happens in the test's own thread, and the work of each of those pools ran on the inline
executors (:mod:`s3stream.base.inline`) the store hands out instead. Two runs of one seed leave the same
bucket and read the same records; two simulator runs of one seed give the same trace, with no thread
started either.
"""

from __future__ import annotations

import hashlib
import os
import random
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import s3stream
from s3stream import ManualClock, Record
from s3stream.base.ids import IdSource
from s3stream.base.inline import InlineExecutor
from s3stream.objectstore.directwrite import STAGING_BYTES, write_file
from s3stream.objectstore.local import LocalObjectStore
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.objectstore.probe import probe_conditional_writes
from s3stream.testing.sim import SimOptions, run_seed
from tests.engine.helpers import T0, read_all

TOPIC = {"segment.ms": "60000", "retention.ms": "120000", "file.delete.delay.ms": "0",
         "max.message.bytes": str(4 << 20)}
RECORD_BYTES = 48 << 10
#: Records per partition and ack mode: two partitions of 2 x 40 x 48 KiB, so WAL objects and segments
#: are several staging buffers each.
PER_BATCH = 40


class ThreadLog:
    """Every ``Thread.start``, every task handed to a thread pool (a process-wide pool made by an earlier
    test has its threads already), every task run inline instead and every ``os.pwrite`` (by thread) while
    installed."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.submitted: list[str] = []
        self.inline: set[str] = set()
        self.pwrites: list[tuple[str, int]] = []


@pytest.fixture
def thread_log(monkeypatch: pytest.MonkeyPatch) -> Iterator[ThreadLog]:
    log = ThreadLog()
    start, submit, pwrite = threading.Thread.start, ThreadPoolExecutor.submit, os.pwrite
    inline = InlineExecutor.submit

    def recording_start(self: threading.Thread) -> None:
        log.started.append(self.name)
        start(self)

    def recording_submit(self: ThreadPoolExecutor, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
                         ) -> Future[Any]:
        log.submitted.append(getattr(fn, "__qualname__", repr(fn)))
        return submit(self, fn, *args, **kwargs)

    def recording_inline(self: InlineExecutor, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
                         ) -> Future[Any]:
        log.inline.add(getattr(fn, "__qualname__", repr(fn)))
        return inline(self, fn, *args, **kwargs)

    def recording_pwrite(fd: int, data: Any, offset: int) -> int:
        log.pwrites.append((threading.current_thread().name, len(memoryview(data))))
        return pwrite(fd, data, offset)

    monkeypatch.setattr(threading.Thread, "start", recording_start)
    monkeypatch.setattr(ThreadPoolExecutor, "submit", recording_submit)
    monkeypatch.setattr(InlineExecutor, "submit", recording_inline)
    monkeypatch.setattr(os, "pwrite", recording_pwrite)
    before = set(threading.enumerate())
    yield log
    assert set(threading.enumerate()) - before == set()


def _open(root: Path, wal: str, seed: int, clock: ManualClock, **opts: Any) -> s3stream.Store:
    return s3stream.open_store(f"file://{root / 'bucket'}", clock=clock, ids=IdSource(seed), wal_dir=str(root / wal),
                               background="manual", probe=True, flush_interval_ms=100, orphan_min_age_ms=1000,
                               manifest_min_age_ms=1000, read_ahead_bytes=1 << 20, **opts)


def _batch(part: int, start: int) -> list[Record]:
    """Incompressible values (seeded), so the objects holding them are as large as the records."""
    return [Record(b"p%d-%d" % (part, i), random.Random(f"{part}/{i}").randbytes(RECORD_BYTES))
            for i in range(start, start + PER_BATCH)]


def _digest(records: list[Record]) -> str:
    h = hashlib.sha256()
    for r in records:
        h.update(b"%d|%s|%s|" % (r.offset or 0, r.key or b"", r.value or b""))
    return h.hexdigest()[:16]


def _workload(root: Path, seed: int) -> list[str]:
    """The workload, driven by steps from this thread; returns what it saw (no wall-clock figure in it)."""
    clock = ManualClock(T0, pacing="manual")
    trace: list[str] = []
    store = _open(root, "wal-writer", seed, clock)
    try:
        steps = store.runtime.steps()
        store.create_topic("t", 2, TOPIC)
        logs = [store.partition("t", p) for p in range(2)]
        # ack=wal: acknowledged by the local WAL's sync step; ack=s3: by the flush step's publication
        wal_acks = [log.append_async(_batch(p, 0), ack="wal") for p, log in enumerate(logs)]
        s3_acks = [log.append_async(_batch(p, PER_BATCH), ack="s3") for p, log in enumerate(logs)]
        assert steps.drain() and steps.drain()
        assert steps.write_wal() and steps.sync_wal()
        while steps.drain() or steps.write_wal() or steps.sync_wal():
            pass
        assert all(f.done() for f in wal_acks) and not any(f.done() for f in s3_acks)
        clock.advance(100)
        assert steps.flush()  # one WAL object of ~7.5 MiB: direct writes of full staging buffers
        trace.append(f"acks {[f.result(timeout=0).base_offset for f in wal_acks + s3_acks]}")

        clock.advance(60_000)  # segment.ms: the next appends roll their segments
        rolled = [log.append_async(_batch(p, 2 * PER_BATCH)) for p, log in enumerate(logs)]
        while steps.drain() or steps.write_wal() or steps.sync_wal():
            pass
        assert all(f.done() for f in rolled)
        assert sorted(store.runtime.sealer.pending()) == sorted(log.log_id for log in logs)
        assert steps.seal() and steps.seal() and not steps.seal()  # streamed segment uploads, direct writes
        clock.advance(100)
        steps.run_until_idle()
        trace.append(f"segments {[[(s.base_offset, s.sealed) for s in log.segments()] for log in logs]}")

        reader = _open(root, "wal-reader", seed + 1, clock)  # a second process: reads the sealed tier
        try:
            for p in range(2):
                got = read_all(reader.partition("t", p), 0)
                assert len(got) == 3 * PER_BATCH
                trace.append(f"read t/{p} {len(got)} {_digest(got)}")
        finally:
            reader.close()

        clock.advance(90_000)  # past retention.ms for the first segments only
        report = store.run_retention()
        assert report.segments_deleted == 2
        trace.append(f"retention {report.segments_deleted} {report.bytes_deleted}")

        store.create_topic("c", 1, {"cleanup.policy": "compact", "segment.bytes": "300",
                                    "min.cleanable.dirty.ratio": "0.01"})
        compacted = store.partition("c", 0)
        for i in range(12):
            compacted.append([Record(b"k%d" % (i % 3), b"v%d" % i)])  # rolls every few records
        cleaned = store.run_cleaner().cleaned
        assert cleaned is not None and cleaned.records_kept < cleaned.records_read
        trace.append(f"cleaned {cleaned.records_read} {cleaned.records_kept}")

        clock.advance(10_000)  # past the grace periods
        garbage = store.collect_garbage()
        assert garbage.count() >= 2
        trace.append(f"gc {garbage.summary()}")
        for p, log in enumerate(logs):
            trace.append(f"after t/{p} {log.log_start_offset} {_digest(read_all(log))}")
        trace.append(f"after c {[(r.key, r.value) for r in read_all(compacted)]}")
    finally:
        store.close()
    bucket = LocalObjectStore(root / "bucket", clock=clock)
    trace.extend(f"object {e.key} {e.size}" for e in sorted(bucket.list(""), key=lambda e: e.key))
    return trace


def test_a_manual_store_starts_no_thread(tmp_path: Path, thread_log: ThreadLog) -> None:
    first = _workload(tmp_path / "a", seed=11)
    assert thread_log.started == [] and thread_log.submitted == []
    ours = threading.current_thread().name
    assert {name for name, _ in thread_log.pwrites} == {ours}  # every file write: in this thread
    # the direct-write path ran: full staging buffers were written, inline
    assert any(n == STAGING_BYTES for _, n in thread_log.pwrites)
    # what the threaded mode runs on pools ran inline: the probe's racers, direct writes, manifest probes of
    # sealed-tier reads, their ranged fetches and read-ahead, the cleaner's decodes and output uploads
    assert {"_probe_race.<locals>.attempt", "FileWriter._write_staged", "LogState.manifest",
            "RangedFile._fetch_checked", "read_ahead.<locals>.produce", "_decode",
            "OutputStream._write"} <= thread_log.inline, thread_log.inline
    assert not any(key.startswith("object _probe/") for key in first)  # the probe ran and cleaned up
    assert first == _workload(tmp_path / "b", seed=11)  # one seed, one outcome: keys, sizes, records
    assert thread_log.started == [] and thread_log.submitted == []


@pytest.mark.parametrize("seed", [3, 10_004])
def test_the_simulator_starts_no_thread_and_repeats_itself(seed: int, thread_log: ThreadLog) -> None:
    options = SimOptions(steps=40)
    runs = [run_seed(seed, options) for _ in range(2)]
    assert len(runs[0].trace) > 10  # it ran (whether the seed passes its audit is tests/sim's concern)
    assert runs[0].trace == runs[1].trace and runs[0].failure == runs[1].failure
    assert thread_log.started == [] and thread_log.submitted == []


def test_direct_writes_on_an_inline_executor(tmp_path: Path, thread_log: ThreadLog) -> None:
    """``FileWriter(executor=...)``: full staging buffers are written by the executor (inline: at once, in
    this thread); the file is the same as the I/O threads write."""
    data = random.Random(5).randbytes(3 * STAGING_BYTES + 1234)
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        write_file(fd, data, executor=InlineExecutor())
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == data
    assert "FileWriter._write_staged" in thread_log.inline
    assert thread_log.started == [] and thread_log.submitted == []


def test_the_probe_races_on_an_inline_executor(thread_log: ThreadLog) -> None:
    """The racers of the capability probe run one after another on the executor given: exactly one wins."""
    result = probe_conditional_writes(MemoryObjectStore(), IdSource(0), parallel=8, executor=InlineExecutor())
    assert result.mode == "full" and result.atomic_put_if_absent is True, result.findings
    assert "_probe_race.<locals>.attempt" in thread_log.inline
    assert thread_log.started == [] and thread_log.submitted == []
