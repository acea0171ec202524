"""The environment actions of the simulation: time (ticks, jumps, a wall clock set back) and faults (flaky or
failing object-store requests, outages, a full or read-only disk, failed fsyncs), and their expiry."""

from __future__ import annotations

from s3stream.testing.faults import FaultRule
from s3stream.testing.sim.world import T0, SimWorld

__all__ = ["Environment"]


class Environment(SimWorld):
    """Time and fault actions (a mixin of :class:`~.runner.Simulation`)."""

    def _tick(self) -> str:
        return f"+{self.clock.advance(self.rng.choice([1, 10, 50, 120, 400])) - T0}"

    def _jump(self) -> str:
        return f"+{self.clock.advance(self.rng.choice([2000, 8000, 40_000, 200_000])) - T0}"

    def _skew(self) -> str:
        back = self.rng.choice([5, 300, 2500])
        self.clock.set(self.clock.now_ms() - back)
        return f"wall clock back {back} ms"

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
