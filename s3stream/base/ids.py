"""Injected ids and randomness: ULIDs for object keys and commit ids, jitter for backoff.

A seeded :class:`IdSource` makes a simulation reproducible; the default one is seeded from the OS.
"""

from __future__ import annotations

import os
import random
import threading

__all__ = ["IdSource", "ulid_time_ms"]

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_DECODE = {c: i for i, c in enumerate(_CROCKFORD)}


class IdSource:
    """ULIDs, random tokens and jitter from one (optionally seeded) generator; thread-safe."""

    def __init__(self, seed: int | None = None) -> None:
        self._rng = random.Random(seed if seed is not None else int.from_bytes(os.urandom(16), "big"))
        self._lock = threading.Lock()
        self._last_ms = -1
        self._last_rand = 0

    def ulid(self, now_ms: int) -> str:
        """A 26-character ULID for ``now_ms``; monotonic within one millisecond of one source."""
        with self._lock:
            if now_ms == self._last_ms:
                self._last_rand = (self._last_rand + 1) & ((1 << 80) - 1)
            else:
                self._last_ms = now_ms
                self._last_rand = self._rng.getrandbits(80)
            value = ((now_ms & ((1 << 48) - 1)) << 80) | self._last_rand
        return "".join(_CROCKFORD[(value >> (5 * i)) & 31] for i in range(25, -1, -1))

    def token(self, nbytes: int = 8) -> str:
        """A random lowercase hex token."""
        with self._lock:
            return self._rng.getrandbits(nbytes * 8).to_bytes(nbytes, "big").hex()

    def uniform(self, low: float, high: float) -> float:
        """A uniform float in [low, high] (for jittered backoff)."""
        with self._lock:
            return self._rng.uniform(low, high)

    def randrange(self, stop: int) -> int:
        """A uniform int in [0, stop) (for segment.jitter.ms); 0 when stop <= 0."""
        if stop <= 0:
            return 0
        with self._lock:
            return self._rng.randrange(stop)

    def random(self) -> float:
        """A uniform float in [0, 1) (for fault injection rates)."""
        with self._lock:
            return self._rng.random()


def ulid_time_ms(ulid: str) -> int:
    """The millisecond timestamp encoded in a ULID (GC compares it with orphan_min_age)."""
    if len(ulid) != 26:
        raise ValueError(f"not a ULID: {ulid!r}")
    value = 0
    for ch in ulid.upper():
        if ch not in _DECODE:
            raise ValueError(f"not a ULID: {ulid!r}")
        value = (value << 5) | _DECODE[ch]
    return value >> 80
