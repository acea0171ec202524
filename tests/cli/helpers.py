"""Shared helpers of the CLI tests: a runner bound to one store, and output parsers."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from typer.testing import CliRunner, Result

from s3stream.apps.cli import app


@dataclass
class Cli:
    """Invoke ``s3stream`` against one store (``--url`` appended unless given)."""

    runner: CliRunner
    url: str
    root: Path

    def __call__(self, *args: str, input: str | bytes | None = None, url: bool = True) -> Result:
        argv: list[str] = list(args)
        if url and "--url" not in argv:
            argv += ["--url", self.url]
        if args[0] not in ("dump", "quickstart"):
            argv += ["-o", "probe=false"]  # the capability probe costs fsyncs; it has its own tests
        return self.runner.invoke(app, argv, input=input)

    def ok(self, *args: str, input: str | bytes | None = None) -> Result:
        """Invoke and assert exit code 0 (showing the output otherwise)."""
        result = self(*args, input=input)
        assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr, result.exception)
        return result

    def files(self, suffix: str) -> list[Path]:
        """Objects of the store with this suffix (the local WAL directory excluded)."""
        return sorted(p for p in self.root.rglob(f"*{suffix}") if "_wal" not in p.relative_to(self.root).parts)

    def key(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()


def error_line(result: Result) -> str:
    """The one error line a failed command printed on stderr (it is the last line, and the only one)."""
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    out = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in out if line.startswith(("error: ", "corrupt data: ", "fenced: "))]
    assert len(errors) == 1 and out[-1] == errors[0], result.stderr
    return errors[0]


def jsonl(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def lines(items: Sequence[str]) -> str:
    return "".join(f"{x}\n" for x in items)
