"""The cost model behind the Spark-compaction crossover (pure): when does a cluster beat one cleaner?

Measured inputs (seconds, from one run on this machine; see :mod:`benchmarks.spark_compaction`):

* ``inproc_partition_s``: the in-process cleaner's time for one partition's round (it cleans partitions
  one after another: ``log.cleaner.threads`` = 1);
* ``map_task_s`` / ``group_task_s``: the work inside one map task (offset map of a partition) and one
  rewrite task (one group of segments), measured by running the job's task functions without Spark;
* ``driver_partition_s``: the driver's sequential work per partition (snapshot, cleaner claim, swap);
* ``job_overhead_s``: a Spark job's fixed cost (scheduling a stage and collecting results, a one-task
  no-op job); the compaction runs two jobs (map, rewrite);
* ``task_overhead_s``: Spark's per-task cost (serialising the task and its closure, a Python worker
  round trip), from a many-task no-op job: ``(T(n tasks) - T(1 task)) * cores / n``.

Model, for P partitions of G groups each on E executor cores (waves of E tasks)::

    T_inproc(P, G) = P * inproc_partition_s
    T_spark(P, G, E) = 2 * job_overhead_s + ceil(P / E) * (map_task_s + task_overhead_s)
                       + ceil(P * G / E) * (group_task_s + task_overhead_s) + P * driver_partition_s

The **crossover** is the smallest P (or, for one very large partition, the smallest G with P = 1) at which
``T_spark < T_inproc``; none when the per-partition driver work plus per-core work never undercuts the
single cleaner. It assumes the executors read the object store as fast as this machine reads its disk;
on real S3 both sides pay the same GET/PUT latency per byte, which the measured task costs then carry.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Costs", "crossover_groups", "crossover_partitions", "spark_seconds"]

_SEARCH_LIMIT = 1 << 22


@dataclass(frozen=True, slots=True)
class Costs:
    """Measured unit costs in seconds (see the module docstring)."""

    inproc_partition_s: float
    inproc_group_s: float  # per group of segments (a partition's time divided by its groups)
    map_task_s: float
    group_task_s: float
    driver_partition_s: float
    job_overhead_s: float
    task_overhead_s: float

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 6) for k, v in asdict(self).items()}


def inproc_seconds(c: Costs, partitions: int, groups: int, groups_measured: int) -> float:
    """The in-process cleaner's time: partitions one after another, linear in groups."""
    per_partition = c.inproc_partition_s if groups == groups_measured else c.inproc_group_s * groups
    return partitions * per_partition


def spark_seconds(c: Costs, partitions: int, groups: int, cores: int) -> float:
    """The job's modelled time on ``cores`` executor cores."""
    waves_map = math.ceil(partitions / cores)
    waves_rewrite = math.ceil(partitions * groups / cores)
    map_s = c.map_task_s * (groups if groups else 1)  # the map reads every group's keys
    return (2 * c.job_overhead_s + waves_map * (map_s + c.task_overhead_s)
            + waves_rewrite * (c.group_task_s + c.task_overhead_s) + partitions * c.driver_partition_s)


def _first(predicate: Any) -> int | None:
    """The smallest n in [1, limit] with ``predicate(n)`` (assumed monotonic), by doubling then bisection."""
    hi = 1
    while not predicate(hi):
        hi *= 2
        if hi > _SEARCH_LIMIT:
            return None
    lo = hi // 2 + 1 if hi > 1 else 1
    while lo < hi:
        mid = (lo + hi) // 2
        if predicate(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


def crossover_partitions(c: Costs, groups: int, cores: int) -> int | None:
    """Fewest partitions (of ``groups`` groups each) for which the Spark job is modelled faster."""
    return _first(lambda p: spark_seconds(c, p, groups, cores) < p * c.inproc_group_s * groups)


def crossover_groups(c: Costs, cores: int) -> int | None:
    """Fewest groups in ONE partition for which the Spark job is modelled faster (a very large partition)."""
    per_group_map = c.map_task_s
    def faster(g: int) -> bool:
        spark = (2 * c.job_overhead_s + per_group_map * g + c.task_overhead_s
                 + math.ceil(g / cores) * (c.group_task_s + c.task_overhead_s) + c.driver_partition_s)
        return spark < g * c.inproc_group_s

    return _first(faster)
