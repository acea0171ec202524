"""PNG plots of a suite result: latency CDFs, throughput over time, requests per GiB, cost breakdown.

matplotlib is optional (``pip install 's3stream[bench]'``): it is imported only here, and a run without
it writes the JSON and the markdown and says the plots were skipped. Figures are built with the
object-oriented API (``matplotlib.figure.Figure``, rendered by Agg), so no GUI backend and no global
pyplot state are involved. Everything is drawn from the JSON-shaped result, so a result file can be
re-plotted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["PlotsUnavailable", "write_plots"]

_DPI = 110
_COMPONENTS = ("put", "get", "other_requests", "storage")


class PlotsUnavailable(RuntimeError):
    """matplotlib is not installed."""


def _figure(width: float = 8.0, height: float = 4.5) -> Figure:
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise PlotsUnavailable("matplotlib is not installed (pip install 's3stream[bench]')") from exc
    return Figure(figsize=(width, height), dpi=_DPI, layout="constrained")


def _save(fig: Figure, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", bbox_inches="tight")  # nothing clipped, whatever the legend's width


def latency_cdf(workload: str, latencies: Mapping[str, Sequence[float]], refs: Sequence[Mapping[str, Any]],
                path: Path) -> None:
    """One line per latency sample (log x), dashed vertical lines for the references drawn on it."""
    entries = len(latencies) + len(refs)
    fig = _figure(height=4.5 + 0.2 * entries)  # the legend is one column of long labels below the axes
    ax = fig.subplots()
    for name, samples in latencies.items():
        xs = sorted(max(float(x), 1e-3) for x in samples)
        if not xs:
            continue
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        ax.step(xs, ys, where="post", label=f"{name} (n={len(xs)})")
    for i, ref in enumerate(refs):
        series = [s for w, s in ref.get("plot", []) if w == workload]
        ax.axvline(float(ref["value"]), linestyle="--", linewidth=1, color=f"C{(i + len(latencies)) % 10}",
                   label=f"{ref['system']}: {ref['claim']} ({', '.join(series)})")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.01)
    ax.set_xlabel("latency (ms, log scale)")
    ax.set_ylabel("fraction of samples <= x")
    ax.set_title(f"{workload}: latency CDF")
    ax.grid(True, which="both", alpha=0.3)
    fig.legend(loc="outside lower center", ncols=1, fontsize="small")
    _save(fig, path)


def throughput_over_time(workload: str, series: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Every series against time, one panel per unit."""
    units = list(dict.fromkeys(str(s["unit"]) for s in series))
    fig = _figure(height=2.8 * max(1, len(units)) + 0.8)
    axes_list: list[Axes] = list(fig.subplots(len(units), 1, sharex=True, squeeze=False)[:, 0])
    for ax, unit in zip(axes_list, units, strict=True):
        for s in series:
            if s["unit"] == unit:
                ax.plot(s["t_s"], s["values"], marker=".", markersize=3, label=str(s["name"]))
        ax.set_ylabel(unit)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    axes_list[0].set_title(f"{workload}: over time")
    axes_list[-1].set_xlabel("seconds since the workload started")
    _save(fig, path)


def requests_per_gib(per_gib: Mapping[str, Any], path: Path) -> None:
    """Bars by request kind, s3stream next to the naive baseline (where the baseline measured the kind)."""
    write: Mapping[str, float] = per_gib.get("s3stream_write", {})
    kinds = [k for k in ("put", "get", "head", "list", "delete") if k in write] or ["put"]
    labels = [f"{k.upper()} (write)" for k in kinds] + ["GET (one full read)"]
    ours = [float(write.get(k, 0.0)) for k in kinds] + [float(per_gib.get("s3stream_read_get", 0.0))]
    naive: list[float | None] = [per_gib.get("naive_write_put") if k == "put" else None for k in kinds]
    naive.append(per_gib.get("naive_read_get"))
    fig = _figure()
    ax = fig.subplots()
    xs = list(range(len(labels)))
    ax.bar([x - 0.2 for x in xs], ours, width=0.4, label="s3stream")
    nx = [x + 0.2 for x, v in zip(xs, naive, strict=True) if v is not None]
    nv = [float(v) for v in naive if v is not None]
    if nv:
        ax.bar(nx, nv, width=0.4, label="naive baseline")
    for x, v in [*zip([x - 0.2 for x in xs], ours, strict=True), *zip(nx, nv, strict=True)]:
        ax.annotate(f"{v:,.1f}", (x, v), ha="center", va="bottom", fontsize="x-small")
    positive = [v for v in ours + nv if v > 0]
    if positive and max(positive) / min(positive) > 100:
        ax.set_yscale("log")
    ax.set_xticks(xs, labels, fontsize="small")
    ax.set_ylabel("requests per GiB of payload")
    ax.set_title("object-store requests per GiB")
    ax.legend(fontsize="small")
    _save(fig, path)


def cost_breakdown(scenarios: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Stacked monthly cost by component, s3stream next to naive, one panel per scenario (own y scale)."""
    fig = _figure(width=4.5 * max(1, len(scenarios)) + 1.0)
    axes_list: list[Axes] = list(fig.subplots(1, max(1, len(scenarios)), squeeze=False)[0, :])
    for n, (ax, sc) in enumerate(zip(axes_list, scenarios, strict=False)):
        bars = [("s3stream", sc["s3stream"]), *([("naive", sc["naive"])] if "naive" in sc else [])]
        xs = list(range(len(bars)))
        bottom = [0.0] * len(bars)
        for i, component in enumerate(_COMPONENTS):
            heights = [float(b[component]) for _, b in bars]
            ax.bar(xs, heights, bottom=bottom, color=f"C{i}", label=component.replace("_", " ") if n == 0 else None)
            bottom = [a + h for a, h in zip(bottom, heights, strict=True)]
        for x, total in zip(xs, bottom, strict=True):
            ax.annotate(f"${total:,.0f}", (x, total), ha="center", va="bottom", fontsize="small")
        ax.set_xticks(xs, [label for label, _ in bars])
        ax.set_title(f"{sc['name']}: {sc['mb_per_s']:.3g} MB/s", fontsize="medium")
        ax.set_ylabel("USD per month (S3 Standard)")
    fig.suptitle("monthly cost by component")
    fig.legend(loc="outside lower center", ncols=len(_COMPONENTS), fontsize="small")
    _save(fig, path)


def write_plots(result: Mapping[str, Any], image_dir: Path, rel_prefix: str) -> dict[str, str]:
    """Every plot of ``result`` as PNGs in ``image_dir``; returns key -> ``rel_prefix/file.png``.

    Raises:
        PlotsUnavailable: matplotlib is not installed.
    """
    _figure()  # fail before writing anything when matplotlib is missing
    images: dict[str, str] = {}
    refs: Sequence[Mapping[str, Any]] = result.get("references", [])

    def out(key: str) -> Path:
        images[key] = f"{rel_prefix}/{key}.png"
        return image_dir / f"{key}.png"

    for name, w in result.get("workloads", {}).items():
        latencies = {k: v for k, v in w.get("latencies_ms", {}).items() if v}
        if latencies:
            drawn = [r for r in refs if any(wl == name for wl, _ in r.get("plot", []))]
            latency_cdf(name, latencies, drawn, out(f"latency-{name}"))
        series = [s for s in w.get("series", []) if s.get("t_s")]
        if series:
            throughput_over_time(name, series, out(f"throughput-{name}"))
    costs = result.get("costs", {})
    if costs.get("requests_per_gib"):
        requests_per_gib(costs["requests_per_gib"], out("requests-per-gib"))
    if costs.get("scenarios"):
        cost_breakdown(costs["scenarios"], out("costs"))
    return images
