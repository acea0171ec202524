"""``python -m s3stream.chaos SCENARIO [--ack wal|s3|both] [--cycles N] [--out FILE]``: real-process crash runs.

The harness is a test kit (:mod:`s3stream.testing.chaos`, nothing shipped imports it); this module only
starts it. It needs the SeaweedFS binary ``weed`` on PATH. See ``python -m s3stream.chaos --help``; its
tests are in tests/chaos.
"""

from __future__ import annotations

import sys

from s3stream.testing.chaos.cli import main

if __name__ == "__main__":
    sys.exit(main())
