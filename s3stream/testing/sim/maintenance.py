"""The maintenance actions of the simulation: the engine's background steps one at a time, blocking flushes,
rolls, retention, cleaner and GC passes, DeleteRecords, and topic changes (config, partitions, re-creation),
with the model learning what each may have removed."""

from __future__ import annotations

from s3stream.base.errors import S3StreamError
from s3stream.maintenance.retention import run_retention_pass
from s3stream.manifest.topicdoc import TopicDoc
from s3stream.testing.sim.process import SimProcess
from s3stream.testing.sim.setup import ALTERS
from s3stream.testing.sim.world import SimWorld

__all__ = ["Maintenance"]


class Maintenance(SimWorld):
    """Background steps, maintenance passes and topic changes (a mixin of :class:`~.runner.Simulation`)."""

    def _engine_step(self, p: SimProcess, name: str) -> str:
        steps = self._store(p).runtime.steps()
        if name == "run_until_idle":
            return f"{steps.run_until_idle(max_steps=500)} steps"
        did: bool = getattr(steps, name)()
        return "did" if did else "idle"

    def _blocking(self, p: SimProcess, name: str) -> str:
        getattr(self._store(p), name)()
        return "ok"

    def _roll(self, p: SimProcess) -> str:
        key = self.rng.choice(sorted(self.parts))
        p.partition(*key).roll()
        return f"{self.parts[key].name} rolled"

    def _cutoffs(self) -> None:
        """A retention pass ran: what it may have deleted by time (records older than ``now - retention.ms``)."""
        now = self.clock.now_ms()
        for part in self.parts.values():
            retention = int(self.configs[part.topic].get("retention.ms", "604800000"))
            if part.delete and retention >= 0:
                cutoff = now - retention
                part.retention_cutoff = cutoff if part.retention_cutoff is None else max(part.retention_cutoff,
                                                                                         cutoff)

    def _retention(self, p: SimProcess, *, flush: bool) -> str:
        store = self._store(p)
        try:
            report = store.run_retention() if flush else run_retention_pass(store.runtime)
        finally:
            self._cutoffs()  # at the clock the pass ended at (a request's latency passes time)
        return f"{report.segments_deleted} segments deleted{' (after a flush)' if flush else ''}"

    def _clean(self, p: SimProcess, *, flush: bool) -> str:
        store = self._store(p)
        try:
            report = store.run_cleaner() if flush else store.cleaner.run_pass()
        finally:
            self._cutoffs()
        cleaned = report.cleaned
        return ("nothing to clean" if cleaned is None else
                f"cleaned {cleaned.log_id.split('/')[0]}: {cleaned.records_read}->{cleaned.records_kept}"
                f"{' aborted' if cleaned.aborted else ''}")

    def _gc(self, p: SimProcess) -> str:
        report = self._store(p).collect_garbage()
        return f"{report.count()} deleted"

    def _delete_records(self, p: SimProcess) -> str:
        candidates = sorted(k for k, part in self.parts.items() if part.delete)
        key = self.rng.choice(candidates)
        part = self.parts[key]
        plog = p.partition(*key)
        start, end = plog.log_start_offset, plog.log_end_offset
        target = self.rng.randint(start, max(start, min(end, start + 8)))
        part.deleted_before = max(part.deleted_before, target)
        new_start = plog.delete_records(target)
        return f"{part.name} before {target}: log start {new_start}"

    def _add_partitions(self, p: SimProcess) -> str:
        """Grow a topic by a partition (Kafka's CreatePartitions); the new one starts empty."""
        t = self.rng.choice(self.topics)
        have = sum(1 for (name, _) in self.parts if name == t.name)
        if have >= 4:
            return f"{t.name} has {have} partitions already"
        store = self._store(p)
        try:
            store.add_partitions(t.name, have + 1)
            outcome = f"{t.name} has {have + 1} partitions"
        except S3StreamError as exc:
            outcome = f"{t.name}: error {type(exc).__name__}"
        total = self._catalog_doc(p, t.name).partitions  # what the catalog holds (a lost response may have landed)
        if total > have:
            self._register(t, self.topic_ids[t.name], range(have, total))
        return outcome

    def _recreate(self, p: SimProcess) -> str:
        """Delete a topic and create it again under the same name: the new incarnation starts empty (nothing of
        the old one may turn up in it) and GC takes the old one's objects."""
        t = self.rng.choice(self.topics)
        count = sum(1 for (name, _) in self.parts if name == t.name)
        store = self._store(p)
        old_id = self.topic_ids[t.name]
        try:
            store.delete_topic(t.name)
            store.create_topic(t.name, count, self.configs[t.name])
            outcome = f"{t.name} recreated"
        except S3StreamError as exc:  # as an operator would: finish it with the bucket answering
            outcome = f"{t.name}: error {type(exc).__name__}, finished without faults"
            assert p.faulty is not None
            with p.faulty.paused():
                doc = store.runtime.catalog.load(t.name, refresh=True)
                if doc is not None and not doc.deleted and doc.topic_id == old_id:
                    store.delete_topic(t.name)
                doc = store.runtime.catalog.load(t.name, refresh=True)
                if doc is None or doc.deleted:
                    store.create_topic(t.name, count, self.configs[t.name])
        new_id = self._catalog_doc(p, t.name).topic_id
        self.observer.dead_topic_ids.add(old_id)
        self.grace.file_delete_delay_ms.pop(old_id, None)
        for key in [k for k in self.parts if k[0] == t.name]:
            del self.parts[key]
            del self.producers[key]
        self._register(t, new_id, range(count))
        self.count("topics_recreated")
        return outcome

    def _catalog_doc(self, p: SimProcess, name: str) -> TopicDoc:
        """The topic document the catalog holds now (read with faults paused: the simulation's own look)."""
        assert p.faulty is not None
        assert p.store is not None
        with p.faulty.paused():
            doc = p.store.runtime.catalog.load(name, refresh=True)
        assert doc is not None, f"topic {name} is gone"
        assert not doc.deleted, f"topic {name} is deleted"
        return doc

    def _alter(self, p: SimProcess) -> str:
        topic = self.rng.choice([t.name for t in self.topics])
        key = self.rng.choice(sorted(ALTERS))
        value = self.rng.choice(ALTERS[key])
        if key == "retention.ms" and "delete" not in self.configs[topic]["cleanup.policy"]:
            key, value = "segment.ms", "2000"
        if key == "file.delete.delay.ms":
            topic_id = self.topic_ids[topic]
            self.grace.file_delete_delay_ms[topic_id] = min(self.grace.file_delete_delay_ms.get(topic_id, 1 << 62),
                                                            int(value))
        self._store(p).alter_topic_config(topic, {key: value})
        self.configs[topic][key] = value
        return f"{topic} {key}={value}"
