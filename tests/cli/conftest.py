"""Fixtures for the CLI tests: a temp ``file://`` store and a runner that points every command at it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from .helpers import Cli


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cli]:
    monkeypatch.delenv("S3STREAM_URL", raising=False)
    root = tmp_path / "store"
    yield Cli(CliRunner(), root.as_uri(), root)
