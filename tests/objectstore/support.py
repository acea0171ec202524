"""Shared test helpers for the object store tests."""

from __future__ import annotations

import threading

from s3stream.base.clock import ManualClock


class SleepLog(ManualClock):
    """A clock that records sleeps instead of sleeping (retry and latency tests run instantly)."""

    def __init__(self) -> None:
        super().__init__(0)
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)

    def wait(self, event: threading.Event, seconds: float | None) -> bool:
        return event.is_set()
