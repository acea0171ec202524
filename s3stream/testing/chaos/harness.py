"""The harness: a SeaweedFS server, worker processes it starts, SIGKILLs and restarts, and the audits.

:class:`Bench` owns one ``weed mini`` (restartable, killable) and one bucket; each scenario writes under its
own prefix. :class:`Worker` is one logical process (a node: its WAL root and id stay the same across
incarnations). :meth:`Bench.audit` reads every partition back with a fresh reader store and holds it to
the side logs (:mod:`.audit`), with the claims taken from the manifest history.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from s3stream.apps.servers import SeaweedFS, test_credentials_env
from s3stream.base.clock import SystemClock
from s3stream.base.errors import OffsetOutOfRange
from s3stream.base.layout import log_prefix
from s3stream.manifest.codec import decode_manifest
from s3stream.objectstore.s3 import S3ObjectStore
from s3stream.partition.log import PartitionLog
from s3stream.store import Store, open_store
from s3stream.testing.chaos.audit import AuditResult, ClaimInfo, ReadRow, Retention, audit_partition
from s3stream.testing.chaos.sidelog import HEADER, Event, digest, read_events

__all__ = ["BUCKET", "CLOCK", "Bench", "TopicSpec", "Worker", "manifest_claims", "read_partition"]

BUCKET = "chaos"
_READY_TIMEOUT_S = 120.0


CLOCK = SystemClock()


def now_ms() -> int:
    return CLOCK.now_ms()


class Worker:
    """One logical worker process (writer, cleaner or retention) of a scenario, across its incarnations."""

    def __init__(self, bench: Bench, scenario: str, role: str, node: str, *, ack: str = "wal",
                 topic: str = "chaos", partitions: int = 2, options: dict[str, Any] | None = None,
                 extra: Sequence[str] = ()) -> None:
        self.bench = bench
        self.role = role
        self.node = node
        self.ack = ack
        self.side = bench.workdir / scenario / f"side-{node}.jsonl"
        self.root = bench.workdir / scenario / f"wal-{node}"
        self.side.parent.mkdir(parents=True, exist_ok=True)
        self.url = bench.url(scenario)
        self.topic = topic
        self.partitions = partitions
        self.options = options or {}
        self.extra = list(extra)
        self.inc = -1
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready = False
        bench.workers.append(self)

    def start(self, *, kill_at: str | None = None, kill_after: int = 0, appends: int = 0) -> bool:
        """Start the next incarnation and wait until it is ready; False if it died first (a crash point)."""
        import json

        self.inc += 1
        cmd = [sys.executable, "-m", "s3stream.testing.chaos.worker", self.role, "--url", self.url,
               "--root", str(self.root), "--node", self.node, "--side", str(self.side), "--topic", self.topic,
               "--partitions", str(self.partitions), "--ack", self.ack, "--seed", str(self.bench.seed),
               "--inc", str(self.inc), "--appends", str(appends), "--options", json.dumps(self.options),
               *self.extra]
        if kill_at is not None:
            cmd += ["--kill-at", kill_at, "--kill-after", str(kill_after)]
        env = {**os.environ, **test_credentials_env()}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.bench.stderr, stdin=subprocess.DEVNULL,
                                     env=env)
        self.ready = self._wait_ready(self.proc)
        return self.ready

    @staticmethod
    def _wait_ready(proc: subprocess.Popen[bytes]) -> bool:
        assert proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        deadline = CLOCK.monotonic() + _READY_TIMEOUT_S
        try:
            while CLOCK.monotonic() < deadline:
                if sel.select(timeout=0.5):
                    line = proc.stdout.readline()
                    if line.strip() == b"ready":
                        return True
                    if not line:  # the process ended before it was ready: killed at a crash point, or broken
                        if proc.wait() >= 0:
                            raise RuntimeError(f"worker {proc.args!r} exited with status {proc.returncode} "
                                               "before it was ready (see workers.log)")
                        return False
        finally:
            sel.close()
        raise TimeoutError(f"worker {proc.args!r} not ready within {_READY_TIMEOUT_S} s")

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> bool:
        """SIGKILL the running incarnation; whether it was still running."""
        proc = self.proc
        if proc is None:
            return False
        was_alive = proc.poll() is None
        if was_alive:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGKILL)
        proc.wait()
        self._close_pipe(proc)
        return was_alive

    def stop(self, timeout_s: float = 120.0) -> int | None:
        """SIGTERM the running incarnation (it stops appending, closes the store cleanly); its exit status."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            status = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            status = proc.wait()
        self._close_pipe(proc)
        return status

    def wait(self, timeout_s: float) -> int | None:
        """Wait for the incarnation to end by itself; its exit status (None: still running)."""
        if self.proc is None:
            return None
        try:
            status = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None
        self._close_pipe(self.proc)
        return status

    @staticmethod
    def _close_pipe(proc: subprocess.Popen[bytes]) -> None:
        if proc.stdout is not None:
            proc.stdout.close()

    def events(self) -> list[Event]:
        return list(read_events(self.side))


@dataclass(slots=True)
class TopicSpec:
    """A scenario's topic: its name, partitions, config and what may remove records."""

    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)

    def retention(self, at_ms: int) -> Retention:
        policy = self.config.get("cleanup.policy", "delete")
        ms = int(self.config.get("retention.ms", "-1"))
        return Retention(compact="compact" in policy, delete="delete" in policy,
                         cutoff_ms=at_ms - ms if ms >= 0 else None)


class Bench:
    """One SeaweedFS (started, SIGKILLed, restarted) and a bucket, under ``workdir``."""

    def __init__(self, workdir: Path, seed: int) -> None:
        self.workdir = workdir
        self.seed = seed
        workdir.mkdir(parents=True, exist_ok=True)
        self.server = SeaweedFS(workdir / "weed")
        self.stderr = (workdir / "workers.log").open("ab")
        self.last_leo: dict[tuple[str, str, int], int] = {}
        self.workers: list[Worker] = []  # every worker of every scenario: none outlives the bench
        self.shape: dict[str, int] = {}  # the last audit's sealed segments and manifest versions

    def start(self) -> None:
        os.environ.update(test_credentials_env())
        self.server.start()
        admin = S3ObjectStore(BUCKET, endpoint_url=self.server.endpoint, region="us-east-1")
        try:
            admin.ensure_bucket()
        finally:
            admin.close()

    def close(self) -> None:
        for w in self.workers:
            w.kill()
        self.server.stop()
        self.stderr.close()

    def url(self, scenario: str) -> str:
        return f"s3://{BUCKET}/{scenario}?endpoint_url={self.server.endpoint}&region=us-east-1"

    @contextlib.contextmanager
    def reader(self, scenario: str) -> Iterator[Store]:
        """A fresh store that only reads (its own node directory; it never appends, so it claims nothing)."""
        store = open_store(self.url(scenario), wal_dir=str(self.workdir / scenario / "reader"), node_id="reader",
                           probe=False, seal_workers="thread")
        try:
            yield store
        finally:
            store.close()

    def create_topic(self, scenario: str, topic: TopicSpec) -> None:
        with self.reader(scenario) as store:
            store.create_topic(topic.name, partitions=topic.partitions, config=topic.config)

    def audit(self, scenario: str, topic: TopicSpec, workers: Sequence[Worker], *,
              settled: Callable[[str, int, str], bool] | None = None) -> AuditResult:
        """Read every partition of ``topic`` and hold it to the workers' side logs (see :mod:`.audit`)."""
        acks = [ev for w in workers for ev in w.events() if ev.kind == "ack"]
        total = AuditResult()
        with self.reader(scenario) as store:
            reads = {p: read_partition(store.partition(topic.name, p)) for p in range(topic.partitions)}
            claims = {p: manifest_claims(store, topic.name, p) for p in range(topic.partitions)}
            self.shape = {"segments": sum(len(store.partition(topic.name, p).segments())
                                          for p in range(topic.partitions)),
                          "manifest_versions": sum(manifest_versions(store, topic.name, p)
                                                   for p in range(topic.partitions)),
                          "claims": sum(len(c) for c in claims.values())}
        at = now_ms()
        events = [ev for w in workers for ev in w.events()]
        intents = [ev for ev in events if ev.kind == "intent"]
        fenced = [ev for ev in events if ev.kind == "fenced"]
        for p, (rows, log_start, leo) in reads.items():
            key = (scenario, topic.name, p)
            result = audit_partition(p, acks, intents, rows, log_start, leo, claims=claims[p],
                                     retention=topic.retention(at), settled=settled,
                                     previous_leo=self.last_leo.get(key, 0), fenced=fenced)
            self.last_leo[key] = max(leo, self.last_leo.get(key, 0))
            total.add(result)
        return total


def read_partition(plog: PartitionLog, attempts: int = 5) -> tuple[list[ReadRow], int, int]:
    """Every record of ``plog`` (paged reads), with the log start and end the read used; a read that a
    concurrent retention pass overtook starts again."""
    for attempt in range(attempts):
        log_start, leo = plog.log_start_offset, plog.log_end_offset
        rows: list[ReadRow] = []
        pos = log_start
        try:
            while pos < leo:
                table = plog.read_arrow(pos, max_bytes=1 << 20)
                if table.num_rows == 0:
                    break
                offsets = table.column("offset").to_pylist()
                keys = table.column("key").to_pylist()
                values = table.column("value").to_pylist()
                headers = table.column("headers").to_pylist()
                for off, k, v, hs in zip(offsets, keys, values, headers, strict=True):
                    if off >= leo:  # appended since the read began: the next audit's
                        break
                    ident = next((h["value"].decode() for h in hs or () if h["key"] == HEADER), "?")
                    rows.append(ReadRow(off, ident, k, digest(k, v), v is None))
                pos = offsets[-1] + 1
        except OffsetOutOfRange:
            if attempt == attempts - 1:
                raise
            continue
        return rows, log_start, leo
    raise AssertionError("unreachable")


def manifest_claims(store: Store, topic: str, partition: int) -> list[ClaimInfo]:
    """The partition's claims: manifest versions whose writer differs from the previous version's."""
    prefix = log_prefix(store.topic_id(topic), partition) + "manifest/"
    objstore = store.object_store
    out: list[ClaimInfo] = []
    owner: str | None = None
    for entry in sorted(objstore.list(prefix), key=lambda e: e.key):
        m = decode_manifest(objstore.get(entry.key), source=entry.key)
        if m.writer is not None and m.writer.owner != owner:
            owner = m.writer.owner
            out.append(ClaimInfo(m.seq, owner, m.next_offset, m.committed_at_ms))
    return out


def manifest_versions(store: Store, topic: str, partition: int) -> int:
    """How many manifest versions the partition has (each commit: a claim, seal, swap or retention)."""
    prefix = log_prefix(store.topic_id(topic), partition) + "manifest/"
    return sum(1 for _ in store.object_store.list(prefix))
