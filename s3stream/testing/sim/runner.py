"""One seeded simulation run: the world, the actions chosen from the seed, the audit after every step.

:func:`run_seed` builds a world from the seed (a manual clock, a bucket, the processes' disks, store settings
and topics drawn from the seed), then runs ``steps`` actions, each chosen by the seed's generator from what
is possible at that moment, each followed by the audit; then a final phase heals every fault, restarts
everything cleanly, runs GC past every grace period and audits again, from the writer and from a fresh
reader of the bucket. Everything that happened is in the trace, one line per step, whose hash two runs of
the same seed must share.

This module is the run's loop: choosing an action, running it, recording its outcome. :class:`Simulation`
combines the world's state (:mod:`.world`) with the action families (:mod:`.workload`, :mod:`.maintenance`,
:mod:`.lifecycle`, :mod:`.environment`) and the audit (:mod:`.audit`).
"""

from __future__ import annotations

import functools
import logging
import tempfile
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from s3stream.base.crashpoints import SimulatedCrash
from s3stream.base.errors import S3StreamError
from s3stream.testing.sim.audit import Auditor
from s3stream.testing.sim.environment import Environment
from s3stream.testing.sim.lifecycle import CRASH_POINTS, Lifecycle
from s3stream.testing.sim.model import AuditFailure
from s3stream.testing.sim.options import SimOptions, SimResult, repro_command
from s3stream.testing.sim.process import SimProcess
from s3stream.testing.sim.workload import Workload
from s3stream.testing.sim.world import BUGS, T0

__all__ = ["CRASH_POINTS", "SimOptions", "SimResult", "repro_command", "run_seed"]

#: Actions after which the audit reads every partition whole through the engine (and every tenth step).
_STRUCTURAL = frozenset({"retention", "clean", "gc", "delete records", "restart", "kill", "open", "close", "roll",
                         "add partitions", "recreate topic"})

#: Actions that run nothing of a store: the audit needs no read after them.
_NO_PARTITION = frozenset({"tick", "jump", "skew", "faults", "disk", "arm", "producer"})


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


class Simulation(Workload, Lifecycle, Environment, Auditor):
    """The world of one seed and its run (see the module docstring)."""

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
            if isinstance(exc, BUGS):
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
