"""Key compaction (the cleaner): selection planner, offset map, rewrite, service loop.

Not built yet: it arrives with issue 4. ``Store.run_cleaner()`` says so explicitly until then.
"""
