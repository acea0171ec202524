"""The s3stream benchmark harness: engine figures measured against raw limits of the same machine and target.

Run ``python -m benchmarks engine --target seaweedfs|file|latency:<profile>|s3://... --duration 60``
(see ``benchmarks/README.md``). Every figure is a ratio to a raw limit measured in the same run on the
same machine and target (fsync'd disk bandwidth, concurrent PUT/GET bandwidth, fsync latency), so the
results stay comparable across machines and noisy neighbours.

Modules, one job each:

* :mod:`~benchmarks.measure`: timing, percentiles, CPU and RSS sampling, machine facts;
* :mod:`~benchmarks.targets`: where the data goes (a local dir, SeaweedFS started for the run, a latency
  model, a real S3 bucket) and the raw clients that measure its limits;
* :mod:`~benchmarks.rawlimits`: the raw limits (disk, fsync, PUT, ranged GET);
* :mod:`~benchmarks.workload`: record payloads and producer threads (saturating or rate-limited);
* :mod:`~benchmarks.ingest`: sustained ingest, ack latency at half load, memory;
* :mod:`~benchmarks.costs`: S3 PUTs per GiB and sequential reads from sealed segments;
* :mod:`~benchmarks.profiler`: a whole-process stack sampler (every thread) for finding bottlenecks;
* :mod:`~benchmarks.report`: figures, targets, pass/fail, JSON + markdown + rich table;
* :mod:`~benchmarks.params`: the run's parameters (full and ``--quick`` defaults);
* :mod:`~benchmarks.progress`: the progress bar;
* :mod:`~benchmarks.engine`: the run, phase by phase; ``__main__``: the command line.

Other benchmarks may live beside these modules with their own entry points.

Benchmarks measure elapsed time with ``time.perf_counter`` (a measurement, not semantics: the
store itself still gets its clock injected); pyproject exempts ``benchmarks/`` from the clock ban.
"""
