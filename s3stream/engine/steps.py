"""The engine's background work as step functions: what its threads run, callable one at a time.

A store opened with ``background=manual`` starts no thread, pool or process of its own, not even the local
WAL's syncer and fsyncers, so nothing happens behind the caller's back: appends queue until
:meth:`EngineSteps.drain`, their WAL entries wait for :meth:`EngineSteps.write_wal` and
:meth:`EngineSteps.sync_wal` (the disk: ``ack=wal`` appends are acknowledged by the sync), buffered data
waits for :meth:`EngineSteps.flush` (one PUT attempt per call: a failed one is retried by a later call once
its backoff is over), rolled segments for :meth:`EngineSteps.seal`. A test or a simulator calls them in the
order it chooses, from one thread, with the injected clock (``ManualClock(pacing="manual")``) and ids, and
gets the same outcome for the same seed. The periodic passes above the engine are one call each already:
``Store.run_retention`` / ``maintenance.retention.run_retention_pass``, ``Store.run_cleaner`` /
``Cleaner.run_pass`` (``CleanerService.step``) and ``Store.collect_garbage`` (``serve`` and the cleaner
service loop over exactly these). What the threaded mode runs on pools runs inline in the caller's thread:
manifest probes of sealed-tier reads, read-ahead and prefetches (``Runtime.fetches``), the cleaner's scans,
decodes and output uploads (``Runtime.pool``), a ``file://`` store's direct writes and the open's capability
probe (``open_store`` hands both an inline executor); seals never go to worker processes.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from s3stream.engine.runtime import Runtime

__all__ = ["EngineSteps"]


class EngineSteps:
    """One store's steps; each returns True when it did something (False: nothing was due)."""

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt

    def drain(self) -> bool:
        """One append drain round of the next partition with appends queued (writes its local WAL entry)."""
        node = self._rt.existing_node()
        return node is not None and node.drainer.step()

    def flush(self) -> bool:
        """Give up overdue ``ack=s3`` waits, and cut the due buffer into one WAL object, upload and publish it
        (due: ``flush.bytes`` buffered, the oldest append ``flush.interval.ms`` old, or a flush asked for)."""
        node = self._rt.existing_node()
        return node is not None and node.uploader.step()

    def seal(self) -> bool:
        """Seal the pending segments of the next log waiting for its seal."""
        return self._rt.sealer.step()

    def write_wal(self) -> bool:
        """The disk: write the next batch of queued local WAL entries (not yet durable: a crash may lose it)."""
        node = self._rt.existing_node()
        return node is not None and not node.wal.threaded and node.wal.write_step()

    def sync_wal(self) -> bool:
        """The disk: fsync the oldest written batch of the local WAL; its ``ack=wal`` appends are acknowledged
        here, and a partition whose next round waited for it may drain again."""
        node = self._rt.existing_node()
        return node is not None and not node.wal.threaded and node.wal.sync_step()

    def resume_wal(self) -> bool:
        """Resume the local WAL writer a full disk stopped, if an append asked for it."""
        node = self._rt.existing_node()
        return node is not None and node.wal_resumer.step()

    def run_until_idle(self, max_steps: int = 100_000) -> int:
        """Run drain, WAL write, WAL sync, flush, seal and WAL-resume steps, in that order, until none has anything
        to do; returns how many did something. (``flush`` uploads only what is due: advance the clock, or call
        ``Store.flush()``, to upload the rest.)"""
        steps: tuple[Callable[[], bool], ...] = (self.drain, self.write_wal, self.sync_wal, self.flush, self.seal,
                                                 self.resume_wal)
        done = 0
        while done < max_steps:
            if not any(step() for step in steps):
                return done
            done += 1
        raise RuntimeError(f"background work still due after {max_steps} steps")
