"""A simulated process: one store opened in ``background=manual`` mode, restarted, closed or killed.

A process has a name (``A``, the main writer; ``B``, a second writer that fences it), a WAL root of its own
(so it is one node: a restart reopens the same node directory and replays it) and, per *incarnation*
(each open), fresh crash points, a seeded :class:`~s3stream.base.ids.IdSource`, and a fault injector over
the shared bucket. Killing it abandons the store object without closing it (nothing it has in memory
reaches the bucket or the disk any more; see :mod:`.disk` for what the disk keeps), as a process death
would.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from s3stream.base.clock import ManualClock
from s3stream.base.crashpoints import CrashPoints
from s3stream.base.errors import Closed, S3StreamError
from s3stream.base.ids import IdSource
from s3stream.objectstore.protocol import ObjectStore
from s3stream.partition.log import PartitionLog
from s3stream.store import Store, open_store
from s3stream.testing.faults import FaultRule, FaultyObjectStore
from s3stream.testing.latency import LatencyObjectStore, LatencyProfile
from s3stream.testing.sim.disk import SimDisks

if TYPE_CHECKING:
    from s3stream.testing.sim.model import Append

__all__ = ["URL", "SimProcess", "derive"]

#: Every process opens the same store (the bucket is injected; the URL only names it).
URL = "memory://sim"


def derive(seed: int, *parts: object) -> int:
    """A seed for one part of the simulation (stable across processes and Python versions)."""
    text = ":".join([str(seed), *map(str, parts)]).encode()
    value = 0
    for byte in text:  # FNV-1a, 64 bits: no dependence on hash randomisation
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return value


class SimProcess:
    """One simulated process (see the module docstring)."""

    def __init__(self, name: str, *, seed: int, workdir: Path, clock: ManualClock, bucket: ObjectStore,
                 disks: SimDisks, settings: dict[str, Any], latency: LatencyProfile | None) -> None:
        self.name = name
        self.root = workdir / f"wal-{name}"
        self._seed = seed
        self._clock = clock
        self._bucket = bucket
        self._disks = disks
        self._settings = settings
        self._latency = latency
        self.incarnation = 0
        self.store: Store | None = None
        self.crash = CrashPoints()
        self.faulty: FaultyObjectStore | None = None
        self.fenced = False  # this incarnation learned (from an error) that another node fenced it
        self.wal_failed = False  # its local WAL stopped for good (a failed fsync): it must reopen
        self.pending: list[Append] = []  # its appends not resolved yet
        self.node_ids: set[str] = set()  # the node ids its incarnations used (one WAL directory: one id)
        self.injected: dict[str, int] = {}  # object-store faults injected into its earlier incarnations, by kind
        #: closed (or its last open failed) with records only its local WAL holds: they come back when it reopens
        self.parked = False

    @property
    def alive(self) -> bool:
        return self.store is not None

    def open(self, rules: list[FaultRule]) -> None:
        """Start a new incarnation (recovering what the last one left); raises what ``open_store`` raises."""
        self.incarnation += 1
        inc = self.incarnation
        self.injected = self.faults_injected()
        self.crash = CrashPoints()
        self.fenced = self.wal_failed = False
        below: ObjectStore = self._bucket
        if self._latency is not None:
            below = LatencyObjectStore(below, self._latency, clock=self._clock,
                                       ids=IdSource(derive(self._seed, "latency", self.name, inc)))
        self.faulty = FaultyObjectStore(below, ids=IdSource(derive(self._seed, "faults", self.name, inc)),
                                        rules=rules)
        try:
            self.store = open_store(URL, clock=self._clock, ids=IdSource(derive(self._seed, "ids", self.name, inc)),
                                    object_store=self.faulty, crash_points=self.crash, wal_storage=self._disks.open,
                                    wal_dir=str(self.root), **self._settings)
        except BaseException:
            self.parked = True  # down, with whatever only its local WAL holds, until an open goes through
            raise
        self.parked = False
        self.note_node()

    def faults_injected(self) -> dict[str, int]:
        """Object-store faults injected into every incarnation so far, by kind."""
        out = dict(self.injected)
        if self.faulty is not None:
            for kind, n in self.faulty.injected().items():
                out[kind] = out.get(kind, 0) + n
        return out

    def note_node(self) -> None:
        """Remember the node id (known once the node opened: at the first write, or at a recovering open)."""
        if self.store is not None and self.store.node_id is not None:
            self.node_ids.add(self.store.node_id)

    def partition(self, topic: str, index: int) -> PartitionLog:
        assert self.store is not None
        return self.store.partition(topic, index)

    def close(self) -> None:
        """A clean close (flushes, seals, releases the WAL); the store object is dropped either way."""
        store, self.store = self.store, None
        if store is not None:
            try:
                store.close()
            finally:
                self.parked = _left_records_behind(store)

    def kill(self, *, power_loss: bool, seed: int) -> list[Append]:
        """The process dies now: the store object is abandoned, its disk handles go dead (with ``power_loss``
        its unsynced bytes are lost too); returns its appends still unresolved (their outcome is unknown)."""
        self.store = None
        self._disks.kill(self.root, power_loss=power_loss, seed=seed)
        pending, self.pending = self.pending, []
        return pending


def _left_records_behind(store: Store) -> bool:
    """After ``store.close()``: whether its node could not upload everything (fenced, or the bucket failed it
    until the close gave up), so some records are only in its local WAL until it opens again."""
    node = store.runtime.existing_node()
    if node is None:
        return False
    if node.uploader.buffered_bytes:
        return True
    try:
        node.uploader.check()
    except Closed:
        return False  # closed after uploading everything
    except S3StreamError:
        return True  # stopped by a failure (Fenced, an outage at close): the local WAL keeps the rest
    return False
