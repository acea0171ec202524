"""The s3stream benchmarks: one command line, one result model, one markdown writer, every workload under it.

Run ``python -m benchmarks --help`` for the workloads, ``python -m benchmarks <workload> --help`` for one's
options (see ``benchmarks/README.md``). Every judged figure is a ratio to a raw limit measured in the same
run on the same machine and target (fsync'd disk bandwidth, concurrent PUT/GET bandwidth, fsync latency, the
raw rewrite of the same segments), so results stay comparable across machines and noisy neighbours.

The map (one module or package per command, named as the command; shared code below them):

* :mod:`~benchmarks.cli` (``__main__``): the command line;
* :mod:`~benchmarks.engine`: the engine workload (its parameters, phases and judged figures);
* :mod:`~benchmarks.compaction` (with :mod:`~benchmarks.compaction_baseline`), :mod:`~benchmarks.retention`,
  :mod:`~benchmarks.recovery`: workloads that run standalone and as suite workloads (one module each: the
  standalone command's run and the suite's ``run_<name>(ctx)``);
* :mod:`~benchmarks.spark_compaction` (with :mod:`~benchmarks.spark_model`): the Spark job against the
  in-process cleaner;
* :mod:`~benchmarks.ingest`, :mod:`~benchmarks.e2e`, :mod:`~benchmarks.catchup`, :mod:`~benchmarks.mixed`:
  suite workloads;
* :mod:`~benchmarks.suite`: the suite's runner, workload registry, ratios, naive baseline, reference lines,
  cost model, plots and README summary;
* :mod:`~benchmarks.core`: what every workload shares: the result model (:mod:`~benchmarks.core.result`),
  the markdown writer (:mod:`~benchmarks.core.markdown`), measuring (:mod:`~benchmarks.core.measure`),
  targets (:mod:`~benchmarks.core.targets`), raw limits (:mod:`~benchmarks.core.rawlimits`), producers,
  the fsync probe, the stack sampler, the progress bar, the process set-up and scratch directories.

Imports go downwards only: commands and workloads import :mod:`~benchmarks.suite` and :mod:`~benchmarks.core`;
the suite imports :mod:`~benchmarks.core` (and its workloads only through the registry, lazily); core imports
nothing of the benchmarks but itself.

Benchmarks measure elapsed time with ``time.perf_counter`` (a measurement, not semantics: the store itself
still gets its clock injected); pyproject exempts ``benchmarks/`` from the clock ban.
"""
