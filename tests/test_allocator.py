"""The allocator setting of s3stream's own processes (s3stream/allocator.py)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

_PROBE = ("from s3stream.allocator import allocator_setting, tune_allocator; "
          "print(tune_allocator(), allocator_setting())")


def _run(env: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, env=env,
                         timeout=60)
    return out.stdout.strip()


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_pins_glibcs_mmap_threshold() -> None:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
    assert _run(env) == "True glibc mmap threshold pinned at 131072 B"


def test_an_operators_environment_setting_wins() -> None:
    assert _run({**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}) == "False MALLOC_MMAP_THRESHOLD_=65536"
