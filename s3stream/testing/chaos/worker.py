"""A chaos worker process: ``python -m s3stream.testing.chaos.worker ROLE ...`` (started by the harness).

Roles:

* ``writer``: opens the store on its own node (``--root``/``--node``: a restart reuses the directory and
  replays it), then appends forever to random partitions of ``--topic``, mixing blocking ``append`` and
  pipelined ``append_async`` calls, with ``--ack``. Each append is written to the side log as an ``intent``
  before the call and as an ``ack`` (with its base offset and the time the store resolved it) after it.
  ``Fenced`` ends the process with status 3, after logging it; retriable errors are logged and retried.
* ``cleaner`` / ``retention``: one pass of the cleaner / of retention after another, each logged.

``--kill-at POINT --kill-after N`` makes the process SIGKILL itself at the ``N+1``-th hit of a named crash
point (a seal's segment PUT, a cleaning swap...), so kills land inside those steps, not only between them.
The worker prints ``ready`` on stdout once the store is open (recovery done).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from s3stream.base.clock import SystemClock
from s3stream.base.crashpoints import CrashPoints
from s3stream.base.errors import Fenced, S3StreamError
from s3stream.base.records import AppendResult
from s3stream.store import Store, open_store
from s3stream.testing.chaos.sidelog import ChaosRandom, SideLog, describe, make_records

__all__ = ["FENCED_EXIT", "KillAt", "main"]

#: The exit status of a writer that was fenced.
FENCED_EXIT = 3

#: Set by SIGTERM: stop appending (or passing), close the store cleanly and exit.
_STOP = threading.Event()


class KillAt(CrashPoints):
    """Crash points that SIGKILL this process at the ``after + 1``-th hit of ``point`` (a real crash)."""

    def __init__(self, point: str | None, after: int) -> None:
        super().__init__()
        self._point = point
        self._left = after
        self._kill_lock = threading.Lock()

    def hit(self, point: str) -> None:
        super().hit(point)
        if point != self._point:
            return
        with self._kill_lock:
            self._left -= 1
            if self._left < 0:
                os.kill(os.getpid(), signal.SIGKILL)


_CLOCK = SystemClock()


def _now_ms() -> int:
    return _CLOCK.now_ms()


def _open(args: argparse.Namespace) -> Store:
    options: dict[str, Any] = json.loads(args.options)
    options = {"probe": False, "seal_workers": "thread", **options}
    return open_store(args.url, wal_dir=args.root, node_id=args.node,
                      crash_points=KillAt(args.kill_at, args.kill_after), **options)


def _resolved(into: list[int]) -> Callable[[Future[AppendResult]], None]:
    """A done-callback noting when the store resolved the future (before the worker looks at it)."""

    def note(_future: Future[AppendResult]) -> None:
        into.append(_now_ms())

    return note


class _Writer:
    """The writer role's loop (see the module docstring)."""

    def __init__(self, args: argparse.Namespace, store: Store, side: SideLog) -> None:
        self.args = args
        self.store = store
        self.side = side
        self.rng = ChaosRandom(args.seed, args.node, args.inc)
        self.logs = [store.partition(args.topic, p) for p in range(args.partitions)]
        self.inflight: collections.deque[tuple[int, int, Future[AppendResult], list[int]]] = collections.deque()
        self.fenced_at: list[int] = []

    def run(self) -> int:
        aid = 0
        while (self.args.appends <= 0 or aid < self.args.appends) and not _STOP.is_set():
            aid += 1
            p = self.rng.randrange(len(self.logs))
            records = make_records(self.rng, f"{self.args.node}.{self.args.inc}.{aid}", self.rng.randint(1, 6),
                                   keys=self.args.keys, now_ms=_now_ms(), tombstone_ratio=self.args.tombstones)
            self.side.write("intent", w=self.args.node, inc=self.args.inc, a=aid, p=p, ack=self.args.ack,
                            recs=describe(records))
            try:
                if self.rng.random() < 0.5:
                    res = self.logs[p].append(records, ack=self.args.ack)
                    self._acked(aid, p, res, _now_ms())
                else:
                    done: list[int] = []
                    fut = self.logs[p].append_async(records, ack=self.args.ack)
                    fut.add_done_callback(_resolved(done))
                    self.inflight.append((aid, p, fut, done))
                while len(self.inflight) > (self.args.window if self.rng.random() < 0.9 else 0):
                    self._settle()
            except Fenced as exc:
                return self._fenced(aid, exc)
            except S3StreamError as exc:
                self.side.write("fail", w=self.args.node, inc=self.args.inc, a=aid, err=type(exc).__name__,
                                retriable=exc.retriable, msg=str(exc)[:300], ms=_now_ms())
                _CLOCK.sleep(0.05)
            if self.args.pause_ms:
                _CLOCK.sleep(self.args.pause_ms / 1000)
        while self.inflight:
            try:
                self._settle()
            except Fenced as exc:
                return self._fenced(aid, exc)
            except S3StreamError as exc:
                self.side.write("fail", w=self.args.node, inc=self.args.inc, err=type(exc).__name__,
                                retriable=exc.retriable, ms=_now_ms())
        return 0

    def _settle(self) -> None:
        aid, p, fut, done = self.inflight.popleft()
        try:
            res = fut.result()
        except S3StreamError as exc:
            if isinstance(exc, Fenced):
                self.fenced_at.append(done[0] if done else _now_ms())
                raise
            self.side.write("fail", w=self.args.node, inc=self.args.inc, a=aid, err=type(exc).__name__,
                            retriable=exc.retriable, msg=str(exc)[:300], ms=_now_ms())
            return
        self._acked(aid, p, res, done[0] if done else _now_ms())

    def _acked(self, aid: int, p: int, res: AppendResult, resolved_ms: int) -> None:
        self.side.write("ack", w=self.args.node, inc=self.args.inc, a=aid, p=p, o=res.base_offset,
                        last=res.last_offset, ack=self.args.ack, ms=resolved_ms)

    def _fenced(self, aid: int, exc: Fenced) -> int:
        first = min(self.fenced_at) if self.fenced_at else _now_ms()
        # what else was in flight: later acks are logged too (the audit checks none resolved after `first`)
        pending = list(self.inflight)
        self.inflight.clear()
        for paid, p, fut, done in pending:
            try:
                res = fut.result(timeout=30)
            except Exception:  # noqa: BLE001 - anything but an acknowledgement is fine after a fence
                continue
            self._acked(paid, p, res, done[0] if done else _now_ms())
        self.side.write("fenced", w=self.args.node, inc=self.args.inc, a=aid, ms=first, msg=str(exc)[:300])
        return FENCED_EXIT


def _maintain(args: argparse.Namespace, store: Store, side: SideLog) -> int:
    """The cleaner or retention role: one pass after another, each logged with its start and end time."""
    passes = 0
    while (args.appends <= 0 or passes < args.appends) and not _STOP.is_set():
        passes += 1
        started = _now_ms()
        try:
            if args.role == "cleaner":
                report = store.run_cleaner()
                cleaned = report.cleaned
                what = "idle" if cleaned is None else f"{cleaned.records_read}->{cleaned.records_kept}"
            else:
                rreport = store.run_retention()
                what = f"{rreport.segments_deleted} segments"
        except S3StreamError as exc:
            what = f"{type(exc).__name__}: {str(exc)[:200]}"
        side.write("pass", w=args.node, inc=args.inc, role=args.role, start=started, end=_now_ms(), what=what)
        _STOP.wait(args.pause_ms / 1000)
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m s3stream.testing.chaos.worker")
    p.add_argument("role", choices=("writer", "cleaner", "retention"))
    p.add_argument("--url", required=True)
    p.add_argument("--root", required=True, help="the WAL root directory")
    p.add_argument("--node", required=True, help="the node id (its WAL directory under the root)")
    p.add_argument("--side", required=True, type=Path, help="the side log to append to")
    p.add_argument("--topic", default="chaos")
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--ack", choices=("wal", "s3"), default="wal")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--inc", type=int, default=0, help="this incarnation's number")
    p.add_argument("--keys", type=int, default=64)
    p.add_argument("--tombstones", type=float, default=0.0)
    p.add_argument("--window", type=int, default=8, help="async appends in flight")
    p.add_argument("--appends", type=int, default=0, help="stop after this many appends or passes (0: never)")
    p.add_argument("--pause-ms", type=int, default=2)
    p.add_argument("--options", default="{}", help="store options as JSON")
    p.add_argument("--kill-at", default=None)
    p.add_argument("--kill-after", type=int, default=0)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    signal.signal(signal.SIGTERM, lambda _sig, _frame: _STOP.set())
    side = SideLog(args.side)
    side.write("start", w=args.node, inc=args.inc, role=args.role, pid=os.getpid(), ms=_now_ms())
    store = _open(args)
    side.write("ready", w=args.node, inc=args.inc, ms=_now_ms())
    print("ready", flush=True)
    status = _Writer(args, store, side).run() if args.role == "writer" else _maintain(args, store, side)
    if status == FENCED_EXIT:
        side.sync()
        os._exit(status)  # a fenced store's close may wait on uploads that can never land
    store.close()
    side.write("exit", w=args.node, inc=args.inc, ms=_now_ms())
    side.sync()
    side.close()
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
