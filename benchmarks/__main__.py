"""``python -m benchmarks <workload> [OPTIONS]``: the one benchmark command line (:mod:`benchmarks.cli`)."""

from benchmarks.cli import app

app(prog_name="python -m benchmarks")
