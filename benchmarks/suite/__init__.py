"""The benchmark suite: workloads against one target, with raw limits, a naive baseline, reference lines
from published systems, a cost model, JSON + PNG + markdown output.

``python -m benchmarks suite --target latency:s3-standard --workloads ingest,e2e --duration 60`` (see
``benchmarks/README.md``). Here: the runner (:mod:`~benchmarks.suite.runner`), the parameters and context every
suite workload gets (:mod:`~benchmarks.suite.context`), the workload registry (:mod:`~benchmarks.suite.registry`;
the workloads themselves are top-level modules of :mod:`benchmarks`), the ratios and the suite's summary
sections (:mod:`~benchmarks.suite.report`), the naive baseline (:mod:`~benchmarks.suite.naive`), reference lines,
the cost model, the plots and the README's table (:mod:`~benchmarks.suite.summary`).
"""
