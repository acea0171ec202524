"""The suite's ratios, its part of the markdown summary, and its console tables, all from the result dict.

Everything here reads the JSON-shaped result (``WorkloadResult.as_dict()`` per workload, the flat raw
limits, the reference lines), so a result file can be re-rendered without re-running anything; the summary
is written by :mod:`benchmarks.core.markdown` like every other result's.

Ratios put each figure next to what bounds or frames it: a raw limit of the same run (ingest MB/s over
min(disk, PUT), ack p99 over fsync p99 or PUT p99, catch-up MB/s over raw GET), the naive baseline
(s3stream / naive for every figure both have), and the reference lines (published claims and our model).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks.core.markdown import Markdown, fmt, render_result

__all__ = ["Ratio", "compute_ratios", "print_summary", "print_workload", "render_markdown", "workload_table"]

_INGEST_NAIVE = ("mb_per_s", "records_per_s", "p50_ms", "p99_ms", "p999_ms")


@dataclass(frozen=True, slots=True)
class Ratio:
    """``value / against_value``; ``better`` says which direction is good (``higher``/``lower``)."""

    key: str
    workload: str
    figure: str
    value: float
    against: str
    against_value: float
    ratio: float
    better: str
    kind: str   # raw | baseline | reference | model

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _better(figure: str) -> str:
    return "higher" if figure.endswith(("_per_s", "_vs_raw", "_vs_baseline")) else "lower"


def _get(section: Mapping[str, Any], name: str) -> float | None:
    value = section.get(name)
    return float(value) if isinstance(value, int | float) else None


class _Ratios:
    def __init__(self, workloads: Mapping[str, Mapping[str, Any]]) -> None:
        self.workloads = workloads
        self.out: list[Ratio] = []

    def add(self, key: str, workload: str, figure: str, against: str, against_value: float | None,
            kind: str, *, value: float | None = None, better: str | None = None) -> None:
        if value is None:
            value = _get(self.workloads.get(workload, {}).get("figures", {}), figure)
        if value is None or against_value is None or against_value <= 0:
            return
        self.out.append(Ratio(key, workload, figure, value, against, against_value, value / against_value,
                              better or _better(figure), kind))


def compute_ratios(raw: Mapping[str, Any], workloads: Mapping[str, Mapping[str, Any]],
                   references: Iterable[Mapping[str, Any]]) -> list[Ratio]:
    """Every ratio whose two sides this run measured (missing workloads or figures are skipped)."""
    r = _Ratios(workloads)
    disk, put = _get(raw, "disk_mb_per_s"), _get(raw, "put_mb_per_s")
    floor = min(disk, put) if disk is not None and put is not None else None
    r.add("ingest_vs_raw", "ingest", "ack_wal_mb_per_s", "raw min(disk fsync'd, PUT) MB/s", floor, "raw")
    r.add("ack_wal_p99_vs_fsync_p99", "ingest", "ack_wal_p99_ms", "raw fsync p99", _get(raw, "fsync_p99_ms"), "raw")
    r.add("ack_s3_p99_vs_put_p99", "ingest", "ack_s3_p99_ms", "raw PUT p99", _get(raw, "put_p99_ms"), "raw")
    r.add("catchup_vs_raw_get", "catchup", "catchup_mb_per_s", "raw ranged GET MB/s", _get(raw, "get_mb_per_s"),
          "raw")
    _baseline_ratios(r, workloads)
    for ref in references:
        kind = "model" if str(ref.get("system", "")).endswith("model") else "reference"
        label = f"{ref['system']}: {ref['claim']}"
        for workload, figure in ref.get("compare", []):
            r.add(f"{workload}_{figure}_vs_{ref['key']}", workload, figure, label, float(ref["value"]), kind)
    return r.out


def _baseline_ratios(r: _Ratios, workloads: Mapping[str, Mapping[str, Any]]) -> None:
    """s3stream / naive for every figure with a baseline twin (``x`` or ``naive_x``; ingest's per ack mode)."""
    for name, w in workloads.items():
        figures, baseline = w.get("figures", {}), w.get("baseline", {})
        for key, value in baseline.items():
            if not isinstance(value, int | float):
                continue
            twins: list[str] = []
            short = key.removeprefix("naive_")
            if name == "ingest" and short in _INGEST_NAIVE:
                twins = [f"ack_wal_{short}", f"ack_s3_{short}"]
            elif name == "ingest" and short == "put_per_gib":
                twins = ["put_per_gib", "ack_s3_put_per_gib"]
            elif key in figures:
                twins = [key]
            elif short in figures:
                twins = [short]
            for twin in twins:
                r.add(f"{name}_{twin}_vs_{key}", name, twin, f"naive baseline {key}", float(value), "baseline")


# ---------------------------------------------------------------- formatting


def _ratio_text(ratio: Ratio) -> str:
    return f"{fmt(ratio.ratio)}x ({ratio.better} is better)"


def _by_figure(ratios: Sequence[Ratio], workload: str) -> dict[str, list[Ratio]]:
    out: dict[str, list[Ratio]] = {}
    for ratio in ratios:
        if ratio.workload == workload and ratio.kind != "baseline":
            out.setdefault(ratio.figure, []).append(ratio)
    return out


def _ratios_of(result: Mapping[str, Any]) -> list[Ratio]:
    return [Ratio(**r) for r in result.get("ratios", [])]


# ---------------------------------------------------------------- markdown


def render_markdown(result: Mapping[str, Any]) -> str:
    """The markdown summary of a suite result (images linked by the relative paths in ``images``)."""
    ratios = _ratios_of(result)
    images: Mapping[str, str] = result.get("images", {})
    body = Markdown().heading("Raw limits").paragraph(
        "No s3stream code involved: the WAL directory's disk and the target measured directly (see "
        "`benchmarks/core/rawlimits.py`).")
    raw, units = result.get("raw_limits", {}), result.get("raw_units", {})
    body.table(["Raw limit", "Value", "Unit"],
               [[k, fmt(v), units.get(k, "")] for k, v in raw.items() if k != "details"])
    for name, w in result.get("workloads", {}).items():
        _workload_md(body, name, w, ratios, images)
    _references_md(body, result.get("references", []))
    _costs_md(body, result.get("costs", {}), images)
    target, params = result.get("target", {}), result.get("parameters", {})
    title = f"s3stream benchmark suite: `{target.get('spec', '?')}`{' (quick)' if params.get('quick') else ''}"
    return render_result(result, title, body, facts=[("Workloads", ", ".join(params.get("workloads", [])))])


def _workload_md(md: Markdown, name: str, w: Mapping[str, Any], ratios: Sequence[Ratio],
                 images: Mapping[str, str]) -> None:
    figures, units = w.get("figures", {}), w.get("units", {})
    against = _by_figure(ratios, name)
    md.heading(f"Workload: {name}").paragraph(f"Ran for {fmt(w.get('seconds'))} s.")
    rows = []
    for fig, value in figures.items():
        refs = against.get(fig, [])
        rows.append([fig, fmt(value), units.get(fig, ""),
                     "; ".join(f"{r.against} = {fmt(r.against_value)}" for r in refs) or "-",
                     "; ".join(_ratio_text(r) for r in refs) or "-"])
    md.table(["Figure", "Value", "Unit", "Reference / raw limit", "Ratio"], rows)
    base = [r for r in ratios if r.workload == name and r.kind == "baseline"]
    if base:
        md.paragraph("Naive baseline side by side (s3stream / naive):")
        md.table(["Figure", "s3stream", "Naive", "s3stream / naive"],
                 [[r.figure, fmt(r.value), fmt(r.against_value), _ratio_text(r)] for r in base])
    other = {k: v for k, v in w.get("baseline", {}).items()
             if not any(r.against == f"naive baseline {k}" for r in base)}
    if other:
        md.paragraph("Other baseline figures: " + ", ".join(f"{k} = {fmt(v)}" for k, v in other.items()))
    requests = w.get("requests", {})
    if requests:
        payload = int(w.get("payload_bytes", 0))
        md.paragraph(f"Requests: {', '.join(f'{k} {v:,}' for k, v in requests.items())} for "
                     f"{payload / (1 << 30):.3f} GiB of payload.")
    for key in (f"latency-{name}", f"throughput-{name}"):
        if key in images:
            md.image(key, images[key])
    md.bullets(w.get("notes", []))


def _references_md(md: Markdown, refs: Sequence[Mapping[str, Any]]) -> None:
    md.heading("Reference lines").paragraph(
        "Published figures were measured on AWS with Kafka clients, in the setting shown: context for this "
        "run's target, not targets. Model lines follow from this run's parameters and raw limits.")
    md.table(["System", "Claim", "Value", "Setting", "Source"],
             [[str(r["system"]), str(r["claim"]), f"{fmt(r['value'])} {r['unit']}", str(r["setting"]),
               str(r["source"])] for r in refs])


def _costs_md(md: Markdown, costs: Mapping[str, Any], images: Mapping[str, str]) -> None:
    md.heading("Cost model (S3 Standard)")
    prices, source = costs.get("prices", {}), costs.get("price_source", {})
    if prices:
        md.paragraph("Prices (USD; requests per 1,000, storage per GB-month): "
                     + ", ".join(f"{k} {v:g}" for k, v in prices.items())
                     + f". Source: {source.get('url')} ({source.get('region')}, read {source.get('read_on')}); "
                       "override with `--price NAME=VALUE`.")
    per_gib = costs.get("requests_per_gib", {})
    if per_gib:
        write = per_gib.get("s3stream_write", {})
        md.paragraph("Requests per GiB: s3stream writes " + (", ".join(f"{k} {fmt(v)}" for k, v in write.items())
                                                           or "-")
                     + f"; s3stream read GETs {fmt(per_gib.get('s3stream_read_get'))}; naive PUTs "
                       f"{fmt(per_gib.get('naive_write_put'))}, naive read GETs {fmt(per_gib.get('naive_read_get'))}.")
    for sc in costs.get("scenarios", []):
        md.paragraph(f"**{sc['name']}**: {fmt(sc['mb_per_s'])} MB/s for a 30-day month, {fmt(sc['retention_days'])} "
                     f"days retained, {sc['consumers']} consumer(s) reading everything once; s3stream PUT/GiB "
                     f"{fmt(sc.get('s3stream_put_per_gib'))}. USD per month:")
        ours, naive = sc["s3stream"], sc.get("naive", {})
        md.table(["Component", "s3stream", "Naive"],
                 [[c.replace("_", " "), fmt(ours[c]), fmt(naive.get(c))]
                  for c in ("put", "get", "other_requests", "storage", "requests", "total")])
        if "naive_over_s3stream_total" in sc:
            md.paragraph(f"Naive / s3stream: {sc['naive_over_s3stream_total']:.2f}x in total, "
                         f"{sc.get('naive_over_s3stream_requests', 0):.1f}x in requests.")
    md.bullets(costs.get("notes", []))
    for key in ("requests-per-gib", "costs"):
        if key in images:
            md.image(key, images[key])


# ---------------------------------------------------------------- console


def workload_table(name: str, w: Mapping[str, Any], ratios: Sequence[Ratio]) -> Table:
    """One workload's figures with their references and ratios, for the console."""
    table = Table(title=f"{name} ({fmt(w.get('seconds'))} s)", title_justify="left")
    for col in ("figure", "value", "unit", "vs", "ratio"):
        table.add_column(col, justify="right" if col in ("value", "ratio") else "left")
    against = _by_figure(ratios, name)
    for fig, value in w.get("figures", {}).items():
        refs = against.get(fig, [])
        table.add_row(fig, fmt(value), w.get("units", {}).get(fig, ""),
                      "\n".join(f"{r.against} ({fmt(r.against_value)})" for r in refs),
                      "\n".join(f"{fmt(r.ratio)}x" for r in refs))
    for r in ratios:
        if r.workload == name and r.kind == "baseline":
            table.add_row(f"{r.figure} / naive", fmt(r.value), "", f"naive {fmt(r.against_value)}",
                          f"{fmt(r.ratio)}x")
    return table


def print_workload(console: Console, name: str, w: Mapping[str, Any], ratios: Sequence[Ratio]) -> None:
    console.print(workload_table(name, w, ratios))


def print_summary(console: Console, result: Mapping[str, Any]) -> None:
    """The raw limits, every workload's table and the cost totals."""
    raw, units = result.get("raw_limits", {}), result.get("raw_units", {})
    table = Table(title="raw limits", title_justify="left")
    table.add_column("limit")
    table.add_column("value", justify="right")
    table.add_column("unit")
    for k, v in raw.items():
        if k != "details":
            table.add_row(k, fmt(v), units.get(k, ""))
    console.print(table)
    ratios = _ratios_of(result)
    for name, w in result.get("workloads", {}).items():
        print_workload(console, name, w, ratios)
    for sc in result.get("costs", {}).get("scenarios", []):
        naive = sc.get("naive", {}).get("total")
        console.print(f"cost at {fmt(sc['mb_per_s'])} MB/s ({sc['name']}): s3stream ${fmt(sc['s3stream']['total'])}"
                      f"/month" + (f", naive ${fmt(naive)}/month" if naive is not None else ""))
