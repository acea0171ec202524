"""The parameters of one engine benchmark run, with the full and ``--quick`` defaults.

Every parameter lands in the output JSON, so a result file says exactly what was measured. Store
options (``-o flush.bytes=16777216``) are validated by :class:`s3stream.base.settings.StoreSettings`;
the effective settings (defaults filled in) are what the memory and PUT bounds are computed from.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from s3stream.base.settings import StoreSettings

__all__ = ["Params", "make_params"]

MiB = 1 << 20
GiB = 1 << 30


@dataclass(frozen=True, slots=True, kw_only=True)
class Params:
    """One run's knobs. Sizes in bytes, durations in seconds."""

    target: str
    out: Path
    quick: bool = False
    duration_s: float = 60.0
    work_dir: Path | None = None
    keep_work_dir: bool = False
    # workload
    producers: int = 4
    partitions: int = 8
    batch_records: int = 500
    record_bytes: int = 1024
    segment_bytes: int = 64 * MiB
    latency_seconds: float = 30.0
    latency_batch_records: int = 256
    cost_bytes: int = GiB
    many_partitions: int = 1000
    read_max_bytes: int = 8 * MiB
    record_pool_bytes: int = 32 * MiB
    # raw limits
    raw_seconds: float = 5.0
    fsync_seconds: float = 3.0
    disk_block_bytes: int = 4 * MiB
    put_threads: int = 8
    put_object_bytes: int = 8 * MiB
    get_range_bytes: int = 4 * MiB
    # engine
    store_options: dict[str, str] = field(default_factory=dict)
    profile: bool = False
    seed: int = 0
    progress: bool = True

    def settings(self) -> StoreSettings:
        """The store settings every store of the run is opened with (ack=wal, options applied)."""
        return StoreSettings.from_options({**self.store_options, "ack": "wal"})

    def open_options(self) -> dict[str, Any]:
        """Keyword options for ``open_store`` (the run's store options, ack=wal)."""
        return {**self.store_options, "ack": "wal"}

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["out"] = str(self.out)
        out["work_dir"] = None if self.work_dir is None else str(self.work_dir)
        return out


_QUICK: dict[str, Any] = {
    "duration_s": 5.0, "latency_seconds": 3.0, "segment_bytes": 8 * MiB, "cost_bytes": 128 * MiB,
    "raw_seconds": 1.5, "fsync_seconds": 1.0,
}


def make_params(target: str, out: Path, *, quick: bool = False, duration_s: float | None = None,
                **overrides: Any) -> Params:
    """Full-run defaults, or the ``--quick`` ones (a few seconds per phase); ``overrides`` win."""
    base = Params(target=target, out=out, quick=quick)
    if quick:
        base = replace(base, **_QUICK)
    if duration_s is not None:
        base = replace(base, duration_s=duration_s)
    params = replace(base, **overrides)
    params.settings()  # validate the store options now, not an hour into the run
    return params
