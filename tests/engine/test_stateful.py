"""A hypothesis state machine: PartitionLog (append, roll, flush, read, reopen, crash) against a list model."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from pathlib import Path
from typing import Any, ClassVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import s3stream
from s3stream import ManualClock, OffsetOutOfRange, Record
from s3stream.objectstore.memory import MemoryObjectStore

from .helpers import T0, abandon, read_all

_RUNS = itertools.count()

_records = st.lists(
    st.builds(Record,
              key=st.one_of(st.none(), st.binary(max_size=6)),
              value=st.one_of(st.none(), st.binary(max_size=40)),
              timestamp=st.one_of(st.none(), st.integers(T0 - 1000, T0 + 1000)),
              headers=st.lists(st.tuples(st.sampled_from(["a", "b"]), st.binary(max_size=3)), max_size=2)),
    min_size=1, max_size=5)


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.name = f"engine-stateful-{next(_RUNS)}"
        self.dir = Path(tempfile.mkdtemp(prefix="s3stream-stateful-"))
        self.clock = ManualClock(T0)
        self.model: list[Record] = []
        self.node = 0
        self.store = self._open()
        self.store.create_topic("t", config={"segment.bytes": 200, "segment.ms": 500})
        self.log = self.store.partition("t", 0)

    OPTIONS: ClassVar[dict[str, Any]] = {"flush_interval_ms": 20, "wal_file_bytes": 1024}

    def _open(self) -> s3stream.Store:
        return s3stream.open_store(f"memory://{self.name}", clock=self.clock, probe=False,
                                   wal_dir=str(self.dir / f"wal{self.node}"), wal_fsync=False, **self.OPTIONS)

    @rule(batch=_records)
    def append(self, batch: list[Record]) -> None:
        res = self.log.append(batch)
        assert res.base_offset == len(self.model)
        assert res.last_offset == len(self.model) + len(batch) - 1
        now = self.clock.now_ms()
        self.model.extend(Record(r.key, r.value, now if r.timestamp is None else r.timestamp, r.headers)
                          for r in batch)

    @rule(ms=st.integers(0, 400))
    def tick(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule()
    def roll(self) -> None:
        self.log.roll()
        segs = self.log.segments()
        assert segs[-1].record_count == 0 or not self.model
        assert all(s.sealed for s in segs[:-1])

    @rule()
    def flush(self) -> None:
        self.store.flush()

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = self._open()
        self.log = self.store.partition("t", 0)

    @rule(node=st.integers(0, 2))
    def move(self, node: int) -> None:
        """A clean handover to another node (its own WAL directory, maybe with leftovers)."""
        self.store.close()
        self.node = node
        self.store = self._open()
        self.log = self.store.partition("t", 0)

    @rule(node=st.integers(0, 2))
    def die_and_move(self, node: int) -> None:
        """Flush, die without closing, and let another node take over from the bucket alone."""
        self.store.flush()
        abandon(self.store)
        self.node = node
        self.store = self._open()
        self.log = self.store.partition("t", 0)

    @rule()
    def crash(self) -> None:
        abandon(self.store)
        self.store = self._open()
        self.log = self.store.partition("t", 0)

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(0, len(self.model)))
        max_records = data.draw(st.one_of(st.none(), st.integers(1, 7)))
        got = self.log.read(offset, max_records=max_records)
        want = self.model[offset:offset + (max_records or len(self.model))]
        assert got == want[:len(got)]
        assert [r.offset for r in got] == list(range(offset, offset + len(got)))
        assert len(got) == len(want) or (offset < len(self.model) and got)

    @rule()
    def read_out_of_range(self) -> None:
        try:
            self.log.read(len(self.model) + 1)
        except OffsetOutOfRange:
            return
        raise AssertionError("read past the log end must raise OffsetOutOfRange")

    @invariant()
    def offsets(self) -> None:
        assert self.log.log_end_offset == len(self.model)
        assert self.log.log_start_offset == 0

    def teardown(self) -> None:
        try:
            if self.model:
                got = read_all(self.log, 0)
                assert got == self.model
                assert [r.offset for r in got] == list(range(len(self.model)))
            self.store.close()
            with s3stream.open_store(f"memory://{self.name}", clock=self.clock, probe=False,
                                     wal_dir=str(self.dir / "reader")) as reader:
                assert read_all(reader.partition("t", 0), 0) == self.model
        finally:
            MemoryObjectStore.drop_namespace(self.name)
            shutil.rmtree(self.dir, ignore_errors=True)


class TightLogMachine(LogMachine):
    """ack=s3, a tail cache too small to hold anything (reads go to WAL objects), tiny WAL files (trims)."""

    OPTIONS: ClassVar[dict[str, Any]] = {"flush_interval_ms": 2, "ack": "s3", "cache_bytes": 300,
                                         "wal_file_bytes": 512}


LogMachine.TestCase.settings = settings(max_examples=20, stateful_step_count=30, deadline=None,
                                        derandomize=True, suppress_health_check=[HealthCheck.too_slow])
TightLogMachine.TestCase.settings = settings(max_examples=8, stateful_step_count=30, deadline=None,
                                             derandomize=True, suppress_health_check=[HealthCheck.too_slow])
TestPartitionLog = LogMachine.TestCase
TestPartitionLogTight = TightLogMachine.TestCase
