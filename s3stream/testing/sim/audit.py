"""The audit after every step: each partition read back (whole through the engine, or its sealed segments from
the bucket plus the unsealed tail) and checked against its model (the invariants of :mod:`.model`), with the
bucket's own findings (:mod:`.bucket`) and what callbacks found during the step."""

from __future__ import annotations

from s3stream.base.errors import S3StreamError
from s3stream.format.segment.reader import SegmentReader
from s3stream.manifest.model import SegmentRef
from s3stream.objectstore.fetch import ranged_fetch
from s3stream.partition.log import PartitionLog
from s3stream.testing.sim.model import AuditFailure, PartModel, Row
from s3stream.testing.sim.process import SimProcess
from s3stream.testing.sim.reading import read_all, table_rows
from s3stream.testing.sim.world import SimWorld

__all__ = ["Auditor"]

#: How stale a writer's view of its manifest may be (s3stream.partition.state re-reads it at least this often).
_WRITER_MANIFEST_MAX_AGE_S = 1.0


class Auditor(SimWorld):
    """The audit of the world's partitions (a mixin of :class:`~.runner.Simulation`)."""

    def _audit(self, when: str, *, reader: SimProcess | None = None, full: bool = True,
               only: set[tuple[str, int]] | None = None) -> None:
        """Check every invariant (see the package docstring). A ``full`` audit reads each partition whole through
        the engine (its sealed tier included); otherwise sealed segments, immutable, are decoded once each
        from the bucket and only what the latest manifest has not sealed is read through the engine, and only
        for the partitions in ``only`` (the step changed no other; None: all)."""
        if self.problems:
            raise AuditFailure(f"step {self.step_no} ({when}): {self.problems[0]}")
        if self.observer.violations:
            raise AuditFailure(f"step {self.step_no} ({when}): {self.observer.violations[0]}")
        missing = self.observer.missing_objects()
        if missing:
            raise AuditFailure(f"step {self.step_no} ({when}): {missing[0]}")
        summary = []
        for key in sorted(self.parts):
            if only is not None and key not in only:
                continue
            part = self.parts[key]
            proc = reader or self._reader_for(part)
            got = self._read(proc, key, when, full=full)
            if got is None:
                summary.append(f"{part.name}:stale")
                continue
            rows, log_start, leo = got
            self.count("acked_records_checked", len(part.must))
            try:
                parked = frozenset(p.name for p in self.procs.values() if p.parked)
                part.check(rows, log_start, leo, reader=f"{proc.name}#{proc.incarnation}", parked=parked)
                part.fold_check(rows, parked=parked)
            except AuditFailure as exc:
                raise AuditFailure(f"step {self.step_no} ({when}, read by {proc.name}#{proc.incarnation}): "
                                   f"{exc}") from None
            summary.append(f"{part.name}[{log_start},{leo}):{len(rows)}")
        self.trace.append(f"{self.step_no} audit {' '.join(summary)}")

    def _reader_for(self, part: PartModel) -> SimProcess:
        """Who reads a partition for the audit: the process that claimed it last (its unflushed tail is in its
        memory), else a process that never writes (it sees the bucket; a writer another node took the
        partition from would serve its own stale tail until it learns it was fenced)."""
        writer = self.procs.get(part.writer or "")
        if writer is not None and writer.alive:
            return writer  # fenced or not: nobody claimed the partition after it, so its view is the log's
        return self.reader

    def _read(self, proc: SimProcess, key: tuple[str, int], when: str, *, full: bool
              ) -> tuple[list[Row], int, int] | None:
        """Every record of partition ``key`` as ``proc`` sees it (faults paused: the audit reads, nothing else);
        None while ``proc`` still sees a deleted incarnation of the topic (its catalog cache, refreshed every
        few seconds, or kept through an outage: a stale view, not data of the new incarnation)."""
        assert proc.store is not None
        assert proc.faulty is not None
        try:
            with proc.faulty.paused():
                plog = proc.store.partition(*key)
                if plog.topic_id != self.topic_ids[key[0]]:
                    if when.startswith("final") and (proc is not self.reader or "fresh" in when):  # reopened
                        raise AuditFailure(f"step {self.step_no} ({when}): {proc.name}#{proc.incarnation} still "
                                           f"sees a deleted incarnation of {key[0]}")
                    self.count("stale_topic_views")
                    return None
                rows, log_start, leo = read_all(plog) if full else self._read_fast(plog, self.parts[key])
        except S3StreamError as exc:
            raise AuditFailure(f"step {self.step_no} ({when}): reading {key[0]}-{key[1]} through "
                               f"{proc.name}#{proc.incarnation} failed: {type(exc).__name__}: {exc}") from exc
        prefix = self.parts[key].prefix
        m = self.observer.latest.get(prefix)
        if m is not None and m.log_start_offset > log_start:
            # another process moved the log start (DeleteRecords, retention): a writer serving its tail re-reads
            # its manifest at least every second (docs/ARCHITECTURE.md, "Read"), so for up to that long it may
            # still serve records below it; the log starts where the bucket says
            stale_s = self.clock.monotonic() - self.observer.start_moved_at.get(prefix, self.clock.monotonic())
            if stale_s > _WRITER_MANIFEST_MAX_AGE_S + 0.001:
                raise AuditFailure(f"step {self.step_no} ({when}): {proc.name}#{proc.incarnation} reads "
                                   f"{key[0]}-{key[1]} from {log_start}, {stale_s:.3f} s after the log start moved "
                                   f"to {m.log_start_offset}")
            self.count("stale_log_start_views")
            log_start = m.log_start_offset
            rows = [r for r in rows if r.offset >= log_start]
        return rows, log_start, max(leo, log_start)

    def _read_fast(self, plog: PartitionLog, part: PartModel) -> tuple[list[Row], int, int]:
        """The partition from the bucket's latest manifest (its segments decoded once each) plus the unsealed
        tail read through ``plog``."""
        m = self.observer.latest.get(part.prefix)
        if m is None:
            return read_all(plog)
        rows: list[Row] = []
        for seg in m.segments:
            if seg.end_offset > m.log_start_offset:
                rows.extend(r for r in self._segment_rows(seg) if r.offset >= m.log_start_offset)
        tail, _, leo = read_all(plog, start=max(m.next_offset, m.log_start_offset))
        return rows + tail, m.log_start_offset, max(leo, m.next_offset)

    def _segment_rows(self, seg: SegmentRef) -> list[Row]:
        cached = self._segments.get(seg.key)
        if cached is None:
            reader = SegmentReader(ranged_fetch(self.observer.inner, seg.key), seg.object_size, source=seg.key)
            cached = self._segments[seg.key] = table_rows(reader.read_all(), seg.offset_delta)
        return cached
