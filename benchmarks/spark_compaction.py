"""Spark compaction: the distributed job against the in-process cleaner on the same data.

Run ``python -m benchmarks spark-compaction [--quick] [--master local[2]]``. Results go to
``benchmarks/results/spark-compaction-<quick|full>.json`` and ``.md`` (``--out-dir`` to change).

Workload: one compacted topic of ``--partitions`` partitions on a ``file://`` store, each holding
``--segments`` sealed segments of ``--records`` records of ``--record-bytes`` logical bytes over ``--keys``
distinct keys (uniform), written directly as segment objects. The store directory is copied three times,
so every contender starts from identical bytes:

1. **in-process**: ``Store.run_cleaner()`` passes until none cleans anything (one partition per pass);
2. **task functions without Spark**: the job's own pieces (:mod:`s3stream.apps.spark.compaction`) called in
   this process, one partition after another, each phase timed (plan and claim, map, rewrite per group,
   swap): the work a Spark task does, without Spark;
3. **Spark**: :func:`s3stream.apps.spark.jobs.compact` on a local session (``--master``), plus two no-op jobs
   that measure Spark's fixed job overhead and per-task overhead.

The three resulting logs must be identical (records, offsets, horizons, segment ranges, checkpoints), else
the run exits 2. The measured unit costs feed :mod:`benchmarks.spark_model`, which reports the modelled
time of both sides against the measured ones and the **crossover**: how many partitions (or, for one very
large partition, how many groups of segments) it takes before the job on E executor cores beats the single
in-process cleaner. Timing uses ``time.perf_counter`` (a measurement; the stores read a ManualClock).
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import s3stream
from benchmarks.core.markdown import Markdown, md_table, render_result
from benchmarks.core.measure import machine_info
from benchmarks.core.result import Run, write_result
from benchmarks.core.scratch import run_in_scratch
from benchmarks.spark_model import Costs, crossover_groups, crossover_partitions, inproc_seconds, spark_seconds
from s3stream.base import layout
from s3stream.base.clock import ManualClock
from s3stream.base.records import RECORD_SCHEMA
from s3stream.base.settings import StoreSettings
from s3stream.format.segment import encode_segment
from s3stream.manifest.intents import add_segment, compose
from s3stream.manifest.model import SegmentRef

__all__ = ["SparkBenchConfig", "make_config", "render_markdown", "run", "run_standalone", "write_results"]

MiB = 1 << 20
T0 = 1_700_000_000_000
NOW = T0 + 86_400_000
TOPIC = "spark-compaction-bench"
CORES = (2, 4, 8, 16, 32, 64, 128)


@dataclass(frozen=True, slots=True)
class SparkBenchConfig:
    """One run's shape."""

    partitions: int
    segments: int
    records: int
    record_bytes: int
    keys: int
    master: str
    seed: int
    quick: bool

    @property
    def slug(self) -> str:
        return "quick" if self.quick else "full"

    @property
    def segment_bytes(self) -> int:
        return self.records * self.record_bytes


def build(url: str, wal: Path, cfg: SparkBenchConfig) -> int:
    """Write the topic's sealed segments directly; returns the logical bytes written."""
    rng = np.random.default_rng(cfg.seed)
    key_pool = pa.array([b"k%09d" % i for i in range(cfg.keys)], pa.binary())
    value_len = max(1, cfg.record_bytes - 21 - 10)
    total = 0
    with s3stream.open_store(url, clock=ManualClock(NOW), probe=False, wal_dir=str(wal)) as store:
        store.create_topic(TOPIC, cfg.partitions, {"cleanup.policy": "compact", "segment.bytes": cfg.segment_bytes,
                                                   "min.cleanable.dirty.ratio": "0.01"})
        rt = store.runtime
        for p in range(cfg.partitions):
            log = store.partition(TOPIC, p)
            refs = []
            for s in range(cfg.segments):
                base, n = s * cfg.records, cfg.records
                offs = np.arange(base, base + n, dtype=np.int64)
                vo = pa.py_buffer(np.arange(0, (n + 1) * value_len, value_len, dtype=np.int32).tobytes())
                values = pa.Array.from_buffers(pa.binary(), n, [None, vo, pa.py_buffer(rng.bytes(n * value_len))])
                table = pa.Table.from_arrays(
                    [pa.array(offs), pa.array(T0 + offs), key_pool.take(pa.array(rng.integers(0, cfg.keys, n))),
                     values, pa.nulls(n, RECORD_SCHEMA.field("headers").type), pa.nulls(n, pa.int64())],
                    schema=RECORD_SCHEMA)
                data, summary = encode_segment(table, base_offset=base, last_offset=base + n - 1,
                                               first_batch_max_timestamp=T0 + base)
                key = layout.segment_key(log.topic_id, p, base, rt.ids.ulid(NOW))
                rt.objstore.put(key, data)
                refs.append(SegmentRef(key, base, base + n - 1, summary.size_bytes, summary.object_size, n,
                                       summary.max_timestamp, T0 + base, T0, summary.crc32c))
                total += summary.size_bytes
            log.manifest_store.commit(compose(*(add_segment(r, None) for r in refs)))
    return total


def state(url: str) -> list[Any]:
    """The logs' defining facts (records with horizons, segment ranges, checkpoints) for the comparison."""
    out: list[Any] = []
    with tempfile.TemporaryDirectory() as wal, s3stream.open_store(url, probe=False, wal_dir=wal) as store:
        for p in range(store.partitions(TOPIC)):
            log = store.partition(TOPIC, p)
            m = log.manifest()
            table = log.read_arrow(log.log_start_offset, max_bytes=1 << 40)
            out.append((m.log_start_offset, m.next_offset, m.cleaner_checkpoint, dict(m.attributes),
                        [(s.base_offset, s.last_offset, s.record_count) for s in m.segments],
                        table.select(["offset", "key", "horizon_ms"]).to_pydict(),
                        pa.compute.sum(pa.compute.binary_length(table.column("value"))).as_py()))
    return out


def measure_inprocess(url: str, wal: Path) -> dict[str, Any]:
    """``run_cleaner()`` passes until idle; every round's duration."""
    rounds: list[float] = []
    started = time.perf_counter()
    with s3stream.open_store(url, clock=ManualClock(NOW), probe=False, wal_dir=str(wal)) as store:
        while (report := store.run_cleaner()).cleaned is not None:
            rounds.append(report.cleaned.duration_s)
    return {"seconds": round(time.perf_counter() - started, 3), "rounds": len(rounds),
            "round_seconds": [round(r, 4) for r in rounds]}


def measure_tasks(url: str) -> dict[str, Any]:
    """The job's task functions called here, one partition after another, each phase timed."""
    from s3stream.apps.spark.compaction import build_map, groups_of, plan_compaction, rewrite_group, swap
    from s3stream.apps.spark.snapshot import LogReader

    phases: dict[str, list[float]] = {"driver": [], "map": [], "rewrite_group": []}
    groups: list[int] = []
    with LogReader.open(url) as reader:
        topic = reader.topic(TOPIC)
        for p in range(topic.partitions):
            t = time.perf_counter()
            plan = plan_compaction(reader, url, "bench", reader.snapshot(topic, p), now_ms=NOW,
                                   settings=StoreSettings())
            driver = time.perf_counter() - t
            if plan is None:
                continue
            t = time.perf_counter()
            m = build_map(plan, reader.object_store)
            phases["map"].append(time.perf_counter() - t)
            results = []
            for i in range(len(groups_of(plan, m))):
                t = time.perf_counter()
                results.append(rewrite_group(plan, m, i, reader.object_store))
                phases["rewrite_group"].append(time.perf_counter() - t)
            groups.append(len(results))
            t = time.perf_counter()
            swap(reader, plan, m, results)
            reader.object_store.delete(plan.map_key)
            phases["driver"].append(driver + time.perf_counter() - t)
    return {"groups_per_partition": groups, **{k: [round(x, 4) for x in v] for k, v in phases.items()}}


def measure_spark(spark: Any, url: str) -> dict[str, Any]:
    """Spark's job and task overheads (no-op jobs, best of 3), then the compaction job until idle."""
    from s3stream.apps.spark.jobs import compact

    sc = spark.sparkContext
    cores = int(sc.defaultParallelism)

    def noop(tasks: int) -> float:
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            sc.parallelize(range(tasks), tasks).map(lambda x: x).collect()
            best = min(best, time.perf_counter() - t)
        return best

    one, many_tasks = noop(1), 8 * cores
    many = noop(many_tasks)
    task_overhead = max(0.0, (many - one) / max(1, -(-many_tasks // cores) - 1))
    runs: list[dict[str, Any]] = []
    started = time.perf_counter()
    while True:
        t = time.perf_counter()
        report = compact(spark, url, TOPIC, now_ms=NOW)
        if not report.outcomes:
            break
        runs.append({"seconds": round(time.perf_counter() - t, 3), "partitions": len(report.outcomes),
                     "statuses": sorted({o.status for o in report.outcomes})})
    return {"cores": cores, "job_overhead_s": round(one, 4), "task_overhead_s": round(task_overhead, 4),
            "noop_many_tasks_s": round(many, 4), "runs": runs, "seconds": round(time.perf_counter() - started, 3)}


def _costs(inproc: dict[str, Any], tasks: dict[str, Any], sp: dict[str, Any]) -> tuple[Costs, int]:
    groups = round(statistics.mean(tasks["groups_per_partition"])) if tasks["groups_per_partition"] else 1
    per_round = statistics.mean(inproc["round_seconds"]) if inproc["round_seconds"] else 0.0
    return Costs(
        inproc_group_s=per_round / max(1, groups),
        map_group_s=statistics.mean(tasks["map"]) / max(1, groups) if tasks["map"] else 0.0,
        rewrite_group_s=statistics.mean(tasks["rewrite_group"]) if tasks["rewrite_group"] else 0.0,
        driver_partition_s=statistics.mean(tasks["driver"]) if tasks["driver"] else 0.0,
        job_overhead_s=sp["job_overhead_s"], task_overhead_s=sp["task_overhead_s"]), groups


def model(cfg: SparkBenchConfig, costs: Costs, groups: int, cores: int, inproc: dict[str, Any],
          sp: dict[str, Any]) -> dict[str, Any]:
    """Modelled against measured times here, and the crossovers on larger clusters."""
    first_run = sp["runs"][0]["seconds"] if sp["runs"] else None
    return {
        "costs": costs.as_dict(), "groups_per_partition": groups,
        "check_here": {"cores": cores,
                       "spark_modelled_s": round(spark_seconds(costs, cfg.partitions, groups, cores), 3),
                       "spark_measured_first_run_s": first_run,
                       "inproc_modelled_s": round(inproc_seconds(costs, cfg.partitions, groups), 3),
                       "inproc_measured_cleaning_s": round(sum(inproc["round_seconds"]), 3)},
        "crossover": [{"cores": e, "partitions_at_this_size": crossover_partitions(costs, groups, e),
                       "partitions_of_one_group": crossover_partitions(costs, 1, e),
                       "groups_in_one_partition": crossover_groups(costs, e)} for e in CORES],
    }


def run(cfg: SparkBenchConfig, work: Path, spark: Any = None) -> dict[str, Any]:
    """Build, copy three times, measure the three contenders, compare their logs, model the crossover; the
    result document."""
    doc = Run.start("spark-compaction")
    dirs = {name: work / name for name in ("inproc", "tasks", "spark")}
    urls = {name: f"file://{d.resolve()}" for name, d in dirs.items()}
    started = time.perf_counter()
    logical = build(urls["inproc"], work / "wal-build", cfg)
    for name in ("tasks", "spark"):
        shutil.copytree(dirs["inproc"], dirs[name])
    build_s = time.perf_counter() - started
    inproc = measure_inprocess(urls["inproc"], work / "wal-inproc")
    tasks = measure_tasks(urls["tasks"])
    if spark is None:
        from s3stream.apps.spark.session import local_session

        spark = local_session("s3stream-benchmark", master=cfg.master, log_level="ERROR")
    sp = measure_spark(spark, urls["spark"])
    reference = state(urls["inproc"])
    problems = [f"{name}: its log differs from the in-process cleaner's" for name in ("tasks", "spark")
                if state(urls[name]) != reference]
    costs, groups = _costs(inproc, tasks, sp)
    body = {"logical_bytes": logical, "build_seconds": round(build_s, 3), "inprocess": inproc,
            "task_functions": tasks, "spark": sp, "model": model(cfg, costs, groups, sp["cores"], inproc, sp),
            "identical": not problems}
    target = {"spec": "file", "kind": "file", "store": "a scratch directory, copied once per contender",
              "spark_master": cfg.master}
    return doc.document(slug=cfg.slug, target=target, machine=machine_info(str(work)), parameters=asdict(cfg),
                        body=body, problems=problems)


def _fmt(value: int | None) -> str:
    return "never" if value is None else f"{value:,}"


def render_markdown(result: dict[str, Any]) -> str:
    """The summary of a spark-compaction result."""
    cfg, inp, sp, mdl = result["parameters"], result["inprocess"], result["spark"], result["model"]
    here, c = mdl["check_here"], mdl["costs"]
    tasks = result["task_functions"]
    spark_s = ", ".join(f"{r['seconds']} s ({r['partitions']} partitions)" for r in sp["runs"]) or "nothing to do"
    body = Markdown().heading("Contenders").paragraph(
        f"{cfg['partitions']} compacted partitions x {cfg['segments']} segments x {cfg['records']:,} records of "
        f"{cfg['record_bytes']} B ({result['logical_bytes'] / MiB:.1f} MiB logical), {cfg['keys']:,} keys, file:// "
        f"store; Spark master {cfg['master']} ({sp['cores']} cores). Results identical to the in-process cleaner: "
        f"**{'yes' if result['identical'] else 'NO'}**.")
    body.table(["contender", "seconds"], [
        [f"in-process cleaner ({inp['rounds']} rounds, one partition each)", inp["seconds"]],
        ["the job's task functions without Spark (sequential)",
         round(sum(tasks["map"]) + sum(tasks["rewrite_group"]) + sum(tasks["driver"]), 3)],
        [f"Spark job on {cfg['master']}", spark_s]])
    body.paragraph(
        f"Measured unit costs (seconds): in-process {c['inproc_group_s']} per group of segments; map task "
        f"{c['map_group_s']} per group; rewrite task {c['rewrite_group_s']} per group; driver (snapshot, cleaner "
        f"claim, swap) {c['driver_partition_s']} per partition; Spark job overhead {c['job_overhead_s']}; Spark task "
        f"overhead {c['task_overhead_s']} ({mdl['groups_per_partition']} groups per partition).")
    body.paragraph(
        f"Model check on this machine ({here['cores']} cores): Spark modelled {here['spark_modelled_s']} s, measured "
        f"{here['spark_measured_first_run_s']} s; in-process modelled {here['inproc_modelled_s']} s, measured "
        f"{here['inproc_measured_cleaning_s']} s of cleaning rounds.")
    body.heading("Crossover: where Spark's parallelism pays off").paragraph(
        "`T_inproc = P x G x inproc_group`, `T_spark = 2 x job + ceil(P/E) x (G x map_group + task) + "
        "ceil(P x G/E) x (rewrite_group + task) + P x driver` (P partitions of G groups, E executor cores; see "
        "`benchmarks/spark_model.py`). Smallest size at which the job is modelled faster:")
    body.paragraph(*md_table(
        ["executor cores E", f"partitions of this size ({mdl['groups_per_partition']} groups)",
         "partitions of one group", "groups in ONE partition"],
        [[x["cores"], _fmt(x["partitions_at_this_size"]), _fmt(x["partitions_of_one_group"]),
          _fmt(x["groups_in_one_partition"])] for x in mdl["crossover"]]))
    body.paragraph(
        "The job pays two Spark jobs and one task per partition and per group, and the driver's sequential "
        "per-partition work (manifest snapshot, cleaner epoch claim, swap commit), which no number of cores removes; "
        "the in-process cleaner pays only the per-group work. The crossover moves down as partitions grow (more "
        "groups per task overhead) and up with the driver's per-partition work. Costs are this machine's reading a "
        "local directory; against S3 every per-group cost grows by the GET/PUT latency, which favours Spark (more "
        "I/O in flight).")
    return render_result(result, f"Spark compaction benchmark ({result['slug']})", body,
                         verified="the job's and the task functions' logs are identical to the in-process cleaner's "
                                  "(records, offsets, horizons, segment ranges, checkpoints)")


def write_results(result: dict[str, Any], out_dir: Path) -> Path:
    """``out_dir/spark-compaction-<slug>.json`` and its ``.md``; the JSON path."""
    return write_result(result, out_dir / f"spark-compaction-{result['slug']}.json", render_markdown(result))


def make_config(*, quick: bool = False, partitions: int = 8, segments: int = 4, records: int = 20_000,
                record_bytes: int = 512, keys: int = 50_000, master: str = "local[2]",
                seed: int = 7) -> SparkBenchConfig:
    """A run's shape from the command's options (``quick``: 4 partitions x 3 segments x 4000 records of 256 B)."""
    if quick:
        return SparkBenchConfig(partitions=4, segments=3, records=4000, record_bytes=256, keys=2000, master=master,
                                seed=seed, quick=True)
    return SparkBenchConfig(partitions=partitions, segments=segments, records=records, record_bytes=record_bytes,
                            keys=keys, master=master, seed=seed, quick=False)


def run_standalone(cfg: SparkBenchConfig, out_dir: Path, work_dir: Path | None = None) -> int:
    """Run in a scratch directory, write the result files, print the summary. Exit status: 0 done, 2 when a
    contender's log differs (the files are written either way)."""
    result = run_in_scratch(lambda work: run(cfg, work), prefix="s3stream-spark-bench-", work_dir=work_dir,
                            write=lambda r: write_results(r, out_dir))
    return 0 if result["identical"] else 2

