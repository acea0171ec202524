"""Quality gates that run with the test command: lint, strict typing, layering, README/CI agreement."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["s3stream", "wal", "cleaner"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)


def test_ruff_clean() -> None:
    result = _run(sys.executable, "-m", "ruff", "check", *PACKAGES, "tests", "benchmarks")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_clean() -> None:
    result = _run(sys.executable, "-m", "mypy")
    assert result.returncode == 0, result.stdout + result.stderr


def test_import_layers() -> None:
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    result = _run(exe)
    assert result.returncode == 0, result.stdout + result.stderr


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```(?:bash|sh)?\n(.*?)```", text, re.S)
    assert block, "README.md must open with a command block"
    return [line.strip() for line in block.group(1).splitlines() if line.strip() and not line.startswith("#")]


def test_readme_opens_with_two_commands_and_ci_runs_the_test_one() -> None:
    commands = _readme_commands()
    assert len(commands) == 2, commands
    ci = (ROOT / ".ci" / "run").read_text()
    assert commands[1] in ci, f"the README's test command {commands[1]!r} must appear in .ci/run"
    assert "s3stream quickstart" in commands[0]


@pytest.mark.parametrize("path", ["docs/ARCHITECTURE.md", "docs/configuration.md", "README.md"])
def test_docs_exist(path: str) -> None:
    assert (ROOT / path).stat().st_size > 500


@pytest.mark.parametrize("path", ["docs/ARCHITECTURE.md", "docs/configuration.md", "README.md", "benchmarks/README.md"])
def test_doc_headings_are_unique(path: str) -> None:
    """A botched edit that pastes a document into itself shows up as repeated headings."""
    headings = re.findall(r"^#{1,6} .+$", (ROOT / path).read_text(), re.M)
    repeated = sorted({h for h in headings if headings.count(h) > 1})
    assert not repeated, repeated
