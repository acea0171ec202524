"""What every benchmark workload shares: the result model and markdown writer, measuring, targets, raw limits.

* :mod:`~benchmarks.core.result`: the result model (judged figures, a suite workload's result, the result
  document's envelope) and how result files are written;
* :mod:`~benchmarks.core.markdown`: the one markdown writer of every result's summary;
* :mod:`~benchmarks.core.measure`: timing, percentiles, CPU and RSS sampling, machine facts, versions;
* :mod:`~benchmarks.core.targets`: where the data goes (a local dir, SeaweedFS started for the run, a latency
  model, a real S3 bucket) and the raw clients that measure its limits;
* :mod:`~benchmarks.core.rawlimits`: the raw limits (disk, fsync, PUT, ranged GET) and the suite's set;
* :mod:`~benchmarks.core.producers`: record payloads and producer threads (saturating or rate-limited);
* :mod:`~benchmarks.core.fsyncprobe`: the raw fsync latency probed by a child process during a phase;
* :mod:`~benchmarks.core.profiler`: a whole-process stack sampler (every thread) for finding bottlenecks;
* :mod:`~benchmarks.core.requests`: object-store requests by key family;
* :mod:`~benchmarks.core.progress`, :mod:`~benchmarks.core.process`, :mod:`~benchmarks.core.scratch`: the
  progress bar, how a benchmark process starts (and stops on SIGTERM), scratch directories.
"""
