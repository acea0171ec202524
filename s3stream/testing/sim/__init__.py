"""A deterministic simulator of s3stream: seeded runs of appends, background steps, faults, crashes and
takeovers, with an auditor after every step (issue 27, in the spirit of SlateDB's DST and TigerBeetle's VOPR).

A seed decides everything: the store settings and topics, and every action of the run, chosen one at a time
from what is possible then. Every process is a store opened with ``background=manual``, so nothing runs
behind the simulator's back: the clock is a ``ManualClock(pacing="manual")`` shared by all (time passes only
when an action, a backoff or a latency sample passes it), ids come from seeded ``IdSource`` objects, the local
WAL's disk is simulated (:mod:`.disk`), and the bucket is in memory behind per-process fault injectors.

Actions: appends (``append``, ``append_async``, ``append_arrow`` and ``append_arrow_async``, ``ack=wal``,
``ack=s3`` and the store default, keyed records and tombstones on compacted topics, several topics and
partitions); idempotent producers (:mod:`.producers`: batches with ``producer=ProducerBatch(...)``, retries of
recent batches from either process, epoch bumps); the engine's steps one at a time
(append drains, local WAL writes and fsyncs, WAL-object PUT attempts, seals, WAL resume, run-until-idle);
``flush()``, ``roll()``, retention passes, cleaner passes, GC, ``delete_records``, topic config changes,
``add_partitions``, ``delete_topic`` and a re-creation under the same name; clean restarts, kills (a process
death, half of them with a power loss that tears the WAL's unsynced tail), crashes at every named crash point
(:data:`~.lifecycle.CRASH_POINTS`; those only maintenance passes reach are also armed right before such a pass,
so each fires a few times per few hundred seeds), a second writer process that takes
partitions over (fencing the first) and is closed or killed in turn; clock ticks, jumps and backward skews;
object-store faults (errors, throttling, timeouts before the request, lost responses after a write landed,
412 and 409 races, outages of all requests, latency profiles) and disk faults (a full disk for a while, a
failed fsync, a read-only disk for a while, a flipped byte in the middle of a dead process's WAL: see
:mod:`.disk`).

The auditor (:mod:`.audit`, :mod:`.model`, :mod:`.bucket`), after every step:

* every acknowledged record is readable at its offset, unless retention (its timestamp older than the cutoff
  of a pass), DeleteRecords or compaction (a later record of its key is in the log) removed it, or it was an
  ``ack=wal`` record of a node another node took the partition from, past what the bucket held then;
* a compacted log folded last-write-wins keeps the latest acknowledged value of every key;
* offsets never repeat or change their record, appends stay contiguous and in call order, records refused
  with nothing written never appear, the log end never moves back (but across a crash or takeover, and never
  below an acknowledged record), the log start never moves back;
* no manifest references a missing object; nothing is deleted before its grace period or while referenced;
* a writer that learned it was fenced acknowledges nothing more; no call fails with ``InternalError`` or
  ``CorruptData`` (nothing the simulation injects explains them), except ``LocalWalCorrupt`` from the open
  over a flipped byte (unless the open needed no damaged frame), which must leave the WAL's files as they
  were, with nothing lost once the byte is repaired;
* a producer's retry is never written twice, gets the offsets its records are at, and is never refused
  (OutOfOrderSequence, ProducerFenced) while the log must remember the batch (:mod:`.producers`);
* a recreated topic never shows a record of its earlier incarnation (a process whose catalog cache still
  holds the old one may read and write that one for a while: its reads are not audited then).

Then a final phase heals every fault, restarts cleanly, runs GC past every grace period and audits from the
writer and from a fresh reader of the bucket. The trace (one line per step, and the audit's view) hashes to the
same value for the same seed. ``python -m s3stream.sim --seeds N`` runs seeds from the command line; a failure
prints a one-line reproduction, and ``--out FILE`` writes the run's summary as JSON.
"""

from s3stream.testing.sim.model import AuditFailure
from s3stream.testing.sim.runner import CRASH_POINTS, SimOptions, SimResult, repro_command, run_seed

__all__ = ["CRASH_POINTS", "AuditFailure", "SimOptions", "SimResult", "repro_command", "run_seed"]
