"""The one markdown writer: every result file's ``.md`` is rendered here from its result document alone.

Every summary has the same layout (:func:`render_result`): the title; a table of run facts (target, when,
machine, WAL filesystem, versions, git commit, parameters, verdict); the judged figures (value, the raw
limit or bound it is judged against, ratio, target, result) when the workload judges any; the workload's
own sections, built with :class:`Markdown`; correctness (the problems found, or what was verified); the
notes. Numbers are printed by :func:`fmt` (about three significant digits, thousands separated).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from benchmarks.core.result import Figure

__all__ = ["FIGURE_HEADER", "Markdown", "figure_rows", "fmt", "md_table", "render_result", "run_facts"]

#: Columns of the judged-figures table (also the engine's console table).
FIGURE_HEADER = ("Figure", "s3stream", "Reference", "Reference is", "Ratio", "Target", "Result")

# Harness knobs that say nothing about what was measured: not shown among the parameters.
_HIDDEN_PARAMETERS = frozenset({"target", "out", "out_dir", "work_dir", "keep_work_dir", "progress", "quick",
                                "workloads"})


def fmt(value: Any) -> str:
    """A number with about three significant digits, thousands separated; other values as text."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "-" if value is None else str(value)
    v = float(value)
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """A markdown table's lines (cells as text, ``|`` escaped)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell).replace("|", "\\|") for cell in row) + " |" for row in rows]
    return lines


class Markdown:
    """A markdown document built block by block (blocks are separated by a blank line)."""

    def __init__(self) -> None:
        self._blocks: list[str] = []

    def heading(self, text: str, level: int = 2) -> Markdown:
        self._blocks.append(f"{'#' * level} {text}")
        return self

    def paragraph(self, *lines: str) -> Markdown:
        """One paragraph; ``lines`` are kept as separate lines of it."""
        self._blocks.append("\n".join(lines))
        return self

    def table(self, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> Markdown:
        self._blocks.append("\n".join(md_table(header, rows)))
        return self

    def bullets(self, items: Iterable[str]) -> Markdown:
        lines = [f"- {item}" for item in items]
        if lines:
            self._blocks.append("\n".join(lines))
        return self

    def image(self, alt: str, path: str) -> Markdown:
        self._blocks.append(f"![{alt}]({path})")
        return self

    def extend(self, other: Markdown) -> Markdown:
        self._blocks += other._blocks
        return self

    def text(self) -> str:
        return "\n\n".join(self._blocks) + "\n"


def figure_rows(figures: Iterable[Figure]) -> list[list[str]]:
    """The judged-figures table's rows (:data:`FIGURE_HEADER`)."""
    return [[f.title, f"{fmt(f.value)} {f.unit}", f"{fmt(f.reference)} {f.unit}", f.reference_label,
             f"{f.ratio:.2f}", f.target, "PASS" if f.passed else "FAIL"] for f in figures]


def _verdict(doc: Mapping[str, Any], figures: Sequence[Figure]) -> str:
    problems = doc.get("problems") or []
    parts = []
    if figures:
        missed = sum(not f.passed for f in figures)
        parts.append(f"all {len(figures)} targets met" if not missed else f"{missed} of {len(figures)} targets missed")
    parts.append("results verified" if not problems else f"{len(problems)} wrong result(s)")
    return "; ".join(parts)


def run_facts(doc: Mapping[str, Any], extra: Sequence[tuple[str, str]] = ()) -> list[list[str]]:
    """The run-facts table's rows: target, when, machine, WAL filesystem, versions, commit, parameters."""
    target, machine = doc.get("target", {}), doc.get("machine", {})
    versions, params = doc.get("versions", {}), doc.get("parameters", {})
    fs = machine.get("wal_dir_filesystem", {})
    mem = machine.get("memory_bytes") or 0
    uncommitted = versions.get("git_uncommitted")
    rows = [
        ["Target", f"`{target.get('spec', '?')}` ({target.get('kind', '?')})"],
        ["Run", f"{doc.get('started_at')} to {doc.get('finished_at')} ({fmt(doc.get('wall_seconds'))} s)"],
        ["Machine", f"{machine.get('cores')} cores ({machine.get('cores_usable')} usable), {machine.get('cpu_model')}, "
                    f"{mem / (1 << 30):.1f} GiB RAM, {machine.get('platform')}; allocator "
                    f"{machine.get('allocator') or '-'}"],
        ["WAL filesystem", f"{fs.get('fs_type', '?')} on {fs.get('device', '?')} (load average at start "
                           f"{machine.get('load_average_at_start')})"],
        ["Versions", f"s3stream {versions.get('s3stream')}, Python {versions.get('python')}, pyarrow "
                     f"{versions.get('pyarrow')}, boto3 {versions.get('boto3')}, weed {versions.get('weed') or '-'}"],
        ["Git commit", f"`{versions.get('git_commit') or 'unknown'}`"
                       + (f", with uncommitted changes to {', '.join(uncommitted)}" if uncommitted else "")],
        *[[label, value] for label, value in extra],
        ["Parameters", ", ".join(f"{k}={v}" for k, v in params.items() if k not in _HIDDEN_PARAMETERS)],
    ]
    figures = [Figure.from_dict(f) for f in doc.get("figures", [])]
    if figures or "problems" in doc:
        rows.append(["Result", _verdict(doc, figures)])
    return rows


def render_result(doc: Mapping[str, Any], title: str, body: Markdown, *, verified: str | None = None,
                  facts: Sequence[tuple[str, str]] = ()) -> str:
    """A result document's summary: title, run facts (plus ``facts``), judged figures, ``body``, correctness
    (the problems, or ``verified``: what the workload's checks established), notes."""
    md = Markdown().heading(title, 1).table(["", ""], run_facts(doc, facts))
    figures = [Figure.from_dict(f) for f in doc.get("figures", [])]
    if figures:
        md.heading("Figures").table(FIGURE_HEADER, figure_rows(figures))
    md.extend(body)
    problems = doc.get("problems") or []
    if problems:
        md.heading("Correctness").paragraph("FAILED:").bullets(problems)
    elif verified:
        md.heading("Correctness").paragraph(f"OK: {verified}.")
    notes = doc.get("notes") or []
    if notes:
        md.heading("Notes").bullets(notes)
    return md.text()
