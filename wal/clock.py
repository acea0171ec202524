"""The one wal module allowed to touch ambient nondeterminism (the lint rule TID251 exempts it).

``wal`` is a leaf package, so it cannot use s3stream's injected ``Clock``/``IdSource``. The WAL itself
needs neither time nor randomness (group commit is driven by a queue, not a timer); only the simulated
crash of :class:`~wal.memory_storage.MemoryWalStorage` picks a random torn prefix. That randomness comes from
here: seeded for reproducible simulations, from the OS otherwise.
"""

from __future__ import annotations

import random

__all__ = ["make_rng"]


def make_rng(seed: int | None) -> random.Random:
    """A private generator: deterministic for a given ``seed``, OS-seeded when ``seed`` is ``None``."""
    return random.Random(seed) if seed is not None else random.SystemRandom()
