"""The benchmark suite (issue 6): workloads against a target, with raw limits, a naive baseline,
reference lines from published systems, a cost model, JSON + PNG + markdown output.

``python -m benchmarks run --target latency:s3-standard --workloads ingest,e2e --duration 60``
See ``benchmarks/README.md``.
"""
