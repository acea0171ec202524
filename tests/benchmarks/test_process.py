"""A benchmark stopped by SIGTERM (``timeout``, a CI runner) unwinds through its cleanup first."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from benchmarks.core.process import TERMINATED_EXIT_STATUS

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.benchmark

_CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from benchmarks.core.process import start_benchmark_process
    start_benchmark_process()
    marker = Path(sys.argv[1])
    try:
        print("ready", flush=True)
        time.sleep(60)
    finally:
        marker.write_text("cleaned up")
""")


def _terminated(script: str, marker: Path) -> int:
    """Run ``script`` in a child, SIGTERM it once it is inside its ``try``; its exit status."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    child = subprocess.Popen([sys.executable, "-c", script, str(marker)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        child.terminate()
        return child.wait(timeout=30)
    finally:
        child.kill()


def test_sigterm_runs_the_cleanup_and_exits_143(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    assert _terminated(_CHILD, marker) == TERMINATED_EXIT_STATUS == 143
    assert marker.read_text() == "cleaned up"


def test_without_the_handler_sigterm_skips_the_cleanup(tmp_path: Path) -> None:
    """What the handler is for: Python's default SIGTERM ends the process without unwinding."""
    marker = tmp_path / "marker"
    assert _terminated(_CHILD.replace("start_benchmark_process()", "pass"), marker) == -15
    assert not marker.exists()
