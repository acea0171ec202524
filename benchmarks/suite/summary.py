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

__all__ = ["HEADER", "RAW_HEADER", "raw_rows", "summary_rows", "summary_table"]

HEADER = ("| Target | ingest ack=wal MB/s (/ raw) | ack=wal p99 ms (/ fsync p99) | ack=s3 p99 ms | "
          "e2e p99 ms (/ WarpStream 900) | catch-up MB/s (/ raw GET) | compaction MB/s (/ raw) | "
          "mixed lag p99 ms | PUT/GiB (naive) | $/month at 10 MB/s (naive) | File |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|")


RAW_HEADER = ("| Target | fsync'd disk MB/s | fsync p99 ms | concurrent PUT MB/s | PUT p50 / p99 ms | "
              "concurrent ranged GET MB/s | GET p50 / p99 ms |\n"
              "|---|---|---|---|---|---|---|")


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


def raw_rows(results: Iterable[tuple[Path, dict[str, Any]]]) -> list[str]:
    """One markdown row per result file: the raw limits its ratios are taken against."""
    rows = []
    for path, r in results:
        raw = r.get("raw_limits", {})

        def get(key: str, raw: dict[str, Any] = raw) -> float | None:
            value = raw.get(key)
            return None if value is None else float(value)

        cells = [
            f"`{r.get('target', {}).get('spec', r.get('slug', path.stem))}`",
            _num(get("disk_mb_per_s")), _num(get("fsync_p99_ms")), _num(get("put_mb_per_s")),
            f"{_num(get('put_p50_ms'))} / {_num(get('put_p99_ms'))}", _num(get("get_mb_per_s")),
            f"{_num(get('get_p50_ms'))} / {_num(get('get_p99_ms'))}",
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def summary_table(paths: Iterable[Path]) -> str:
    """The figures table (a row per result file, in the order given), then the raw limits of the same runs."""
    loaded = [(p, json.loads(p.read_text())) for p in paths]
    return "\n".join([HEADER, *summary_rows(loaded), "", "Raw limits measured in the same runs:", "",
                      RAW_HEADER, *raw_rows(loaded)]) + "\n"
