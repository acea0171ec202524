"""What a simulation run may do and what it gave: the values the CLI, the tests and :func:`~.runner.run_seed` share.

Kept apart from the runner so that the world's state (:mod:`.world`) can build a result without importing the
runner that builds the world.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

__all__ = ["SimOptions", "SimResult", "repro_command"]


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
