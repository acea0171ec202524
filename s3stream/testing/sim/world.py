"""The state of one seed's world, in one place: what every action family of the simulation reads and changes.

:class:`SimWorld` builds the world from the seed (a manual clock, a bucket, the processes' disks, store settings
and topics drawn from the seed) and holds the model of every partition, the producers, the faults in force and
the trace. The action families (:mod:`.workload`, :mod:`.maintenance`, :mod:`.lifecycle`, :mod:`.environment`)
and the audit (:mod:`.audit`) are mixins over it; :class:`~.runner.Simulation` combines them.
"""

from __future__ import annotations

from pathlib import Path

from s3stream.base.clock import ManualClock
from s3stream.base.crashpoints import SimulatedCrash
from s3stream.base.errors import (
    CorruptData,
    Fenced,
    InternalError,
    LocalWalFull,
    LocalWalUnavailable,
    S3StreamError,
)
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.store import Store
from s3stream.testing.faults import FaultRule
from s3stream.testing.latency import LATENCY_PROFILES, LatencyProfile
from s3stream.testing.sim.bucket import BucketObserver, Grace
from s3stream.testing.sim.disk import SimDisks
from s3stream.testing.sim.model import PartModel, Row
from s3stream.testing.sim.options import SimOptions, SimResult
from s3stream.testing.sim.process import SimProcess, derive
from s3stream.testing.sim.producers import SimProducer
from s3stream.testing.sim.setup import SimRandom, SimTopic, store_settings, topics

__all__ = ["BUGS", "T0", "SimWorld"]

T0 = 1_700_000_000_000

#: Outcomes no fault the simulation injects explains: the store reported a bug or damage of its own making.
BUGS = (InternalError, CorruptData)


class SimWorld:
    """The world of one seed (see the module docstring); the action mixins add what can happen in it."""

    def __init__(self, seed: int, options: SimOptions, workdir: Path) -> None:
        self.seed = seed
        self.options = options
        self.rng = SimRandom(derive(seed, "actions"))
        setup = SimRandom(derive(seed, "setup"))
        self.settings = store_settings(setup)
        self.topics = topics(setup)
        latency: LatencyProfile | None = None
        if setup.random() < 0.3:
            latency = LATENCY_PROFILES[setup.choice(["lan", "s3-express", "s3-standard"])]
        self.clock = ManualClock(T0, pacing="manual")
        delays = {t.name: int(t.config["file.delete.delay.ms"]) for t in self.topics}
        self._delays_by_name = delays
        self.grace = Grace(self.settings["orphan_min_age_ms"], self.settings["manifest_min_age_ms"], {})
        self.observer = BucketObserver(MemoryObjectStore("", clock=self.clock), self.clock, self.grace,
                                       on_claim=self._on_claim)
        self.disks = SimDisks()
        self.procs = {name: SimProcess(name, seed=seed, workdir=workdir, clock=self.clock, bucket=self.observer,
                                       disks=self.disks, settings=self.settings, latency=latency)
                      for name in ("A", "B")}
        # the auditor's own process: it never writes, so it sees what the bucket holds
        self.reader = SimProcess("R", seed=seed, workdir=workdir, clock=self.clock, bucket=self.observer,
                                 disks=self.disks, settings=self.settings, latency=None)
        self.parts: dict[tuple[str, int], PartModel] = {}
        self.producers: dict[tuple[str, int], list[SimProducer]] = {}
        self._retries: dict[int, tuple[SimProducer, bool]] = {}  # retry aid -> its producer, must it dedupe
        self._append_part: dict[int, PartModel] = {}  # aid -> its partition's model (a topic may be recreated)
        self.by_prefix: dict[str, PartModel] = {}
        self.configs = {t.name: dict(t.config) for t in self.topics}
        self.topic_ids: dict[str, str] = {}  # topic name -> its live incarnation's id
        self.models: dict[tuple[str, int], PartModel] = {}  # (topic id, partition) -> its model, dead ones too
        self.trace: list[str] = [f"seed {seed} settings {sorted(self.settings.items())} "
                                 f"latency {None if latency is None else latency.name}",
                                 f"topics {[(t.name, t.partitions, sorted(t.config.items())) for t in self.topics]}"]
        self.problems: list[str] = []  # found inside callbacks (which must not raise): reported after the step
        self.rules: list[FaultRule] = []
        self.outage_left = 0
        self.disk_full_left = 0
        self.read_only_left = 0
        self.next_aid = 0
        self.step_no = 0
        self.stats: dict[str, int] = {}
        self._segments: dict[str, list[Row]] = {}  # segment key -> its records (objects are immutable)
        self._full = True  # the next audit reads everything through the engine
        self._touched: set[tuple[str, int]] | None = None  # the partitions the step may have changed (None: all)

    def result(self, failure: str | None = None) -> SimResult:
        if failure is not None:
            self.trace.append(f"FAILED: {failure.splitlines()[0]}")
        return SimResult(self.seed, self.options, failure is None, self.trace, failure, dict(self.stats))

    def count(self, what: str, n: int = 1) -> None:
        self.stats[what] = self.stats.get(what, 0) + n

    def _register(self, t: SimTopic, topic_id: str, indexes: range) -> None:
        """Model partitions ``indexes`` of topic ``t`` (whose incarnation is ``topic_id``): new, empty."""
        self.grace.file_delete_delay_ms[topic_id] = int(self.configs[t.name]["file.delete.delay.ms"])
        self.topic_ids[t.name] = topic_id
        for i in indexes:
            part = PartModel(t.name, i, compact=t.compact, delete=t.delete)
            self.parts[(t.name, i)] = part
            self.models[(topic_id, i)] = part
            self.producers[(t.name, i)] = [SimProducer(pid) for pid in (1, 2)]
            part.prefix = f"logs/{topic_id}/{i}/"
            self.by_prefix[part.prefix] = part

    def teardown(self) -> None:
        """Drop whatever is still open (quietly: the run's outcome is decided)."""
        for proc in [*self.procs.values(), self.reader]:
            store, proc.store = proc.store, None
            if store is not None:
                try:
                    store.close()
                except (S3StreamError, SimulatedCrash, OSError):
                    pass

    def _store(self, p: SimProcess) -> Store:
        assert p.store is not None, f"process {p.name} is not running"
        return p.store

    def _learn(self, proc: SimProcess, exc: BaseException) -> None:
        """What an error tells the process about itself (an operator would restart it on these). A ``Fenced``
        means the node was fenced when its uploads stopped for it (a partition-level one, a commit that met a
        newer writer epoch of one partition, leaves the node writing the others and claiming that one back)."""
        if isinstance(exc, Fenced):
            node = None if proc.store is None else proc.store.runtime.existing_node()
            proc.fenced = proc.fenced or (node is not None and node.uploader.fenced)
        elif isinstance(exc, LocalWalUnavailable) and not isinstance(exc, LocalWalFull):
            proc.wal_failed = True

    def _on_claim(self, prefix: str, node_id: str, next_offset: int) -> None:
        part = self.by_prefix.get(prefix)
        if part is None:
            return
        owner = next((p.name for p in self.procs.values() if node_id in p.node_ids or (
            p.store is not None and p.store.node_id == node_id)), None)
        if owner is None:
            self.problems.append(f"{part.name} claimed by an unknown node {node_id}")
            return
        self.count("claims")
        part.claim(owner, next_offset)
