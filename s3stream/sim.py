"""``python -m s3stream.sim --seeds N [--start S] [--steps K]``: the deterministic simulator's command line.

The simulator is a test kit (:mod:`s3stream.testing.sim`, nothing shipped imports it); this module only
starts it. See ``python -m s3stream.sim --help``; its tests are in tests/sim.
"""

from __future__ import annotations

import sys

from s3stream.testing.sim.cli import main

if __name__ == "__main__":
    sys.exit(main())
