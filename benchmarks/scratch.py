"""Shared plumbing of the standalone benchmarks: run in a scratch directory, write JSON + markdown, print."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["RESULTS_DIR", "run_in_scratch", "write_pair"]

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def write_pair(result: dict[str, Any], out_dir: Path, name: str, markdown: str) -> Path:
    """``out_dir/name.json`` (everything measured) and ``out_dir/name.md`` (the summary); the JSON path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    path.with_suffix(".md").write_text(markdown)
    return path


def run_in_scratch(run: Callable[[Path], dict[str, Any]], *, prefix: str, work_dir: Path | None,
                   write: Callable[[dict[str, Any]], Path]) -> dict[str, Any]:
    """Run in a fresh scratch directory (always removed), write the results and print the summary."""
    work = Path(tempfile.mkdtemp(prefix=prefix, dir=work_dir))
    try:
        result = run(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    path = write(result)
    print(path.with_suffix(".md").read_text())
    print(f"results: {path} and {path.with_suffix('.md')}")
    return result
