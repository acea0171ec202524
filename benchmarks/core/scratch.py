"""Run a workload in a scratch directory that is always removed, then write and print its result."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["run_in_scratch"]


def run_in_scratch(run: Callable[[Path], dict[str, Any]], *, prefix: str, work_dir: Path | None,
                   write: Callable[[dict[str, Any]], Path]) -> dict[str, Any]:
    """Run in a fresh scratch directory (always removed), write the results and print the summary."""
    if work_dir is not None:
        work_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=prefix, dir=work_dir))
    try:
        result = run(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    path = write(result)
    print(path.with_suffix(".md").read_text())
    print(f"results: {path} and {path.with_suffix('.md')}")
    return result
