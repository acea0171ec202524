"""The cost model behind the Spark-compaction crossover (pure): when does a cluster beat one cleaner?

Measured inputs (seconds, from one run on this machine; see :mod:`benchmarks.spark_compaction`):

* ``inproc_group_s``: the in-process cleaner's time per group of segments (a partition's round divided by
  its groups; it cleans partitions one after another: ``log.cleaner.threads`` = 1);
* ``map_group_s`` / ``rewrite_group_s``: the work per group inside the map task (the offset map reads
  every group's keys, sequentially in one task per partition) and inside one rewrite task, measured by
  running the job's task functions without Spark;
* ``driver_partition_s``: the driver's sequential work per partition (snapshot, cleaner claim, swap);
* ``job_overhead_s``: a Spark job's fixed cost (scheduling a stage and collecting results, a one-task
  no-op job); the compaction runs two jobs (map, rewrite);
* ``task_overhead_s``: Spark's per-task cost (serialising the task and its closure, a Python worker
  round trip), from a many-task no-op job: ``(T(n tasks) - T(1 task)) * cores / n``.

Model, for P partitions of G groups each on E executor cores (waves of E tasks)::

    T_inproc(P, G) = P * G * inproc_group_s
    T_spark(P, G, E) = 2 * job_overhead_s + ceil(P / E) * (G * map_group_s + task_overhead_s)
                       + ceil(P * G / E) * (rewrite_group_s + task_overhead_s) + P * driver_partition_s

The **crossover** is the smallest P (or, for one very large partition, the smallest G with P = 1) at which
``T_spark < T_inproc``; none when the per-partition driver work plus per-core work never undercuts the
single cleaner. It assumes the executors read the object store as fast as this machine reads its disk;
on real S3 both sides pay the same GET/PUT latency per byte, which the measured task costs then carry.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

__all__ = ["Costs", "crossover_groups", "crossover_partitions", "inproc_seconds", "spark_seconds"]

_SEARCH_LIMIT = 1 << 22


@dataclass(frozen=True, slots=True)
class Costs:
    """Measured unit costs in seconds (see the module docstring); "group" = one group of segments."""

    inproc_group_s: float
    map_group_s: float
    rewrite_group_s: float
    driver_partition_s: float
    job_overhead_s: float
    task_overhead_s: float

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 6) for k, v in asdict(self).items()}


def inproc_seconds(c: Costs, partitions: int, groups: int) -> float:
    """The in-process cleaner: partitions one after another, each linear in its groups."""
    return partitions * groups * c.inproc_group_s


def spark_seconds(c: Costs, partitions: int, groups: int, cores: int) -> float:
    """The job's modelled time on ``cores`` executor cores (waves of ``cores`` tasks per stage)."""
    map_waves = math.ceil(partitions / cores)
    rewrite_waves = math.ceil(partitions * groups / cores)
    return (2 * c.job_overhead_s + map_waves * (groups * c.map_group_s + c.task_overhead_s)
            + rewrite_waves * (c.rewrite_group_s + c.task_overhead_s) + partitions * c.driver_partition_s)


def _first(predicate: Callable[[int], bool]) -> int | None:
    """The smallest n >= 1 with ``predicate(n)`` (assumed monotonic): doubling, then bisection."""
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
    return _first(lambda p: spark_seconds(c, p, groups, cores) < inproc_seconds(c, p, groups))


def crossover_groups(c: Costs, cores: int) -> int | None:
    """Fewest groups in ONE partition (a very large one) for which the Spark job is modelled faster."""
    return _first(lambda g: spark_seconds(c, 1, g, cores) < inproc_seconds(c, 1, g))
