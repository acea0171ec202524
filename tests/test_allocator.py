"""The allocator setting of s3stream's own processes (s3stream/base/allocator.py)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

_PROBE = ("from s3stream.base.allocator import allocator_setting, tune_allocator; "
          "print(tune_allocator(), allocator_setting())")


def _run(env: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, env=env,
                         timeout=60)
    return out.stdout.strip()


_GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_ARENA_MAX", "MALLOC_TRIM_THRESHOLD_")


@pytest.mark.skipif(not _GLIBC, reason="glibc only")
def test_pins_glibcs_mmap_threshold_and_caps_arenas() -> None:
    env = {k: v for k, v in os.environ.items() if k not in _ENV}
    assert _run(env) == "True glibc mmap threshold pinned at 131072 B, 2 glibc arenas"


@pytest.mark.skipif(not _GLIBC, reason="glibc only")
def test_an_operators_environment_setting_wins() -> None:
    env = {k: v for k, v in os.environ.items() if k not in _ENV}
    assert _run({**env, "MALLOC_MMAP_THRESHOLD_": "65536"}) == "True 2 glibc arenas, MALLOC_MMAP_THRESHOLD_=65536"
    both = {**env, "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_ARENA_MAX": "4"}
    assert _run(both) == "False MALLOC_MMAP_THRESHOLD_=65536, MALLOC_ARENA_MAX=4"


@pytest.mark.skipif(not _GLIBC, reason="glibc only")
def test_the_kafka_servers_request_buffers_setting_replaces_the_pinned_threshold() -> None:
    env = {k: v for k, v in os.environ.items() if k not in _ENV}
    probe = ("from s3stream.base.allocator import allocator_setting, tune_allocator; tune_allocator(); "
             "print(tune_allocator(request_buffers=True), allocator_setting())")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env,
                         timeout=60).stdout.strip()
    assert out == "True glibc mmap threshold 33554432 B, 2 glibc arenas, trim threshold 268435456 B"
