"""The engine workload (``python -m benchmarks engine``): the storage engine against raw limits of the same run.

* :mod:`~benchmarks.engine.run`: the run, phase by phase (:func:`~benchmarks.engine.run.run_engine_benchmark`);
* :mod:`~benchmarks.engine.params`: the run's parameters (full and ``--quick`` defaults);
* :mod:`~benchmarks.engine.sustained`: sustained ingest, ack latency at half load, memory;
* :mod:`~benchmarks.engine.costs`: S3 PUTs per GiB and sequential reads from sealed segments;
* :mod:`~benchmarks.engine.figures`: the six judged figures, the console table, the engine's summary sections.
"""
