"""One seeded simulation run: the world, the actions chosen from the seed, the audit after every step.

:func:`run_seed` builds a world from the seed (a manual clock, a bucket, the processes' disks, store settings
and topics drawn from the seed), then runs ``steps`` actions, each chosen by the seed's generator from what
is possible at that moment, each followed by the audit; then a final phase heals every fault, restarts
everything cleanly, runs GC past every grace period and audits again, from the writer and from a fresh
reader of the bucket. Everything that happened is in the trace, one line per step, whose hash two runs of
the same seed must share.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import tempfile
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pyarrow as pa

from s3stream.base.clock import ManualClock
from s3stream.base.crashpoints import SimulatedCrash
from s3stream.base.errors import (
    BufferFull,
    CorruptData,
    Fenced,
    InternalError,
    LocalWalCorrupt,
    LocalWalFull,
    LocalWalUnavailable,
    OutOfOrderSequence,
    ProducerFenced,
    S3StreamError,
)
from s3stream.base.producer import ProducerBatch
from s3stream.base.records import HEADER_TYPE, AppendResult, Record
from s3stream.format.segment.reader import SegmentReader
from s3stream.maintenance.retention import run_retention_pass
from s3stream.manifest.model import SegmentRef
from s3stream.manifest.topicdoc import TopicDoc
from s3stream.objectstore.fetch import ranged_fetch
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.partition.log import PartitionLog
from s3stream.store import Store
from s3stream.testing.faults import FaultRule
from s3stream.testing.latency import LATENCY_PROFILES, LatencyProfile
from s3stream.testing.sim.bucket import BucketObserver, Grace
from s3stream.testing.sim.disk import SimDisks
from s3stream.testing.sim.model import Append, AuditFailure, PartModel, Row, SimRecord
from s3stream.testing.sim.process import SimProcess, derive
from s3stream.testing.sim.producers import SimProducer, must_dedupe
from s3stream.testing.sim.reading import read_all, table_rows
from s3stream.testing.sim.setup import ALTERS, SimRandom, SimTopic, store_settings, topics

__all__ = ["CRASH_POINTS", "SimOptions", "SimResult", "repro_command", "run_seed"]

T0 = 1_700_000_000_000
T = TypeVar("T")

#: Every named crash point of the engine (s3stream.base.crashpoints).
CRASH_POINTS = (
    "flush.before_put", "flush.after_put", "flush.before_trim", "seal.after_segment_put",
    "seal.after_manifest_commit", "manifest.before_put", "manifest.after_put", "clean.output_put",
    "clean.after_outputs_put", "clean.after_swap", "retention.after_commit", "gc.after_delete",
)

#: Crash points only a maintenance pass (or a flush) reaches, with that pass: armed at
#: random they fire a few times per thousand seeds, so an action arms one and runs its pass at once.
_RARE_POINTS = (("clean.output_put", "clean"), ("clean.after_outputs_put", "clean"), ("clean.after_swap", "clean"),
                ("retention.after_commit", "retention"), ("gc.after_delete", "gc"), ("flush.before_trim", "flush"))

#: How stale a writer's view of its manifest may be (s3stream.partition.state re-reads it at least this often).
_WRITER_MANIFEST_MAX_AGE_S = 1.0

#: Actions after which the audit reads every partition whole through the engine (and every tenth step).
_STRUCTURAL = frozenset({"retention", "clean", "gc", "delete records", "restart", "kill", "open", "close", "roll",
                         "add partitions", "recreate topic"})

#: Actions that run nothing of a store: the audit needs no read after them.
_NO_PARTITION = frozenset({"tick", "jump", "skew", "faults", "disk", "arm", "producer"})

#: Outcomes no fault the simulation injects explains: the store reported a bug or damage of its own making.
_BUGS = (InternalError, CorruptData)


@dataclass(frozen=True, slots=True)
class SimOptions:
    """What a run may do (the CLI's and the tests' knobs); the rest comes from the seed."""

    steps: int = 120
    object_faults: bool = True
    disk_faults: bool = True
    crashes: bool = True
    fencing: bool = True


@dataclass(slots=True)
class SimResult:
    """The outcome of one seed."""

    seed: int
    options: SimOptions
    ok: bool
    trace: list[str]
    failure: str | None = None
    stats: dict[str, int] = field(default_factory=dict)

    @property
    def trace_hash(self) -> str:
        return hashlib.sha256("\n".join(self.trace).encode()).hexdigest()[:16]

    @property
    def repro(self) -> str:
        return repro_command(self.seed, self.options)


def repro_command(seed: int, options: SimOptions) -> str:
    """The one-line command that runs ``seed`` again, verbosely."""
    flags = [f"--steps {options.steps}"]
    for name, flag in (("object_faults", "--no-object-faults"), ("disk_faults", "--no-disk-faults"),
                       ("crashes", "--no-crashes"), ("fencing", "--no-fencing")):
        if not getattr(options, name):
            flags.append(flag)
    return f"python -m s3stream.sim --seeds 1 --start {seed} {' '.join(flags)} --trace"


def run_seed(seed: int, options: SimOptions | None = None, *, workdir: Path | None = None) -> SimResult:
    """Run the simulation of ``seed`` (see the module docstring)."""
    options = options or SimOptions()
    with _quiet(), tempfile.TemporaryDirectory(prefix=f"s3sim-{seed}-", dir=workdir) as tmp:
        sim = Simulation(seed, options, Path(tmp))
        try:
            sim.run()
        except AuditFailure as exc:
            return sim.result(failure=str(exc))
        except Exception as exc:  # noqa: BLE001 - any other escape is a finding too, with its traceback
            return sim.result(failure=f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        finally:
            sim.teardown()
        return sim.result()


@contextmanager
def _quiet() -> Iterator[None]:
    """The engine logs every injected fault as a warning: thousands per run. Keep the output for failures."""
    logger = logging.getLogger("s3stream")
    cleaner = logging.getLogger("cleaner")
    wal_log = logging.getLogger("wal")
    levels = [(lg, lg.level) for lg in (logger, cleaner, wal_log)]
    for lg, _ in levels:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in levels:
            lg.setLevel(level)


# -- the simulation ------------------------------------------------------------------------------------------


class Simulation:
    """The world of one seed and its run (see the module docstring)."""

    def __init__(self, seed: int, options: SimOptions, workdir: Path) -> None:
        self.seed = seed
        self.options = options
        self.rng = SimRandom(derive(seed, "actions"))
        setup = SimRandom(derive(seed, "setup"))
        self.settings = store_settings(setup)
        self.topics = topics(setup)
        latency: LatencyProfile | None = None
        if setup.random() < 0.3:
            latency = LATENCY_PROFILES[setup.choice(["lan", "s3-express", "s3-standard"])]
        self.clock = ManualClock(T0, pacing="manual")
        delays = {t.name: int(t.config["file.delete.delay.ms"]) for t in self.topics}
        self._delays_by_name = delays
        self.grace = Grace(self.settings["orphan_min_age_ms"], self.settings["manifest_min_age_ms"], {})
        self.observer = BucketObserver(MemoryObjectStore("", clock=self.clock), self.clock, self.grace,
                                       on_claim=self._on_claim)
        self.disks = SimDisks()
        self.procs = {name: SimProcess(name, seed=seed, workdir=workdir, clock=self.clock, bucket=self.observer,
                                       disks=self.disks, settings=self.settings, latency=latency)
                      for name in ("A", "B")}
        # the auditor's own process: it never writes, so it sees what the bucket holds
        self.reader = SimProcess("R", seed=seed, workdir=workdir, clock=self.clock, bucket=self.observer,
                                 disks=self.disks, settings=self.settings, latency=None)
        self.parts: dict[tuple[str, int], PartModel] = {}
        self.producers: dict[tuple[str, int], list[SimProducer]] = {}
        self._retries: dict[int, tuple[SimProducer, bool]] = {}  # retry aid -> its producer, must it dedupe
        self._append_part: dict[int, PartModel] = {}  # aid -> its partition's model (a topic may be recreated)
        self.by_prefix: dict[str, PartModel] = {}
        self.configs = {t.name: dict(t.config) for t in self.topics}
        self.topic_ids: dict[str, str] = {}  # topic name -> its live incarnation's id
        self.models: dict[tuple[str, int], PartModel] = {}  # (topic id, partition) -> its model, dead ones too
        self.trace: list[str] = [f"seed {seed} settings {sorted(self.settings.items())} "
                                 f"latency {None if latency is None else latency.name}",
                                 f"topics {[(t.name, t.partitions, sorted(t.config.items())) for t in self.topics]}"]
        self.problems: list[str] = []  # found inside callbacks (which must not raise): reported after the step
        self.rules: list[FaultRule] = []
        self.outage_left = 0
        self.disk_full_left = 0
        self.read_only_left = 0
        self.next_aid = 0
        self.step_no = 0
        self.stats: dict[str, int] = {}
        self._segments: dict[str, list[Row]] = {}  # segment key -> its records (objects are immutable)
        self._full = True  # the next audit reads everything through the engine
        self._touched: set[tuple[str, int]] | None = None  # the partitions the step may have changed (None: all)

    # -- results ---------------------------------------------------------------------------------------------

    def result(self, failure: str | None = None) -> SimResult:
        if failure is not None:
            self.trace.append(f"FAILED: {failure.splitlines()[0]}")
        return SimResult(self.seed, self.options, failure is None, self.trace, failure, dict(self.stats))

    def count(self, what: str, n: int = 1) -> None:
        self.stats[what] = self.stats.get(what, 0) + n

    # -- setup, run, finish --------------------------------------------------------------------------------

    def run(self) -> None:
        a = self.procs["A"]
        self._open(a)
        store = self._store(a)
        self.reader.open([])
        for t in self.topics:
            store.create_topic(t.name, t.partitions, t.config)
            self._register(t, store.topic_id(t.name), range(t.partitions))
        for step in range(1, self.options.steps + 1):
            self.step_no = step
            self._step()
        self._finish()

    def _register(self, t: SimTopic, topic_id: str, indexes: range) -> None:
        """Model partitions ``indexes`` of topic ``t`` (whose incarnation is ``topic_id``): new, empty."""
        self.grace.file_delete_delay_ms[topic_id] = int(self.configs[t.name]["file.delete.delay.ms"])
        self.topic_ids[t.name] = topic_id
        for i in indexes:
            part = PartModel(t.name, i, compact=t.compact, delete=t.delete)
            self.parts[(t.name, i)] = part
            self.models[(topic_id, i)] = part
            self.producers[(t.name, i)] = [SimProducer(pid) for pid in (1, 2)]
            part.prefix = f"logs/{topic_id}/{i}/"
            self.by_prefix[part.prefix] = part

    def teardown(self) -> None:
        """Drop whatever is still open (quietly: the run's outcome is decided)."""
        for proc in [*self.procs.values(), self.reader]:
            store, proc.store = proc.store, None
            if store is not None:
                try:
                    store.close()
                except (S3StreamError, SimulatedCrash, OSError):
                    pass

    def _finish(self) -> None:
        """Heal everything, restart cleanly, GC past every grace period, and audit from a fresh reader too."""
        self.rules = []
        self.outage_left = self.disk_full_left = self.read_only_left = 0
        self.disks.full = self.disks.read_only = False
        self.disks.repair()
        self.disks.failing_fsyncs = 0
        for proc in self.procs.values():
            proc.crash.disarm()
            if proc.faulty is not None:
                proc.faulty.set_rules([])
        self.step_no += 1
        for name in ("B", "A"):
            proc = self.procs[name]
            if proc.alive:
                self._act(proc, "final close", functools.partial(self._close, proc))
        b = self.procs["B"]
        if b.incarnation:  # what only its local WAL holds (of partitions it still owns) reaches the bucket
            self._act(b, "final reopen", lambda: self._open(b))
            self._act(b, "final flush", lambda: self._store(b).flush())
            self._act(b, "final close", lambda: self._close(b))
        a = self.procs["A"]
        self._act(a, "final reopen", lambda: self._open(a))  # replays and uploads what the local WAL kept
        self._act(a, "final flush", lambda: self._store(a).flush())
        self._audit("final, writer")
        self.clock.advance(10 * max(60_000, *self._delays_by_name.values(), self.settings["orphan_min_age_ms"],
                                    self.settings["manifest_min_age_ms"]))
        self._act(a, "final gc", lambda: self._gc(a))
        self._act(a, "final close", lambda: self._close(a))
        self.reader.close()
        self.reader.open([])
        self._audit("final, fresh reader", reader=self.reader)
        for proc in self.procs.values():
            for kind, n in proc.faults_injected().items():
                self.count(f"fault:{kind}", n)
        for kind, n in self.disks.injected.items():
            self.count(f"disk:{kind}", n)
        self.trace.append(f"end stats {sorted(self.stats.items())}")

    # -- one step ----------------------------------------------------------------------------------------------

    def _step(self) -> None:
        self._expire_faults()
        name, action = self._choose()
        proc = self.procs["B" if name.startswith("B:") else "A"]
        label = name.removeprefix("B:")
        self._full = self.step_no % 10 == 0 or label in _STRUCTURAL
        self._touched = set() if label.split(" ")[0] in _NO_PARTITION else None
        self.count(f"action:{label}")
        self._act(proc, label, action)
        self._audit(f"after {name}", full=self._full, only=None if self._full else self._touched)

    def _act(self, proc: SimProcess, label: str, action: Callable[[], str | None]) -> None:
        """Run one action of ``proc``; its outcome (or error, or crash) goes into the trace."""
        try:
            outcome = action() or "ok"
        except SimulatedCrash as exc:
            outcome = f"crash at {exc.point}"
        except S3StreamError as exc:
            outcome = f"error {type(exc).__name__}"
            self._learn(proc, exc)
            if isinstance(exc, _BUGS):
                raise AuditFailure(f"step {self.step_no}: {proc.name}#{proc.incarnation} {label} raised "
                                   f"{type(exc).__name__}: {exc}") from exc
        except RuntimeError as exc:
            if "background work still due" not in str(exc):
                raise
            outcome = "still due"
        if proc.alive and proc.crash.crashed:
            if "crash at" not in outcome:  # a crash point inside an upload stops the node, not the call
                outcome += f"; crashed at {proc.crash.fired}"
            outcome += self._die(proc, crashed=True)
        if "crash at" in outcome or "died" in outcome:
            self._full = True
        proc.note_node()
        self.trace.append(f"{self.step_no} {proc.name}#{proc.incarnation} {label} -> {outcome} "
                          f"@{self.clock.now_ms() - T0}")

    def _learn(self, proc: SimProcess, exc: BaseException) -> None:
        """What an error tells the process about itself (an operator would restart it on these). A ``Fenced``
        means the node was fenced when its uploads stopped for it (a partition-level one, a commit that met a
        newer writer epoch of one partition, leaves the node writing the others and claiming that one back)."""
        if isinstance(exc, Fenced):
            node = None if proc.store is None else proc.store.runtime.existing_node()
            proc.fenced = proc.fenced or (node is not None and node.uploader.fenced)
        elif isinstance(exc, LocalWalUnavailable) and not isinstance(exc, LocalWalFull):
            proc.wal_failed = True

    def _die(self, proc: SimProcess, *, crashed: bool) -> str:
        """``proc`` dies (a fired crash point, or a kill); it is started again at once, as a supervisor would."""
        power_loss = self.options.disk_faults and self.rng.random() < 0.5
        if crashed:
            self.count(f"crash_point:{proc.crash.fired}")
        for append in proc.kill(power_loss=power_loss, seed=derive(self.seed, "torn", self.step_no)):
            if append.status == "pending":
                append.status = "unknown"
        for part in self.parts.values():
            part.leo_may_drop = True
        self.count("crashes" if crashed else "kills")
        if power_loss:
            self.count("power_losses")
        flipped = None
        if self.options.disk_faults and self.rng.random() < 0.15:
            flipped = self.disks.flip(proc.root, derive(self.seed, "flip", self.step_no))
        died = f"; died{' (power loss)' if power_loss else ''}"
        if flipped is not None:
            return f"{died}; flipped {flipped}; restart: {self._open_damaged(proc)}"
        return f"{died}; restart: {self._restart_after_death(proc)}"

    def _open_damaged(self, proc: SimProcess) -> str:
        """Open over a WAL with a flipped byte in the middle: a typed refusal that changes nothing on the disk
        (then the operator repairs the byte and the open goes through), or an open that did not need the
        damaged frame (the audit then checks that nothing acknowledged was skipped)."""
        before = self.disks.snapshot(proc.root)
        try:
            proc.open([])
        except LocalWalCorrupt as exc:
            self.count("wal_damage_refused")
            if self.disks.snapshot(proc.root) != before:
                self.problems.append(f"{proc.name}: an open refused over a damaged WAL changed its files")
            self.disks.repair()
            return f"refused {type(exc).__name__}; repaired: {self._restart_after_death(proc)}"
        except S3StreamError as exc:
            self.disks.repair()
            if isinstance(exc, _BUGS):
                self.problems.append(f"{proc.name}: an open over a damaged WAL raised {type(exc).__name__}: {exc}")
            return f"error {type(exc).__name__}"
        self.count("opens")
        self.count("wal_damage_not_needed")
        self.disks.repair()
        return "ok (the damaged frame was not needed)"

    def _restart_after_death(self, proc: SimProcess) -> str:
        try:
            self._open(proc)
        except SimulatedCrash as exc:  # pragma: no cover - a fresh incarnation's points are not armed
            return f"crash at {exc.point}"
        except S3StreamError as exc:
            if isinstance(exc, _BUGS):
                self.problems.append(f"{proc.name}: reopen raised {type(exc).__name__}: {exc}")
            return f"error {type(exc).__name__}"
        return "ok"

    def _open(self, proc: SimProcess) -> str:
        """Open a new incarnation of ``proc``; with faults on it may fail, so the last tries go without them."""
        for attempt in range(4):
            rules = self.rules if attempt < 2 else []
            try:
                proc.open(rules)
                self.count("opens")
                return "ok" if attempt == 0 else f"ok after {attempt} failed opens"
            except S3StreamError as exc:
                if isinstance(exc, _BUGS) or attempt == 3:
                    raise
        raise AssertionError("unreachable")

    def _close(self, proc: SimProcess) -> str:
        try:
            proc.close()
        finally:
            for append in proc.pending:  # settled at close if at all; what is left stays in the local WAL
                if append.status == "pending":
                    append.status = "unknown"
            proc.pending.clear()
        if proc.crash.crashed:  # a crash point inside the close's uploads: the process died while closing
            point = proc.crash.fired
            proc.kill(power_loss=False, seed=0)  # its WAL handles go (and their lock) as in any death
            proc.parked = True  # what only its local WAL holds comes back when it opens again
            self.count(f"crash_point:{point}")
            self.count("crashes")
            return f"crashed at {point} while closing"
        return "closed"

    # -- choosing an action ------------------------------------------------------------------------------------

    def _choose(self) -> tuple[str, Callable[[], str]]:
        a, b = self.procs["A"], self.procs["B"]
        o = self.options
        choices: list[tuple[float, str, Callable[[], str]]] = []

        def add(weight: float, name: str, fn: Callable[[], str]) -> None:
            if weight > 0:
                choices.append((weight, name, fn))

        quiet = self.outage_left == 0  # blocking calls that wait for the bucket only when it answers
        if a.alive:
            self._process_actions(a, "", add, quiet=quiet)
        else:  # its last open failed (a read-only disk, say): the supervisor tries again
            add(3, "open", lambda: self._open(a))
        if o.fencing:
            if b.alive:
                self._process_actions(b, "B:", add, quiet=quiet, weight=0.25)
                add(0.6, "B:close", lambda: self._close(b))
                if o.crashes:
                    add(0.3, "B:kill", lambda: self._kill(b))
            else:
                add(0.8, "B:open", lambda: self._open(b))
        add(0.3, "producer epoch", self._bump_epoch)
        add(8, "tick", self._tick)
        add(1.5, "jump", self._jump)
        add(0.3, "skew", self._skew)
        if o.object_faults:
            add(2 if not self.rules else 0, "faults flaky", self._flaky)
            add(0.7 if not self.rules else 0, "faults outage", self._outage)
            add(2 if self.rules and not self.outage_left else 0, "faults off", self._faults_off)
        if o.disk_faults:
            add(0.6 if not self.disks.full else 0, "disk full", self._disk_full)
            add(0.3, "disk fsync failure", self._fsync_failure)
            add(0.25 if not self.disks.read_only else 0, "disk read-only", self._read_only)
        total = sum(w for w, _, _ in choices)
        pick = self.rng.random() * total
        for weight, name, fn in choices:
            pick -= weight
            if pick < 0:
                return name, fn
        return choices[-1][1], choices[-1][2]

    def _process_actions(self, p: SimProcess, prefix: str, add: Callable[[float, str, Callable[[], str]], None],
                         *, quiet: bool, weight: float = 1.0) -> None:
        o = self.options
        w = weight
        add(28 * w, f"{prefix}append", lambda: self._append(p, blocking=False))
        add(5 * w, f"{prefix}append blocking", lambda: self._append(p, blocking=True))
        add(3 * w, f"{prefix}append arrow", lambda: self._append(p, blocking=self.rng.random() < 0.3, arrow=True))
        add(6 * w, f"{prefix}produce", lambda: self._append(p, blocking=self.rng.random() < 0.3,
                                                           arrow=self.rng.random() < 0.5, produce=True))
        if any(x.sent for prods in self.producers.values() for x in prods):
            add(4 * w, f"{prefix}produce retry", lambda: self._retry(p))
        add(9 * w, f"{prefix}drain", lambda: self._engine_step(p, "drain"))
        add(6 * w, f"{prefix}wal write", lambda: self._engine_step(p, "write_wal"))
        add(8 * w, f"{prefix}wal sync", lambda: self._engine_step(p, "sync_wal"))
        add(8 * w, f"{prefix}flush step", lambda: self._engine_step(p, "flush"))
        add(5 * w, f"{prefix}seal step", lambda: self._engine_step(p, "seal"))
        add(1 * w, f"{prefix}resume wal", lambda: self._engine_step(p, "resume_wal"))
        add(4 * w, f"{prefix}idle", lambda: self._engine_step(p, "run_until_idle"))
        add(2 * w if quiet else 0, f"{prefix}flush", lambda: self._blocking(p, "flush"))
        add(1.5 * w, f"{prefix}roll", lambda: self._roll(p))
        add(2.5 * w, f"{prefix}retention", lambda: self._retention(p, flush=quiet and self.rng.random() < 0.3))
        add(2.5 * w, f"{prefix}clean", lambda: self._clean(p, flush=quiet and self.rng.random() < 0.3))
        add(2 * w, f"{prefix}gc", lambda: self._gc(p))
        add(1 * w, f"{prefix}delete records", lambda: self._delete_records(p))
        add(0.7 * w, f"{prefix}alter config", lambda: self._alter(p))
        add(0.3 * w, f"{prefix}add partitions", lambda: self._add_partitions(p))
        add(0.25 * w, f"{prefix}recreate topic", lambda: self._recreate(p))
        add(0.8 * w, f"{prefix}restart", lambda: self._restart(p))
        if p.fenced or p.wal_failed:
            add(15 * w, f"{prefix}restart", lambda: self._restart(p))  # as an operator would
        if o.crashes:
            add(1.2 * w, f"{prefix}kill", lambda: self._kill(p))
            add(1.5 * w, f"{prefix}arm crash", lambda: self._arm(p))
            add(1.2 * w, f"{prefix}crash during", lambda: self._crash_during(p, quiet=quiet))

    # -- workload ------------------------------------------------------------------------------------------------

    def _store(self, p: SimProcess) -> Store:
        assert p.store is not None, f"process {p.name} is not running"
        return p.store

    def _records(self, part: PartModel, aid: int, n: int) -> tuple[list[SimRecord], list[Record]]:
        """``n`` new records for ``part`` (each named by its ``sim`` header), as the model and the API see them."""
        now = self.clock.now_ms()
        recs: list[SimRecord] = []
        records: list[Record] = []
        for i in range(n):
            ident = f"a{aid}.{i}"
            if part.compact:
                k: bytes | None = b"k%d" % self.rng.randrange(6)
            else:
                k = None if self.rng.random() < 0.5 else b"x%d" % self.rng.randrange(1000)
            tombstone = part.compact and self.rng.random() < 0.12
            ts = now - self.rng.choice([0, 0, 0, 5, 700])
            value = None if tombstone else f"{ident}:".encode() * self.rng.choice([1, 4, 30])
            recs.append(SimRecord(ident, k, tombstone, ts))
            records.append(Record(k, value, ts, [("sim", ident.encode())]))
        return recs, records

    def _new_aid(self) -> int:
        aid = self.next_aid
        self.next_aid += 1
        return aid

    def _append(self, p: SimProcess, *, blocking: bool, arrow: bool = False, produce: bool = False) -> str:
        key = self.rng.choice(sorted(self.parts))
        plog = p.partition(*key)
        part = self._model_of(plog)  # a process that still sees a deleted incarnation writes there
        n = self.rng.choice([1, 1, 2, 3, 5, 12])
        ack = self.rng.choice(["wal", "s3", None])
        aid = self._new_aid()
        recs, records = self._records(part, aid, n)
        batch: ProducerBatch | None = None
        producer: SimProducer | None = None
        if produce:
            producer = self.rng.choice(self.producers[key])
            if len(producer.sent) >= 3 and all(a.status == "refused" for a in producer.sent[-3:]):
                producer.bump()  # as a Kafka producer does after OutOfOrderSequence (KIP-360)
            batch = producer.next_batch(n)
        append = Append(aid, p.name, p.incarnation, key, ack or self.settings["ack"], recs, producer=batch)
        part.add(append)
        if producer is not None:
            producer.sent.append(append)
        what = f"a{aid} {part.name} n={n} ack={ack or 'default'}{' arrow' if arrow else ''}"
        if batch is not None:
            what += f" producer {batch.producer_id}/{batch.producer_epoch} seq {batch.base_sequence}"
        return self._submit(plog, p, part, append, records, ack, blocking=blocking, arrow=arrow, what=what)

    def _model_of(self, plog: PartitionLog) -> PartModel:
        """The model of the incarnation ``plog`` writes (a process may see a deleted one for a while)."""
        part = self.models[(plog.topic_id, plog.partition)]
        if part is not self.parts.get((plog.topic, plog.partition)):
            self.count("stale_topic_writes")
        return part

    def _retry(self, p: SimProcess) -> str:
        """A producer resends one of its recent batches (the same records)."""
        key = self.rng.choice(sorted(k for k, prods in self.producers.items() if any(x.sent for x in prods)))
        part = self.parts[key]
        producer = self.rng.choice([x for x in self.producers[key] if x.sent])
        original = self.rng.choice(producer.retriable())
        assert original.producer is not None
        plog = p.partition(*key)
        if self._append_part.get(original.aid) is not part or self._model_of(plog) is not part:
            return f"a{original.aid}: another incarnation of {part.name}, not resent"
        if any(r.ident in part.gone for r in original.records):
            return f"a{original.aid}: removed since (retention, compaction), not resent"
        expected = must_dedupe(producer, original, part)
        part.retried(original)
        ack = self.rng.choice(["wal", "s3", None])
        retry = Append(self._new_aid(), p.name, p.incarnation, key, ack or self.settings["ack"], original.records,
                       producer=original.producer, retry_of=original)
        self._retries[retry.aid] = (producer, expected)
        records = [Record(r.key, None if r.tombstone else f"{r.ident}:".encode(), r.timestamp,
                          [("sim", r.ident.encode())]) for r in original.records]
        # the value differs from the original's (its length was drawn): the log must keep the original's
        batch = original.producer
        what = (f"a{retry.aid} retry of a{original.aid} ({original.status}) {part.name} ack={ack or 'default'} "
                f"producer {batch.producer_id}/{batch.producer_epoch} seq {batch.base_sequence}"
                f"{' must dedupe' if expected else ''}")
        return self._submit(plog, p, part, retry, records, ack, blocking=self.rng.random() < 0.3,
                            arrow=self.rng.random() < 0.5, what=what)

    def _bump_epoch(self) -> str:
        key = self.rng.choice(sorted(self.producers))
        producer = self.rng.choice(self.producers[key])
        producer.bump()
        return f"producer {producer.producer_id} of {self.parts[key].name}: epoch {producer.epoch}"

    def _submit(self, plog: PartitionLog, p: SimProcess, part: PartModel, append: Append, records: list[Record],
                ack: str | None, *, blocking: bool, arrow: bool, what: str) -> str:
        """Append ``records`` through the record or the Arrow API, blocking or not; the model learns the outcome."""
        if not blocking and self._touched is None:
            self._touched = {append.part}  # queued only: no step runs
        self._append_part[append.aid] = part
        batch = append.producer
        if blocking:
            try:
                result = (plog.append_arrow(_arrow_table(records), ack=ack, producer=batch) if arrow else
                          plog.append(records, ack=ack, producer=batch))
            except BufferFull:
                append.status, append.outcome = "refused", "BufferFull"
                self._settled_retry(p, append, None)
                return f"{what}: refused BufferFull"
            except S3StreamError as exc:
                append.status, append.outcome = _failed(exc), type(exc).__name__
                self._settled_retry(p, append, None)
                raise
            self._acked(p, p.incarnation, append, result)
            return f"{what}: acked at {result.base_offset}"
        try:
            future = (plog.append_arrow_async(_arrow_table(records), ack=ack, producer=batch) if arrow else
                      plog.append_async(records, ack=ack, producer=batch))
        except S3StreamError as exc:
            append.status, append.outcome = "refused", type(exc).__name__
            self._settled_retry(p, append, None)
            raise
        p.pending.append(append)
        future.add_done_callback(functools.partial(self._resolved, p, p.incarnation, append))
        return f"{what}: {'acked' if future.done() and future.exception() is None else 'queued'}"

    def _resolved(self, p: SimProcess, incarnation: int, append: Append, future: Future[AppendResult]) -> None:
        """An async append's future settled (in whichever step settled it)."""
        if append.status != "pending":
            return
        if append in p.pending:
            p.pending.remove(append)
        error = future.exception()
        if error is not None:
            append.status, append.outcome = _failed(error), type(error).__name__
            self._settled_retry(p, append, None)
            if p.incarnation == incarnation:
                self._learn(p, error)
            if isinstance(error, _BUGS):
                self.problems.append(f"append a{append.aid} failed with {type(error).__name__}: {error}")
            return
        self._acked(p, incarnation, append, future.result())

    def _settled_retry(self, p: SimProcess, append: Append, result: AppendResult | None) -> None:
        """A producer's retry settled (``result`` None: refused or failed). One the log must deduplicate must
        get its original's offsets; a typed refusal of it is a finding."""
        known = self._retries.pop(append.aid, None)
        original = append.retry_of
        if known is None or original is None:
            return
        producer, expected = known
        part = self._append_part[append.aid]
        self.trace.append(f"  retry a{append.aid} of a{original.aid}: "
                          f"{append.outcome if result is None else f'acked at {result.base_offset}'}")
        # still (no crash or takeover since), and from the partition's writer (a node that has not learned yet
        # that another took the partition over serves its own stale producer state: its acks are replaced)
        expected = expected and must_dedupe(producer, original, part) and part.writer == append.proc
        if result is None:
            if expected and append.outcome in ("OutOfOrderSequence", "ProducerFenced"):
                self.problems.append(f"{p.name}: retry a{append.aid} of the acknowledged a{original.aid} (at "
                                     f"{original.base}, among its producer's last batches) refused with "
                                     f"{append.outcome}")
            return
        where = part.must.get(original.records[0].ident)  # the original's, or an earlier retry's that wrote it
        if expected and result.base_offset != where:
            self.problems.append(f"{p.name}: retry a{append.aid} of a{original.aid} acknowledged at "
                                 f"{result.base_offset}, the original's records are at {where}")
        if where is not None and result.base_offset == where:
            self.count("producer_dedupes")
            if append.ack == "s3" and original.ack == "wal":
                original.ack = "s3"  # the retry's ack=s3 promises the original's records are in the bucket

    def _acked(self, p: SimProcess, incarnation: int, append: Append, result: AppendResult) -> None:
        part = self._append_part.get(append.aid) or self.parts[append.part]
        if append.retry_of is not None:
            self._settled_retry(p, append, result)
            part.retried(append.retry_of)  # a takeover since it was sent may have let its records go
        if p.incarnation == incarnation and p.fenced:
            self.problems.append(f"{p.name}#{incarnation} acknowledged append a{append.aid} ({append.ack}) at "
                                 f"{result.base_offset} after it learned it was fenced")
        if result.last_offset - result.base_offset + 1 != len(append.records):
            self.problems.append(f"append a{append.aid} of {len(append.records)} records acknowledged as "
                                 f"{result.base_offset}..{result.last_offset}")
        self.count("acked_records", len(append.records))
        try:
            part.acked(append, result.base_offset)
        except AuditFailure as exc:
            self.problems.append(str(exc))

    def _on_claim(self, prefix: str, node_id: str, next_offset: int) -> None:
        part = self.by_prefix.get(prefix)
        if part is None:
            return
        owner = next((p.name for p in self.procs.values() if node_id in p.node_ids or (
            p.store is not None and p.store.node_id == node_id)), None)
        if owner is None:
            self.problems.append(f"{part.name} claimed by an unknown node {node_id}")
            return
        self.count("claims")
        part.claim(owner, next_offset)

    # -- background work and maintenance ---------------------------------------------------------------------------

    def _engine_step(self, p: SimProcess, name: str) -> str:
        steps = self._store(p).runtime.steps()
        if name == "run_until_idle":
            return f"{steps.run_until_idle(max_steps=500)} steps"
        did: bool = getattr(steps, name)()
        return "did" if did else "idle"

    def _blocking(self, p: SimProcess, name: str) -> str:
        getattr(self._store(p), name)()
        return "ok"

    def _roll(self, p: SimProcess) -> str:
        key = self.rng.choice(sorted(self.parts))
        p.partition(*key).roll()
        return f"{self.parts[key].name} rolled"

    def _cutoffs(self) -> None:
        """A retention pass ran: what it may have deleted by time (records older than ``now - retention.ms``)."""
        now = self.clock.now_ms()
        for part in self.parts.values():
            retention = int(self.configs[part.topic].get("retention.ms", "604800000"))
            if part.delete and retention >= 0:
                cutoff = now - retention
                part.retention_cutoff = cutoff if part.retention_cutoff is None else max(part.retention_cutoff,
                                                                                         cutoff)

    def _retention(self, p: SimProcess, *, flush: bool) -> str:
        store = self._store(p)
        try:
            report = store.run_retention() if flush else run_retention_pass(store.runtime)
        finally:
            self._cutoffs()  # at the clock the pass ended at (a request's latency passes time)
        return f"{report.segments_deleted} segments deleted{' (after a flush)' if flush else ''}"

    def _clean(self, p: SimProcess, *, flush: bool) -> str:
        store = self._store(p)
        try:
            report = store.run_cleaner() if flush else store.cleaner.run_pass()
        finally:
            self._cutoffs()
        cleaned = report.cleaned
        return ("nothing to clean" if cleaned is None else
                f"cleaned {cleaned.log_id.split('/')[0]}: {cleaned.records_read}->{cleaned.records_kept}"
                f"{' aborted' if cleaned.aborted else ''}")

    def _gc(self, p: SimProcess) -> str:
        report = self._store(p).collect_garbage()
        return f"{report.count()} deleted"

    def _delete_records(self, p: SimProcess) -> str:
        candidates = sorted(k for k, part in self.parts.items() if part.delete)
        key = self.rng.choice(candidates)
        part = self.parts[key]
        plog = p.partition(*key)
        start, end = plog.log_start_offset, plog.log_end_offset
        target = self.rng.randint(start, max(start, min(end, start + 8)))
        part.deleted_before = max(part.deleted_before, target)
        new_start = plog.delete_records(target)
        return f"{part.name} before {target}: log start {new_start}"

    def _add_partitions(self, p: SimProcess) -> str:
        """Grow a topic by a partition (Kafka's CreatePartitions); the new one starts empty."""
        t = self.rng.choice(self.topics)
        have = sum(1 for (name, _) in self.parts if name == t.name)
        if have >= 4:
            return f"{t.name} has {have} partitions already"
        store = self._store(p)
        try:
            store.add_partitions(t.name, have + 1)
            outcome = f"{t.name} has {have + 1} partitions"
        except S3StreamError as exc:
            outcome = f"{t.name}: error {type(exc).__name__}"
        total = self._catalog_doc(p, t.name).partitions  # what the catalog holds (a lost response may have landed)
        if total > have:
            self._register(t, self.topic_ids[t.name], range(have, total))
        return outcome

    def _recreate(self, p: SimProcess) -> str:
        """Delete a topic and create it again under the same name: the new incarnation starts empty (nothing of
        the old one may turn up in it) and GC takes the old one's objects."""
        t = self.rng.choice(self.topics)
        count = sum(1 for (name, _) in self.parts if name == t.name)
        store = self._store(p)
        old_id = self.topic_ids[t.name]
        try:
            store.delete_topic(t.name)
            store.create_topic(t.name, count, self.configs[t.name])
            outcome = f"{t.name} recreated"
        except S3StreamError as exc:  # as an operator would: finish it with the bucket answering
            outcome = f"{t.name}: error {type(exc).__name__}, finished without faults"
            assert p.faulty is not None
            with p.faulty.paused():
                doc = store.runtime.catalog.load(t.name, refresh=True)
                if doc is not None and not doc.deleted and doc.topic_id == old_id:
                    store.delete_topic(t.name)
                doc = store.runtime.catalog.load(t.name, refresh=True)
                if doc is None or doc.deleted:
                    store.create_topic(t.name, count, self.configs[t.name])
        new_id = self._catalog_doc(p, t.name).topic_id
        self.observer.dead_topic_ids.add(old_id)
        self.grace.file_delete_delay_ms.pop(old_id, None)
        for key in [k for k in self.parts if k[0] == t.name]:
            del self.parts[key]
            del self.producers[key]
        self._register(t, new_id, range(count))
        self.count("topics_recreated")
        return outcome

    def _catalog_doc(self, p: SimProcess, name: str) -> TopicDoc:
        """The topic document the catalog holds now (read with faults paused: the simulation's own look)."""
        assert p.faulty is not None
        assert p.store is not None
        with p.faulty.paused():
            doc = p.store.runtime.catalog.load(name, refresh=True)
        assert doc is not None, f"topic {name} is gone"
        assert not doc.deleted, f"topic {name} is deleted"
        return doc

    def _alter(self, p: SimProcess) -> str:
        topic = self.rng.choice([t.name for t in self.topics])
        key = self.rng.choice(sorted(ALTERS))
        value = self.rng.choice(ALTERS[key])
        if key == "retention.ms" and "delete" not in self.configs[topic]["cleanup.policy"]:
            key, value = "segment.ms", "2000"
        if key == "file.delete.delay.ms":
            topic_id = self.topic_ids[topic]
            self.grace.file_delete_delay_ms[topic_id] = min(self.grace.file_delete_delay_ms.get(topic_id, 1 << 62),
                                                            int(value))
        self._store(p).alter_topic_config(topic, {key: value})
        self.configs[topic][key] = value
        return f"{topic} {key}={value}"

    # -- processes ----------------------------------------------------------------------------------------------------

    def _restart(self, p: SimProcess) -> str:
        try:
            self._close(p)
        except SimulatedCrash as exc:
            return f"crash at {exc.point} while closing" + self._die(p, crashed=True)
        except S3StreamError as exc:
            return f"close error {type(exc).__name__}; reopen: {self._open(p)}"
        return f"reopen: {self._open(p)}"

    def _kill(self, p: SimProcess) -> str:
        return "killed" + self._die(p, crashed=False)

    def _arm(self, p: SimProcess) -> str:
        point = self.rng.choice(CRASH_POINTS)
        after = self.rng.choice([0, 0, 1, 3])
        p.crash.arm(point, after=after)
        return f"{point} after {after}"

    def _crash_during(self, p: SimProcess, *, quiet: bool) -> str:
        """Arm a crash point that only maintenance passes reach, and run such a pass now (armed at random, those
        points rarely meet a pass with work to do; see :data:`_RARE_POINTS`)."""
        point, run = self.rng.choice([r for r in _RARE_POINTS if quiet or r[1] != "flush"])  # (flush() waits)
        passes: dict[str, Callable[[], str]] = {
            "clean": lambda: self._clean(p, flush=False), "retention": lambda: self._retention(p, flush=False),
            "gc": lambda: self._gc(p), "flush": lambda: self._blocking(p, "flush")}
        p.crash.arm(point)
        outcome = passes[run]()
        p.crash.disarm(point)  # the pass had nothing to do there: the point stays quiet
        return f"{point}: {outcome}"

    # -- time ---------------------------------------------------------------------------------------------------------

    def _tick(self) -> str:
        return f"+{self.clock.advance(self.rng.choice([1, 10, 50, 120, 400])) - T0}"

    def _jump(self) -> str:
        return f"+{self.clock.advance(self.rng.choice([2000, 8000, 40_000, 200_000])) - T0}"

    def _skew(self) -> str:
        back = self.rng.choice([5, 300, 2500])
        self.clock.set(self.clock.now_ms() - back)
        return f"wall clock back {back} ms"

    # -- faults -------------------------------------------------------------------------------------------------------

    def _set_rules(self, rules: list[FaultRule]) -> None:
        self.rules = rules
        for proc in self.procs.values():
            if proc.faulty is not None:
                proc.faulty.set_rules(rules)

    def _flaky(self) -> str:
        pool = [
            FaultRule("put", "wal/", "error", 0.3, 3), FaultRule("put", "wal/", "lost_response", 0.3, 2),
            FaultRule("put", "wal/", "timeout_before", 0.3, 2), FaultRule("put", "wal/", "precondition", 0.2, 1),
            FaultRule("put", "logs/", "error", 0.2, 3), FaultRule("put", "logs/", "lost_response", 0.3, 2),
            FaultRule("put", "logs/", "conflict409", 0.2, 2), FaultRule("put", "logs/", "precondition", 0.2, 2),
            FaultRule("get", None, "throttle", 0.1, 4), FaultRule("get", None, "error", 0.1, 3),
            FaultRule("head", None, "error", 0.2, 2), FaultRule("list", None, "timeout_before", 0.2, 2),
            FaultRule("delete", None, "error", 0.3, 2), FaultRule("delete", None, "lost_response", 0.3, 2),
            FaultRule("put", "topics/", "lost_response", 0.3, 1),
        ]
        chosen = sorted(self.rng.sample(range(len(pool)), self.rng.randint(1, 4)))
        self._set_rules([pool[i] for i in chosen])
        self.count("fault_phases")
        return ", ".join(f"{pool[i].op}:{pool[i].key_prefix}:{pool[i].kind}" for i in chosen)

    def _outage(self) -> str:
        self.outage_left = self.rng.randint(3, 12)
        self._set_rules([FaultRule(None, None, self.rng.choice(["error", "throttle", "timeout_before"]), 1.0)])
        self.count("outages")
        return f"for {self.outage_left} steps"

    def _faults_off(self) -> str:
        self._set_rules([])
        return "off"

    def _disk_full(self) -> str:
        self.disks.full = True
        self.disk_full_left = self.rng.randint(2, 10)
        self.count("disk_full")
        return f"for {self.disk_full_left} steps"

    def _read_only(self) -> str:
        self.disks.read_only = True
        self.read_only_left = self.rng.randint(2, 8)
        self.count("read_only_phases")
        return f"for {self.read_only_left} steps"

    def _fsync_failure(self) -> str:
        self.disks.failing_fsyncs += 1
        self.count("fsync_failures")
        return "the next fsync fails"

    def _expire_faults(self) -> None:
        if self.outage_left:
            self.outage_left -= 1
            if not self.outage_left:
                self._set_rules([])
                self.trace.append(f"{self.step_no} outage over")
        if self.disk_full_left:
            self.disk_full_left -= 1
            if not self.disk_full_left:
                self.disks.full = False
                self.trace.append(f"{self.step_no} disk has room again")
        if self.read_only_left:
            self.read_only_left -= 1
            if not self.read_only_left:
                self.disks.read_only = False
                self.trace.append(f"{self.step_no} disk writable again")

    # -- the audit ------------------------------------------------------------------------------------------------

    def _audit(self, when: str, *, reader: SimProcess | None = None, full: bool = True,
               only: set[tuple[str, int]] | None = None) -> None:
        """Check every invariant (see the package docstring). A ``full`` audit reads each partition whole through
        the engine (its sealed tier included); otherwise sealed segments, immutable, are decoded once each
        from the bucket and only what the latest manifest has not sealed is read through the engine, and only
        for the partitions in ``only`` (the step changed no other; None: all)."""
        if self.problems:
            raise AuditFailure(f"step {self.step_no} ({when}): {self.problems[0]}")
        if self.observer.violations:
            raise AuditFailure(f"step {self.step_no} ({when}): {self.observer.violations[0]}")
        missing = self.observer.missing_objects()
        if missing:
            raise AuditFailure(f"step {self.step_no} ({when}): {missing[0]}")
        summary = []
        for key in sorted(self.parts):
            if only is not None and key not in only:
                continue
            part = self.parts[key]
            proc = reader or self._reader_for(part)
            got = self._read(proc, key, when, full=full)
            if got is None:
                summary.append(f"{part.name}:stale")
                continue
            rows, log_start, leo = got
            self.count("acked_records_checked", len(part.must))
            try:
                parked = frozenset(p.name for p in self.procs.values() if p.parked)
                part.check(rows, log_start, leo, reader=f"{proc.name}#{proc.incarnation}", parked=parked)
                part.fold_check(rows, parked=parked)
            except AuditFailure as exc:
                raise AuditFailure(f"step {self.step_no} ({when}, read by {proc.name}#{proc.incarnation}): "
                                   f"{exc}") from None
            summary.append(f"{part.name}[{log_start},{leo}):{len(rows)}")
        self.trace.append(f"{self.step_no} audit {' '.join(summary)}")

    def _reader_for(self, part: PartModel) -> SimProcess:
        """Who reads a partition for the audit: the process that claimed it last (its unflushed tail is in its
        memory), else a process that never writes (it sees the bucket; a writer another node took the
        partition from would serve its own stale tail until it learns it was fenced)."""
        writer = self.procs.get(part.writer or "")
        if writer is not None and writer.alive:
            return writer  # fenced or not: nobody claimed the partition after it, so its view is the log's
        return self.reader

    def _read(self, proc: SimProcess, key: tuple[str, int], when: str, *, full: bool
              ) -> tuple[list[Row], int, int] | None:
        """Every record of partition ``key`` as ``proc`` sees it (faults paused: the audit reads, nothing else);
        None while ``proc`` still sees a deleted incarnation of the topic (its catalog cache, refreshed every
        few seconds, or kept through an outage: a stale view, not data of the new incarnation)."""
        assert proc.store is not None
        assert proc.faulty is not None
        try:
            with proc.faulty.paused():
                plog = proc.store.partition(*key)
                if plog.topic_id != self.topic_ids[key[0]]:
                    if when.startswith("final") and (proc is not self.reader or "fresh" in when):  # reopened
                        raise AuditFailure(f"step {self.step_no} ({when}): {proc.name}#{proc.incarnation} still "
                                           f"sees a deleted incarnation of {key[0]}")
                    self.count("stale_topic_views")
                    return None
                rows, log_start, leo = read_all(plog) if full else self._read_fast(plog, self.parts[key])
        except S3StreamError as exc:
            raise AuditFailure(f"step {self.step_no} ({when}): reading {key[0]}-{key[1]} through "
                               f"{proc.name}#{proc.incarnation} failed: {type(exc).__name__}: {exc}") from exc
        prefix = self.parts[key].prefix
        m = self.observer.latest.get(prefix)
        if m is not None and m.log_start_offset > log_start:
            # another process moved the log start (DeleteRecords, retention): a writer serving its tail re-reads
            # its manifest at least every second (docs/ARCHITECTURE.md, "Read"), so for up to that long it may
            # still serve records below it; the log starts where the bucket says
            stale_s = self.clock.monotonic() - self.observer.start_moved_at.get(prefix, self.clock.monotonic())
            if stale_s > _WRITER_MANIFEST_MAX_AGE_S + 0.001:
                raise AuditFailure(f"step {self.step_no} ({when}): {proc.name}#{proc.incarnation} reads "
                                   f"{key[0]}-{key[1]} from {log_start}, {stale_s:.3f} s after the log start moved "
                                   f"to {m.log_start_offset}")
            self.count("stale_log_start_views")
            log_start = m.log_start_offset
            rows = [r for r in rows if r.offset >= log_start]
        return rows, log_start, max(leo, log_start)

    def _read_fast(self, plog: PartitionLog, part: PartModel) -> tuple[list[Row], int, int]:
        """The partition from the bucket's latest manifest (its segments decoded once each) plus the unsealed
        tail read through ``plog``."""
        m = self.observer.latest.get(part.prefix)
        if m is None:
            return read_all(plog)
        rows: list[Row] = []
        for seg in m.segments:
            if seg.end_offset > m.log_start_offset:
                rows.extend(r for r in self._segment_rows(seg) if r.offset >= m.log_start_offset)
        tail, _, leo = read_all(plog, start=max(m.next_offset, m.log_start_offset))
        return rows + tail, m.log_start_offset, max(leo, m.next_offset)

    def _segment_rows(self, seg: SegmentRef) -> list[Row]:
        cached = self._segments.get(seg.key)
        if cached is None:
            reader = SegmentReader(ranged_fetch(self.observer.inner, seg.key), seg.object_size, source=seg.key)
            cached = self._segments[seg.key] = table_rows(reader.read_all(), seg.offset_delta)
        return cached


def _failed(exc: BaseException) -> str:
    """An append's status after ``exc``: a producer's typed refusal wrote nothing, anything else may have."""
    return "refused" if isinstance(exc, (OutOfOrderSequence, ProducerFenced)) else "failed"


def _arrow_table(records: list[Record]) -> pa.Table:
    """``records`` as the Arrow API takes them (key, value, timestamp, headers)."""
    return pa.table({
        "key": pa.array([r.key for r in records], type=pa.binary()),
        "value": pa.array([r.value for r in records], type=pa.binary()),
        "timestamp": pa.array([r.timestamp for r in records], type=pa.int64()),
        "headers": pa.array([[{"key": k, "value": v} for k, v in r.headers or ()] for r in records],
                            type=HEADER_TYPE),
    })
