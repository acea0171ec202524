"""The four chaos scenarios on a :class:`~s3stream.testing.chaos.harness.Bench` (issue 27, item 3).

* :func:`run_kill`: one writer SIGKILLed ``cycles`` times (at a random moment, or at a named crash point of
  the flush, seal or manifest-commit paths) and restarted on the same WAL directory; audited after every
  ``audit_every`` restarts and at the end.
* :func:`run_server_kill`: an ``ack=wal`` and an ``ack=s3`` writer keep appending while the S3 server is
  SIGKILLed and restarted ``cycles`` times; the ``ack=wal`` one must not fail, the ``ack=s3`` one only with
  retriable errors.
* :func:`run_claimers`: two nodes append to the same partitions; each claim fences the other, a fenced
  writer exits and is restarted (and claims back), ``cycles`` times.
* :func:`run_maintenance`: a writer, a cleaner process and a retention process on one ``compact,delete``
  topic with small segments and a short retention; one of them is SIGKILLed per cycle and restarted.

Every scenario returns a JSON-able dict: what ran, the counts of the final audit and the sums of the
checkpoint audits (every bad count must be 0), and the time it took.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from s3stream.testing.chaos.audit import AuditResult
from s3stream.testing.chaos.harness import CLOCK, Bench, TopicSpec, Worker
from s3stream.testing.chaos.sidelog import ChaosRandom
from s3stream.testing.chaos.worker import FENCED_EXIT

__all__ = ["CLEANER_POINTS", "RETENTION_POINTS", "WRITER_POINTS", "run_claimers", "run_kill", "run_maintenance",
           "run_server_kill"]

#: Named crash points a writer may SIGKILL itself at (the flush, seal and manifest-commit paths).
WRITER_POINTS = ("flush.before_put", "flush.after_put", "flush.before_trim", "seal.after_segment_put",
                 "seal.after_manifest_commit", "manifest.before_put", "manifest.after_put")
CLEANER_POINTS = ("clean.output_put", "clean.after_outputs_put", "clean.after_swap", "manifest.before_put",
                  "manifest.after_put")
RETENTION_POINTS = ("retention.after_commit", "manifest.before_put", "manifest.after_put")

#: Small flushes and WAL files so uploads, trims and file rolls happen all the time.
WRITER_OPTIONS: dict[str, Any] = {"flush_interval_ms": 30, "flush_bytes": 8192, "wal_file_bytes": 65536,
                                  "upload_retry_backoff_ms": 50, "upload_retry_backoff_max_ms": 500,
                                  "commit_timeout_ms": 30_000}
#: Writers pause this long between appends (enough for every step to run between them, and audits that
#: read the whole log back stay short).
WRITER_PAUSE = ["--pause-ms", "15"]
#: Segments of a few KiB (a seal every few appends), rolled by time too.
SMALL_SEGMENTS = {"segment.bytes": "12000", "segment.ms": "2000"}


def _checkpoint_settled(workers: Sequence[Worker]) -> Callable[[str, int, str], bool]:
    """What a read taken while writers run must hold: ``ack=s3`` acknowledgements, and ``ack=wal`` ones of
    incarnations before the one now running (its recovery uploaded them)."""
    live = {w.node: w.inc for w in workers}

    def settled(writer: str, inc: int, ack: str) -> bool:
        return ack == "s3" or inc < live.get(writer, 0)

    return settled


def note(message: str) -> None:
    """A progress line on stderr."""
    print(f"[chaos {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class _Run:
    """Bookkeeping shared by the scenarios: kills, audits, timing."""

    def __init__(self, name: str, bench: Bench, seed: int) -> None:
        self.name = name
        self.bench = bench
        self.rng = ChaosRandom(seed, name)
        self.started = CLOCK.monotonic()
        self.kills: Counter[str] = Counter()
        self.checkpoints = AuditResult()
        self.audits = 0
        self.info: dict[str, Any] = {}

    def kill_plan(self, points: Sequence[str], share: float = 0.4) -> tuple[str | None, int]:
        """Where the next incarnation dies: a named crash point (``share`` of the time) or a timer."""
        if points and self.rng.random() < share:
            return self.rng.choice(points), self.rng.randrange(12)
        return None, 0

    def checkpoint(self, topic: TopicSpec, workers: Sequence[Worker], writers: Sequence[Worker]) -> None:
        note(f"{self.name}: checkpoint audit {self.audits + 1} of {topic.name} "
             f"({round(CLOCK.monotonic() - self.started)} s, kills {sum(self.kills.values())})")
        self.checkpoints.add(self.bench.audit(self.name, topic, workers, settled=_checkpoint_settled(writers)))
        self.audits += 1

    def result(self, final: AuditResult, workers: Sequence[Worker], **extra: Any) -> dict[str, Any]:
        events = [ev for w in workers for ev in w.events()]
        fails = Counter(f"{ev.fields['err']}{'' if ev.fields.get('retriable') else ' (not retriable)'}"
                        for ev in events if ev.kind == "fail")
        acks = Counter(ev.fields["ack"] for ev in events if ev.kind == "ack")
        ok = final.ok and self.checkpoints.ok
        return {"scenario": self.name, "ok": ok, "kills": dict(self.kills), "audits": self.audits + 1,
                "acked_appends_by_mode": dict(acks), "append_failures": dict(fails),
                "final_audit": final.as_dict(), "checkpoint_audits": self.checkpoints.as_dict(),
                "seconds": round(CLOCK.monotonic() - self.started, 1), "at_end": dict(self.bench.shape), **self.info,
                **extra}


def _kill_one(run: _Run, w: Worker, *, points: Sequence[str], min_s: float, max_s: float) -> None:
    """Start ``w``'s next incarnation, let it run a random while (or die at its crash point), SIGKILL it."""
    point, after = run.kill_plan(points)
    if not w.start(kill_at=point, kill_after=after):
        run.kills[f"crash point {point} (before ready)"] += 1
        return
    status = w.wait(run.rng.uniform(min_s, max_s))
    if status is None:
        w.kill()
        run.kills["timer"] += 1
    elif status < 0:
        run.kills[f"crash point {point}"] += 1
    else:
        raise RuntimeError(f"{w.node}#{w.inc} exited with status {status} (see {run.bench.workdir}/workers.log)")


def run_kill(bench: Bench, *, ack: str, cycles: int, seed: int, audit_every: int = 10,
             min_s: float = 0.3, max_s: float = 2.5) -> dict[str, Any]:
    """The SIGKILL/restart scenario for one ack mode (see the module docstring)."""
    run = _Run(f"kill-{ack}", bench, seed)
    topic = TopicSpec("chaos", 3, {**SMALL_SEGMENTS, "cleanup.policy": "delete", "retention.ms": "-1"})
    bench.create_topic(run.name, topic)
    w = Worker(bench, run.name, "writer", "wA", ack=ack, topic=topic.name, partitions=topic.partitions,
               options=WRITER_OPTIONS, extra=WRITER_PAUSE)
    for cycle in range(cycles):
        _kill_one(run, w, points=WRITER_POINTS, min_s=min_s, max_s=max_s)
        # a checkpoint once the next incarnation is ready (its recovery uploaded what the killed ones acknowledged)
        if (cycle + 1) % audit_every == 0 and cycle + 1 < cycles and w.start():
            run.checkpoint(topic, [w], [w])
            w.kill()
            run.kills["timer"] += 1
    # the last incarnation recovers, appends a little more and closes cleanly
    if not w.start(appends=30):
        raise RuntimeError("the final incarnation died")
    if w.wait(120) != 0:
        raise RuntimeError(f"the final incarnation of {w.node} did not exit cleanly")
    final = bench.audit(run.name, topic, [w])
    return run.result(final, [w], ack=ack, cycles=cycles, incarnations=w.inc + 1)


def run_server_kill(bench: Bench, *, cycles: int, seed: int, min_up_s: float = 2.0, max_up_s: float = 5.0,
                    min_down_s: float = 1.0, max_down_s: float = 6.0) -> dict[str, Any]:
    """SIGKILL the S3 server under an ``ack=wal`` and an ``ack=s3`` writer, ``cycles`` times."""
    run = _Run("server-kill", bench, seed)
    topics = [TopicSpec(f"t-{ack}", 2, {**SMALL_SEGMENTS, "cleanup.policy": "delete", "retention.ms": "-1"})
              for ack in ("wal", "s3")]  # a topic each: one writer on both would be two claimers
    for topic in topics:
        bench.create_topic(run.name, topic)
    options = {**WRITER_OPTIONS, "max_block_ms": 3000}
    writers = [Worker(bench, run.name, "writer", f"w-{ack}", ack=ack, topic=topic.name,
                      partitions=topic.partitions, options=options, extra=WRITER_PAUSE)
               for ack, topic in zip(("wal", "s3"), topics, strict=True)]
    for w in writers:
        if not w.start():
            raise RuntimeError(f"{w.node} died at start")
    down_total = 0.0
    for _ in range(cycles):
        CLOCK.sleep(run.rng.uniform(min_up_s, max_up_s))
        bench.server.kill()
        run.kills["server SIGKILL"] += 1
        note(f"{run.name}: S3 server SIGKILLed ({run.kills['server SIGKILL']} of {cycles})")
        down = run.rng.uniform(min_down_s, max_down_s)
        CLOCK.sleep(down)
        t0 = CLOCK.monotonic()
        bench.server.start()
        down_total += down + CLOCK.monotonic() - t0
        for w in writers:
            if not w.alive:
                raise RuntimeError(f"{w.node} ended during the outages (see {bench.workdir}/workers.log)")
    CLOCK.sleep(max_up_s)
    for topic, w in zip(topics, writers, strict=True):
        run.checkpoint(topic, [w], [w])
    note(f"{run.name}: stopping the writers")
    for w in writers:
        if w.stop() != 0:
            raise RuntimeError(f"{w.node} did not close cleanly after the outages")
    note(f"{run.name}: final audit")
    final = AuditResult()
    for topic, w in zip(topics, writers, strict=True):
        final.add(bench.audit(run.name, topic, [w]))
    wal_fails = sum(1 for ev in writers[0].events() if ev.kind == "fail")
    s3_fatal = sum(1 for ev in writers[1].events() if ev.kind == "fail" and not ev.fields.get("retriable"))
    res = run.result(final, writers, cycles=cycles, server_down_s=round(down_total, 1),
                     ack_wal_failures=wal_fails, ack_s3_non_retriable_failures=s3_fatal)
    res["ok"] = res["ok"] and wal_fails == 0 and s3_fatal == 0
    return res


def run_claimers(bench: Bench, *, ack: str, cycles: int, seed: int, min_s: float = 0.5,
                 max_s: float = 2.5) -> dict[str, Any]:
    """Two nodes writing the same partitions: each restart claims them back, fencing the other."""
    run = _Run(f"claimers-{ack}", bench, seed)
    topic = TopicSpec("chaos", 2, {**SMALL_SEGMENTS, "cleanup.policy": "delete", "retention.ms": "-1"})
    bench.create_topic(run.name, topic)
    writers = [Worker(bench, run.name, "writer", node, ack=ack, topic=topic.name, partitions=topic.partitions,
                      options=WRITER_OPTIONS, extra=WRITER_PAUSE) for node in ("wA", "wB")]
    for w in writers:
        w.start()
    fences = 0
    for cycle in range(cycles):
        CLOCK.sleep(run.rng.uniform(min_s, max_s))
        for w in writers:
            status = w.wait(0)
            if status is None:
                continue
            if status != FENCED_EXIT:
                raise RuntimeError(f"{w.node}#{w.inc} exited with {status} (see {bench.workdir}/workers.log)")
            fences += 1
            w.start()
        if run.rng.random() < 0.3:
            victim = run.rng.choice(writers)  # now and then a SIGKILL too, and a restart (which claims back)
            if victim.kill():
                run.kills["timer"] += 1
            elif victim.proc is not None and victim.proc.returncode == FENCED_EXIT:
                fences += 1
            victim.start()
        if (cycle + 1) % 10 == 0:
            run.checkpoint(topic, writers, writers)
    for w in writers:
        status = w.stop()
        if status not in (0, FENCED_EXIT):
            raise RuntimeError(f"{w.node}#{w.inc} ended with {status}")
        fences += status == FENCED_EXIT
    # each node reopens once more (a fenced node's local WAL still holds what it acknowledged of partitions
    # nobody took from it), appends a little and closes cleanly
    for w in writers:
        if not w.start(appends=5) or w.wait(120) != 0:
            raise RuntimeError(f"the final incarnation of {w.node} did not close cleanly")
    final = bench.audit(run.name, topic, writers)
    run.info["fenced_exits"] = fences
    return run.result(final, writers, ack=ack, cycles=cycles)


def run_maintenance(bench: Bench, *, ack: str, cycles: int, seed: int, min_s: float = 0.5,
                    max_s: float = 3.0) -> dict[str, Any]:
    """A writer, a cleaner and a retention process on one compact,delete topic, one SIGKILLed per cycle."""
    run = _Run(f"maintenance-{ack}", bench, seed)
    topic = TopicSpec("chaos", 2, {**SMALL_SEGMENTS, "cleanup.policy": "compact,delete", "retention.ms": "10000",
                                   "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "1000",
                                   "file.delete.delay.ms": "0"})
    bench.create_topic(run.name, topic)
    writer = Worker(bench, run.name, "writer", "wA", ack=ack, topic=topic.name, partitions=topic.partitions,
                    options=WRITER_OPTIONS, extra=[*WRITER_PAUSE, "--keys", "24", "--tombstones", "0.05"])
    cleaner = Worker(bench, run.name, "cleaner", "cleaner", topic=topic.name,
                     extra=["--pause-ms", "6000"])  # each cleaning renews the head segment's max timestamp: a
    # cleaner passing more often than retention.ms would keep retention from ever expiring anything
    retention = Worker(bench, run.name, "retention", "retention", topic=topic.name,
                       extra=["--pause-ms", "300"])
    points = {"writer": WRITER_POINTS, "cleaner": CLEANER_POINTS, "retention": RETENTION_POINTS}
    for w in (writer, cleaner, retention):
        w.start()
    for cycle in range(cycles):
        victim = run.rng.choice((writer, cleaner, retention))
        status = victim.wait(run.rng.uniform(min_s, max_s))
        if status is None:
            victim.kill()
            run.kills[f"{victim.role} timer"] += 1
        elif status < 0:
            run.kills[f"{victim.role} crash point"] += 1
        else:
            raise RuntimeError(f"{victim.node}#{victim.inc} exited with {status}")
        for w in (writer, cleaner, retention):  # restart every dead one (crash points fire on their own)
            if not w.alive:
                if w is not victim:
                    run.kills[f"{w.role} crash point"] += 1
                point, after = run.kill_plan(points[w.role], share=0.5)
                while not w.start(kill_at=point, kill_after=after):
                    run.kills[f"{w.role} crash point (before ready)"] += 1
                    point, after = run.kill_plan(points[w.role], share=0.5)
        if (cycle + 1) % 3 == 0:  # often: acknowledged records are checked before retention.ms expires them
            run.checkpoint(topic, [writer, cleaner, retention], [writer])
    for w in (cleaner, retention, writer):
        w.stop()
    if not writer.start(appends=10) or writer.wait(120) != 0:
        raise RuntimeError("the final writer incarnation did not close cleanly")
    final = bench.audit(run.name, topic, [writer, cleaner, retention])
    passes = Counter(str(ev.fields["role"]) for w in (cleaner, retention) for ev in w.events() if ev.kind == "pass")
    removed = [ev.fields["what"] for ev in cleaner.events() if ev.kind == "pass" and "->" in str(ev.fields["what"])]
    run.info["passes"] = dict(passes)
    run.info["cleanings"] = len(removed)
    run.info["retention_segments_deleted"] = sum(
        int(str(ev.fields["what"]).split()[0]) for ev in retention.events()
        if ev.kind == "pass" and str(ev.fields["what"]).endswith(" segments"))
    return run.result(final, [writer, cleaner, retention], ack=ack, cycles=cycles)
