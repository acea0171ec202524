"""Key compaction on object storage: Kafka's log cleaner (rules CLEAN-* of docs/design/kafka-rules.md).

* :mod:`cleaner.selection` — which partition and which offsets (pure).
* :mod:`cleaner.offsetmap` — the bounded offset map, vectorized with pyarrow.
* :mod:`cleaner.keep` — which records survive: the one shared definition (also used by Spark jobs).
* :mod:`cleaner.grouping` — which segments are rewritten together (pure).
* :mod:`cleaner.scan` — how a round reads segments: key columns, chunked whole-object scans, read-ahead.
* :mod:`cleaner.executor` — one round: map, rewrite, atomic swap.
* :mod:`cleaner.service` — ``run_cleaner_pass`` and the background loops.
"""

from cleaner.service import Cleaner, CleanerPassReport, CleanerService, run_cleaner_pass

__all__ = ["Cleaner", "CleanerPassReport", "CleanerService", "run_cleaner_pass"]
