"""The fsync probe: a child process that measures the disk's raw fsync latency and stops by itself."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from benchmarks.core.fsyncprobe import FsyncProbe, probe

pytestmark = pytest.mark.benchmark


def test_probe_measures_fsyncs_in_a_child_process_and_leaves_no_file(tmp_path: Path) -> None:
    child = FsyncProbe(tmp_path / "probe", 0.4, interval_s=0.01)
    started = time.perf_counter()
    with child:
        pass  # the phase being measured would run here
    assert time.perf_counter() - started < 30
    assert child.summary is not None
    assert 5 <= child.summary.count <= 60  # one sample per ~10 ms for 0.4 s
    assert child.summary.max_ms >= child.summary.p99_ms >= child.summary.p50_ms > 0
    assert not any((tmp_path / "probe").iterdir())


def test_an_error_inside_the_block_still_reaps_the_probe(tmp_path: Path) -> None:
    child = FsyncProbe(tmp_path / "probe", 0.2)
    with pytest.raises(ValueError, match="boom"), child:
        raise ValueError("boom")
    assert child.summary is not None and child.summary.count > 0


def test_writers_keep_their_own_schedule_and_files(tmp_path: Path) -> None:
    """Three writers every 50 ms for 0.5 s: ~10 samples each, never a burst to catch up, no file left."""
    samples = probe(tmp_path / "probe", 0.5, block_bytes=8192, interval_s=0.05, threads=3)
    assert 15 <= len(samples) <= 33
    assert all(s > 0 for s in samples)
    assert not any((tmp_path / "probe").iterdir())


def test_a_probe_child_with_several_writers_reports_every_sample(tmp_path: Path) -> None:
    one, four = FsyncProbe(tmp_path / "a", 0.4, interval_s=0.02), FsyncProbe(tmp_path / "b", 0.4, interval_s=0.02,
                                                                             threads=4)
    with one, four:
        pass
    assert one.summary is not None and four.summary is not None
    # four writers on the same schedule as one report more samples (not 4x: a loaded machine delays them)
    assert four.summary.count > 1.5 * one.summary.count


@pytest.mark.parametrize("kwargs", [{"threads": 0}, {"block_bytes": 0}, {"interval_s": 0.0}])
def test_nonsense_probe_parameters_are_refused(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="fsync probe needs"):
        probe(tmp_path, 0.1, **kwargs)
