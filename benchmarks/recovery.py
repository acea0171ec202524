"""Recovery: what opening a store costs when its last process left a full local WAL behind.

Run ``python -m benchmarks recovery --target file|seaweedfs|latency:<profile>|s3://... [--quick]``. Results go
to ``benchmarks/results/recovery-<target>[-quick].json`` and ``.md`` (``--out-dir`` to change). The suite's
``recovery`` workload (:func:`run_recovery`, ``python -m benchmarks suite --workloads recovery``) runs the same
measurement with the suite's sizes, flush settings and store options on its target.

Issue 24 found every open replaying the whole active local WAL with one GET per entry (20,000 GETs after
20,000 small appends, even after a clean close). Three scenarios, each on a fresh store root and WAL
directory of the target, each written by a child process (``ack=wal``, the store's own flushes):

1. **clean close**: ``--entries`` single-record appends round-robin over ``--partitions`` partitions, then
   ``close()``;
2. **crash**: the same appends, a ``flush()``, then a tenth as many more appends acknowledged from the
   local WAL, and the child kills itself (SIGKILL) right after the last acknowledgement: some entries are
   published, some only local, and nothing in the process cleans up;
3. **crash, no trim point**: the same, and the WAL's trim point record removed before the reopen (a WAL
   written before there was one, or the record lost with the power): every entry is read back and the
   published ones must be skipped by their offsets.

Measured in this process, through :class:`RecordingObjectStore` (so every request is counted on the wire
of the wrapper, by kind and by key family): the open (wall and CPU seconds, requests), then every
acknowledged record is read back and checked (exactly once, at its offset), then a second open of the
same root (after the first one's clean close). Wall time is measured with ``time.perf_counter``; the
stores read their own clocks.

The suite's baseline is the replay before issue 24 (item 2) as a model, not a run: it read every entry of the
local WAL (no trim point, the active file is never deleted) and made one GET per entry.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import s3stream
from benchmarks.core.markdown import Markdown, render_result
from benchmarks.core.measure import machine_info
from benchmarks.core.requests import key_family
from benchmarks.core.result import Run, WorkloadResult, write_result
from benchmarks.core.scratch import run_in_scratch
from benchmarks.core.targets import Target, open_target, target_slug
from benchmarks.suite.context import SuiteContext
from s3stream import Record
from s3stream.objectstore.recording import KINDS, RecordingObjectStore
from wal import WalWriter
from wal.storage import TRIM_POINT_FILE_NAME

__all__ = ["SCENARIOS", "RecoveryConfig", "make_config", "measure", "render_markdown", "run", "run_recovery",
           "run_standalone", "writer_main"]

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "recovery-bench"
# name -> (what the writer does, whether the trim point record is removed before the reopen)
SCENARIOS: dict[str, tuple[str, bool]] = {
    "clean_close": ("close", False),
    "crash": ("crash", False),
    "crash_no_trim_point": ("crash", True),
}
LABELS = {"clean_close": "clean close", "crash": "crash (SIGKILL)",
          "crash_no_trim_point": "crash, trim point removed"}


@dataclass(frozen=True, slots=True)
class RecoveryConfig:
    """One run's shape; ``options`` are the store options of both the writer and the reopen."""

    entries: int = 20_000
    partitions: int = 4
    record_bytes: int = 100
    quick: bool = False
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def unpublished(self) -> int:
        """Entries a crashing writer appends after its last ``flush()``."""
        return max(1, self.entries // 10)


def value_of(partition: int, index: int, size: int) -> bytes:
    """The value of record ``index`` of ``partition``: names both, so a misplaced record shows."""
    head = b"%d-%d|" % (partition, index)
    return (head * (size // len(head) + 1))[:size]


# -- the writer (a child process) ------------------------------------------------------------------------


def _write(url: str, wal_dir: str, cfg: RecoveryConfig, mode: str) -> dict[int, int]:
    """Append ``cfg.entries`` records (and, to crash, flush and append more); the acknowledged counts."""
    acked = dict.fromkeys(range(cfg.partitions), 0)
    store = s3stream.open_store(url, wal_dir=wal_dir, **{**cfg.options, "probe": False})
    store.create_topic(TOPIC, partitions=cfg.partitions)
    logs = [store.partition(TOPIC, p) for p in range(cfg.partitions)]

    def append(count: int) -> None:
        for n in range(count):
            p = n % cfg.partitions
            logs[p].append([Record(None, value_of(p, acked[p], cfg.record_bytes))])
            acked[p] += 1

    append(cfg.entries)
    if mode == "close":
        store.close()
    else:
        store.flush()
        append(cfg.unpublished)
    return acked


def writer_main(argv: list[str]) -> int:
    """The writer child's entry point: ``URL WAL_DIR MODE CONFIG_JSON``; prints the acknowledged counts."""
    url, wal_dir, mode, cfg_json = argv
    cfg = RecoveryConfig(**json.loads(cfg_json))
    acked = _write(url, wal_dir, cfg, mode)
    print(json.dumps({str(p): n for p, n in acked.items()}), flush=True)  # before the kill: all acknowledged
    if mode == "crash":
        os.kill(os.getpid(), signal.SIGKILL)  # no close, no flush, no atexit: as a killed process
    return 0


def _run_writer(url: str, wal_dir: str, cfg: RecoveryConfig, mode: str) -> tuple[dict[int, int], float]:
    """Run the writer in a child process (the target's credentials are in the inherited environment)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    started = time.perf_counter()
    child = "import sys; from benchmarks.recovery import writer_main; sys.exit(writer_main(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", child, url, wal_dir, mode, json.dumps(asdict(cfg))], cwd=ROOT,
                          env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    expected = -signal.SIGKILL if mode == "crash" else 0
    lines = done.stdout.strip().splitlines()
    if done.returncode != expected or not lines:
        raise RuntimeError(f"recovery writer ({mode}) exited {done.returncode}: {done.stderr[-2000:]}")
    return {int(p): n for p, n in json.loads(lines[-1]).items()}, seconds


# -- measuring ---------------------------------------------------------------------------------------------


def _requests(rec: RecordingObjectStore) -> dict[str, Any]:
    by_family: Counter[str] = Counter(f"{op} {key_family(key)}" for op, key, _size in rec.log)
    counts = rec.counts()
    return {"by_kind": counts, "total": sum(counts.values()), "by_kind_and_family": dict(sorted(by_family.items()))}


def _wal_state(wal_dir: str) -> dict[str, int]:
    """The local WAL as the reopen finds it: its entries and its trim point (what a replay starts from)."""
    (node_dir,) = [p for p in Path(wal_dir).iterdir() if p.is_dir()]
    with WalWriter(node_dir) as wal:
        return {"entries": wal.next_seq - wal.first_seq, "next_seq": wal.next_seq, "trim_seq": wal.trim_seq,
                "to_read": wal.next_seq - max(wal.trim_seq, wal.first_seq)}


def _check(store: s3stream.Store, acked: dict[int, int], size: int) -> list[str]:
    """Every acknowledged record exactly once at its offset; the problems found."""
    problems = []
    for p, count in acked.items():
        log = store.partition(TOPIC, p)
        offsets: list[int] = []
        values: list[bytes] = []
        while len(offsets) < count + 1:
            table = log.read_arrow(len(offsets), max_bytes=8 << 20)
            if table.num_rows == 0:
                break
            offsets += table.column("offset").to_pylist()
            values += table.column("value").to_pylist()
        if offsets != list(range(count)) or log.log_end_offset != count:
            problems.append(f"partition {p}: {len(offsets)} records (log end {log.log_end_offset}), {count} acked")
        elif values != [value_of(p, i, size) for i in range(count)]:
            problems.append(f"partition {p}: wrong values")
    return problems


def _open(target: Target, name: str, wal_dir: str, cfg: RecoveryConfig) -> tuple[s3stream.Store, dict[str, Any]]:
    """Open the store ``name`` through a request recorder; the open's wall and CPU time and requests."""
    url, objstore = target.store(name)
    rec = RecordingObjectStore(objstore, log_size=1_000_000)
    started, cpu = time.perf_counter(), time.process_time()
    store = s3stream.open_store(url, object_store=rec, wal_dir=wal_dir, **{**cfg.options, "probe": False})
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    req = _requests(rec)
    return store, {"open_s": round(wall, 4), "open_cpu_s": round(cpu, 4), "requests": req,
                   "requests_per_partition": round(req["total"] / cfg.partitions, 2)}


def _scenario(target: Target, cfg: RecoveryConfig, name: str) -> dict[str, Any]:
    mode, drop_trim_point = SCENARIOS[name]
    root = f"recovery-{name}"
    url = target.store_url(root)
    wal_dir = target.wal_dir(root)
    acked, write_s = _run_writer(url, wal_dir, cfg, mode)
    if drop_trim_point:
        for node_dir in Path(wal_dir).iterdir():
            (node_dir / TRIM_POINT_FILE_NAME).unlink(missing_ok=True)
    wal = _wal_state(wal_dir)
    store, first = _open(target, root, wal_dir, cfg)
    try:
        problems = _check(store, acked, cfg.record_bytes)
    finally:
        store.close()
    store, second = _open(target, root, wal_dir, cfg)
    try:
        problems += [f"after the second open: {p}" for p in _check(store, acked, cfg.record_bytes)]
    finally:
        store.close()
    return {"writer": mode, "trim_point_removed": drop_trim_point, "write_s": round(write_s, 2),
            "acked": sum(acked.values()), "local_wal": wal, "open": first, "reopen": second, "problems": problems}


def measure(target: Target, cfg: RecoveryConfig,
            phase: Callable[[str], Any] | None = None) -> dict[str, Any]:
    """Every scenario on ``target``; ``phase(label)`` (a context manager factory) frames each."""
    out: dict[str, Any] = {}
    for name in SCENARIOS:
        label = f"recovery: {LABELS[name]}, {cfg.entries:,} entries over {cfg.partitions} partitions"
        if phase is None:
            out[name] = _scenario(target, cfg, name)
        else:
            with phase(label):
                out[name] = _scenario(target, cfg, name)
    return out


# -- reporting ----------------------------------------------------------------------------------------------


def render_markdown(result: dict[str, Any]) -> str:
    """The summary of a standalone recovery result."""
    c = result["parameters"]
    body = Markdown().heading("Scenarios").paragraph(
        f"{c['entries']:,} single-record appends ({c['record_bytes']}-byte values, `ack=wal`) round-robin over "
        f"{c['partitions']} partitions, written by a child process; a crashing writer then flushes and "
        f"appends {max(1, c['entries'] // 10):,} more, acknowledged from its local WAL only, and is killed. "
        "The reopen runs in this process; requests are counted by a recording wrapper.")
    rows = []
    for name, s in result["scenarios"].items():
        o, r = s["open"], s["reopen"]
        k = o["requests"]["by_kind"]
        rows.append([LABELS[name], f"{s['local_wal']['entries']:,}", f"{s['local_wal']['to_read']:,}", o["open_s"],
                     o["open_cpu_s"], o["requests"]["total"], o["requests_per_partition"], *(k[kind] for kind in KINDS),
                     r["open_s"], r["requests"]["total"], "OK" if not s["problems"] else "FAILED"])
    body.table(["scenario", "WAL entries", "read back", "open s", "open CPU s", "requests", "per partition", "PUT",
                "GET", "HEAD", "LIST", "DELETE", "second open s", "second open requests", "verified"], rows)
    body.heading("Requests of the open by kind and key family").bullets(
        f"{LABELS[name]}: " + (", ".join(f"{k}: {v}" for k, v in s["open"]["requests"]["by_kind_and_family"].items())
                               or "none")
        for name, s in result["scenarios"].items())
    title = f"Recovery benchmark: {result['target']['spec']}{' (quick)' if c['quick'] else ''}"
    return render_result(result, title, body,
                         verified="every acknowledged record exactly once at its offset, after both opens")


def _notes(scenarios: dict[str, Any]) -> list[str]:
    return ["*read back*: local WAL entries the open reads (from the trim point on); the rest were published "
            "and trimmed.",
            "Per replayed partition the open reads its topic document and manifest (writer check, claim, "
            "commit); the node's WAL objects from the manifest's cursor are read once for all partitions (one "
            "GET each: their number grows with the time since the last seal, not with entries); the node fences "
            "its namespace (LIST, HEAD, PUT) and flushes what it replayed.",
            "Before issue 24 item 2, each of these opens made one GET per local WAL entry it read (all of "
            "them: 20,000 GETs after 20,000 appends).",
            "Writer seconds (append phase in a child process): "
            + ", ".join(f"{LABELS[n]} {s['write_s']}" for n, s in scenarios.items()) + "."]


def run(spec: str, cfg: RecoveryConfig, work_dir: Path) -> dict[str, Any]:
    """Open the target, measure every scenario, and return the result document."""
    doc = Run.start("recovery")
    with open_target(spec, work_dir) as target:
        scenarios = measure(target, cfg, None)
        target_info = {"spec": spec, "slug": target.slug, **target.description}
        machine = machine_info(str(work_dir))
    problems = [f"{LABELS[name]}: {p}" for name, s in scenarios.items() for p in s["problems"]]
    slug = f"{target_slug(spec)}{'-quick' if cfg.quick else ''}"
    return doc.document(slug=slug, target=target_info, machine=machine, parameters=asdict(cfg),
                        body={"scenarios": scenarios}, problems=problems, notes=_notes(scenarios))


def make_config(*, quick: bool = False, entries: int | None = None, partitions: int = 4, record_bytes: int = 100,
                options: dict[str, Any] | None = None) -> RecoveryConfig:
    """A run's shape from the command's options (20,000 entries; 2,000 with ``quick``)."""
    cfg = RecoveryConfig(entries=entries or (2_000 if quick else 20_000), partitions=partitions,
                         record_bytes=record_bytes, quick=quick, options=dict(options or {}))
    if cfg.entries < cfg.partitions or cfg.partitions < 1:
        raise ValueError("need --partitions >= 1 and --entries >= --partitions")
    return cfg


def run_standalone(spec: str, cfg: RecoveryConfig, out_dir: Path, work_dir: Path | None = None) -> int:
    """Run, write ``out_dir/recovery-<target>[-quick].json`` and its ``.md``, print the summary; 1 if a check
    failed."""
    result = run_in_scratch(lambda work: run(spec, cfg, work), prefix="s3stream-recovery-bench-", work_dir=work_dir,
                            write=lambda r: write_result(r, out_dir / f"recovery-{r['slug']}.json",
                                                         render_markdown(r)))
    return 1 if result["problems"] else 0


# -- the suite ----------------------------------------------------------------------------------------------

NAME = "recovery"
RECORD_BYTES = 100  # small appends: the entries, not the bytes, are what the old replay paid for


def run_recovery(ctx: SuiteContext) -> WorkloadResult:
    """Measure every scenario; raise if an acknowledged record was lost, duplicated or moved."""
    started = time.perf_counter()
    p = ctx.params
    cfg = RecoveryConfig(entries=p.recovery_entries, partitions=p.recovery_partitions, record_bytes=RECORD_BYTES,
                         quick=p.quick, options=p.open_options())
    scenarios = measure(ctx.target, cfg, ctx.progress.phase)
    problems = [f"{LABELS[name]}: {problem}" for name, s in scenarios.items() for problem in s["problems"]]
    if problems:
        raise RuntimeError("recovery: wrong result: " + "; ".join(problems[:10]))
    result = _result(cfg, scenarios)
    result.seconds = time.perf_counter() - started
    return result


def _result(cfg: RecoveryConfig, scenarios: dict[str, Any]) -> WorkloadResult:
    result = WorkloadResult(NAME)
    for name, s in scenarios.items():
        opened = s["open"]
        result.figure(f"{name}_open_s", opened["open_s"], "s")
        result.figure(f"{name}_open_requests", opened["requests"]["total"], "requests")
        result.figure(f"{name}_requests_per_partition", opened["requests_per_partition"], "requests")
        result.figure(f"{name}_entries_read", s["local_wal"]["to_read"], "entries")
        result.figure(f"{name}_second_open_requests", s["reopen"]["requests"]["total"], "requests")
        result.baseline[f"{name}_open_requests"] = float(s["local_wal"]["entries"])  # it read every entry
    crash = scenarios["crash"]["open"]["requests"]["by_kind"]
    result.notes += [
        f"{cfg.entries:,} single-record appends ({cfg.record_bytes}-byte values, ack=wal) over {cfg.partitions} "
        f"partitions by a child process; a crashing writer flushes, appends {cfg.unpublished:,} more and is killed "
        "(SIGKILL); crash_no_trim_point also removes the WAL's trim point record before the reopen",
        "requests: the open's, counted by a recording wrapper; crash open by kind: "
        + ", ".join(f"{kind} {n}" for kind, n in crash.items()),
        "baseline (a model): the replay before issue 24 item 2, one GET per local WAL entry, all of which it read "
        "(even after a clean close)",
        "verified: every acknowledged record exactly once at its offset, after the reopen and after a second one",
    ]
    return result
