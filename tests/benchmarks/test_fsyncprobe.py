"""The fsync probe: a child process that measures the disk's raw fsync latency and stops by itself."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from benchmarks.fsyncprobe import FsyncProbe

pytestmark = pytest.mark.benchmark


def test_probe_measures_fsyncs_in_a_child_process_and_leaves_no_file(tmp_path: Path) -> None:
    probe = FsyncProbe(tmp_path / "probe", 0.4, interval_s=0.01)
    started = time.perf_counter()
    with probe:
        pass  # the phase being measured would run here
    assert time.perf_counter() - started < 30
    assert probe.summary is not None
    assert 5 <= probe.summary.count <= 60  # one sample per ~10 ms for 0.4 s
    assert probe.summary.max_ms >= probe.summary.p99_ms >= probe.summary.p50_ms > 0
    assert not any((tmp_path / "probe").iterdir())


def test_an_error_inside_the_block_still_reaps_the_probe(tmp_path: Path) -> None:
    probe = FsyncProbe(tmp_path / "probe", 0.2)
    with pytest.raises(ValueError, match="boom"), probe:
        raise ValueError("boom")
    assert probe.summary is not None and probe.summary.count > 0
