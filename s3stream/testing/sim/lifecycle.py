"""The process life actions of the simulation: opens and closes, clean restarts, kills and crashes at named crash
points (a death may lose power or flip a byte of the local WAL), and the restart a supervisor would do after."""

from __future__ import annotations

from collections.abc import Callable

from s3stream.base.crashpoints import SimulatedCrash
from s3stream.base.errors import LocalWalCorrupt, S3StreamError
from s3stream.testing.sim.maintenance import Maintenance
from s3stream.testing.sim.process import SimProcess, derive
from s3stream.testing.sim.world import BUGS

__all__ = ["CRASH_POINTS", "Lifecycle"]

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


class Lifecycle(Maintenance):
    """Opens, closes, restarts, kills and crashes (a mixin of :class:`~.runner.Simulation`; a crash armed for a
    maintenance pass runs that pass, hence the base)."""

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
            if isinstance(exc, BUGS):
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
            if isinstance(exc, BUGS):
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
                if isinstance(exc, BUGS) or attempt == 3:
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
