"""The README's table of the latest suite runs, generated from committed result files (never typed).

``python -m benchmarks summary benchmarks/results/suite/*.json`` prints one markdown row per result:
the headline figure of every workload next to what frames it (raw limit, published reference, naive
baseline), so the README quotes exactly what a committed file holds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["HEADER", "summary_rows", "summary_table"]

HEADER = ("| Target | ingest ack=wal MB/s (/ raw) | ack=wal p99 ms (/ fsync p99) | ack=s3 p99 ms | "
          "e2e p99 ms (/ WarpStream 900) | catch-up MB/s (/ raw GET) | compaction MB/s (/ raw) | "
          "mixed lag p99 ms | PUT/GiB (naive) | $/month at 10 MB/s (naive) | File |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|")


def _fig(result: dict[str, Any], workload: str, name: str) -> float | None:
    w = result.get("workloads", {}).get(workload)
    if w is None:
        return None
    value = {**w.get("baseline", {}), **w.get("figures", {})}.get(name)
    return None if value is None else float(value)


def _ratio(result: dict[str, Any], key: str) -> float | None:
    for r in result.get("ratios", []):
        if r.get("key") == key:
            return float(r["ratio"])
    return None


def _num(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.{digits}g}"


def _with(x: float | None, ratio: float | None) -> str:
    if x is None:
        return "-"
    return _num(x) if ratio is None else f"{_num(x)} ({ratio:.2f})"


def summary_rows(results: Iterable[tuple[Path, dict[str, Any]]]) -> list[str]:
    """One markdown row per result file."""
    rows = []
    for path, r in results:
        cost = next((s for s in r.get("costs", {}).get("scenarios", []) if s.get("name") == "reference rate"), None)
        dollars = "-" if cost is None else f"{cost['s3stream']['total']:,.0f} ({cost['naive']['total']:,.0f})"
        put = _fig(r, "ingest", "put_per_gib")
        naive_put = _fig(r, "ingest", "naive_put_per_gib")
        cells = [
            f"`{r.get('target', {}).get('spec', r.get('slug', path.stem))}`",
            _with(_fig(r, "ingest", "ack_wal_mb_per_s"), _ratio(r, "ingest_vs_raw")),
            _with(_fig(r, "ingest", "ack_wal_p99_ms"), _ratio(r, "ack_wal_p99_vs_fsync_p99")),
            _num(_fig(r, "ingest", "ack_s3_p99_ms")),
            _with(_fig(r, "e2e", "e2e_p99_ms"), _ratio(r, "e2e_e2e_p99_ms_vs_warpstream_e2e_p99")),
            _with(_fig(r, "catchup", "catchup_mb_per_s"), _ratio(r, "catchup_vs_raw_get")),
            _with(_fig(r, "compaction", "cleaner_mb_per_s"), _fig(r, "compaction", "cleaner_vs_raw")),
            _num(_fig(r, "mixed", "consumer_lag_p99_ms")),
            "-" if put is None else f"{_num(put)} ({_num(naive_put)})",
            dollars,
            f"[{path.name}]({path.as_posix()})",
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def summary_table(paths: Iterable[Path]) -> str:
    """The header and a row per result file, in the order given."""
    loaded = [(p, json.loads(p.read_text())) for p in paths]
    return "\n".join([HEADER, *summary_rows(loaded)]) + "\n"
