"""The distributed compaction job's pieces: plan on the driver, map and rewrite tasks, the atomic swap.

It is the in-process cleaner's round (:mod:`cleaner.executor`) cut into Spark tasks, built from the same
pure parts, so a partition compacts to exactly the same records, offsets and tombstone horizons:

* **plan** (driver, :func:`plan_compaction`): the partition's manifest snapshot, the cleaner's selection
  (:func:`cleaner.selection.plan_log`, eligibility by :func:`cleaner.selection.choose_filthiest`), the
  offset-map capacity from the store settings (:func:`cleaner.offsetmap.map_capacity`), and a new
  cleaner epoch (``claim_cleaner``): from then on an older cleaner of this partition is fenced.
* **map** (one task per partition, :func:`build_map`): the offset map over the dirty range with
  :class:`cleaner.offsetmap.OffsetMapBuilder`, reading only the ``offset`` and ``key`` columns. Its
  bounded size (``log.cleaner.dedupe.buffer.size``) keeps partial cleaning identical to the cleaner's.
  The map goes to a job-scoped object (``_spark/jobs/{job}/maps/...``, Arrow IPC) that rewrite tasks
  read, so the driver never holds it; the job deletes it at the end (store GC, if the job crashed).
* **rewrite** (one task per group of segments, :func:`rewrite_group`): groups from
  :func:`cleaner.grouping.group_segments`; each group's records pass :func:`cleaner.keep.retain` (the one
  definition of which records survive, with the same ``now``) and are PUT as one cleaned segment covering
  the group's offset range, keyed like any segment (an unreferenced one is an orphan for GC).
* **swap** (driver, :func:`swap`): ONE manifest commit per partition replacing exactly the input
  segments, setting the checkpoint and the earliest tombstone horizon, only if every input is still
  there and the job's cleaner epoch is current; otherwise the outputs are deleted at once.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from cleaner.grouping import group_segments
from cleaner.intents import HORIZON_ATTRIBUTE, set_attribute
from cleaner.keep import KeepStats, retain
from cleaner.offsetmap import MAP_SCHEMA, OffsetMap, OffsetMapBuilder, map_capacity
from cleaner.scan import CHUNK_BYTES
from cleaner.selection import LogSnapshot, LogToClean, SegmentFacts, choose_filthiest
from s3stream.apps.spark.segio import segment_tables
from s3stream.apps.spark.snapshot import LogReader, PartitionSnapshot, segment_source
from s3stream.apps.spark.tasks import object_store_for
from s3stream.base import layout
from s3stream.base.errors import CorruptData
from s3stream.base.ids import IdSource
from s3stream.base.records import RECORD_SCHEMA
from s3stream.base.settings import StoreSettings
from s3stream.format.segment import encode_segment
from s3stream.manifest.intents import claim_cleaner, compose, replace_segments
from s3stream.manifest.model import Epoch, Manifest, SegmentRef
from s3stream.manifest.versioned import cleaner_fence
from s3stream.objectstore.protocol import ObjectStore

__all__ = [
    "GroupResult",
    "MapResult",
    "PartitionPlan",
    "build_map",
    "plan_compaction",
    "rewrite_group",
    "swap",
]


@dataclass(frozen=True, slots=True)
class PartitionPlan:
    """One partition's round, planned on the driver (picklable)."""

    url: str
    job_id: str
    topic: str
    topic_id: str
    partition: int
    manifest_seq: int
    segments: tuple[SegmentRef, ...]
    plan: LogToClean
    capacity: int
    epoch: Epoch
    now_ms: int
    delete_retention_ms: int
    segment_bytes: int
    row_group_bytes: int

    @property
    def map_key(self) -> str:
        return layout.job_map_key(self.job_id, self.topic_id, self.partition)


@dataclass(frozen=True, slots=True)
class MapResult:
    """What a map task reports (the entries themselves are in the map object)."""

    latest_offset: int
    full: bool
    size: int
    bytes_read: int


@dataclass(frozen=True, slots=True)
class GroupResult:
    """One rewritten group: its output segment and statistics."""

    index: int
    output: SegmentRef
    stats: KeepStats
    min_horizon: int | None
    bytes_read: int


def _log_snapshot(snap: PartitionSnapshot) -> LogSnapshot:
    """The cleaner's selection input (as ``cleaner.service`` builds it for a partition it does not write)."""
    m, cfg = snap.manifest, snap.topic.config
    horizon = m.attributes.get(HORIZON_ATTRIBUTE)
    return LogSnapshot(
        log_id=f"{snap.topic.name}/{snap.topic.topic_id}/{snap.partition}",
        segments=tuple(SegmentFacts(s.base_offset, s.end_offset, s.size_bytes, s.largest_timestamp,
                                    s.first_batch_max_timestamp) for s in m.segments),
        active_base=m.next_offset, log_start_offset=m.log_start_offset, log_end_offset=m.next_offset,
        checkpoint=m.cleaner_checkpoint, min_cleanable_dirty_ratio=cfg.min_cleanable_dirty_ratio,
        min_compaction_lag_ms=cfg.min_compaction_lag_ms, max_compaction_lag_ms=cfg.max_compaction_lag_ms,
        tombstone_horizon_ms=int(horizon) if horizon is not None else None,
        tombstone_cleanup_on_idle=cfg.tombstone_cleanup_on_idle)


def plan_compaction(reader: LogReader, url: str, job_id: str, snap: PartitionSnapshot, *, now_ms: int,
                    settings: StoreSettings, force: bool = False) -> PartitionPlan | None:
    """The round of ``snap``'s partition, with a claimed cleaner epoch; None when it is not eligible.

    ``force`` cleans a partition with anything cleanable even below ``min.cleanable.dirty.ratio``.
    """
    cfg = snap.topic.config
    if not cfg.compact:
        return None
    selection = _log_snapshot(snap)
    best, plans = choose_filthiest([selection], now_ms)
    plan = best if best is not None else (plans[0] if force and plans and plans[0].cleanable_bytes > 0 else None)
    if plan is None:
        return None
    capacity = map_capacity(settings.log_cleaner_dedupe_buffer_size, settings.log_cleaner_threads,
                            settings.log_cleaner_io_buffer_load_factor)
    m = reader.manifest_store(snap.topic, snap.partition).commit(claim_cleaner(f"spark-{job_id}"))
    if m.cleaner is None or m.segments != snap.manifest.segments:
        return None  # the log changed while we looked: leave it to the next run
    return PartitionPlan(url, job_id, snap.topic.name, snap.topic.topic_id, snap.partition, m.seq, m.segments,
                         plan, capacity, m.cleaner, now_ms, cfg.delete_retention_ms, cfg.segment_bytes,
                         settings.segment_row_group_bytes)


def _encode_map(omap: OffsetMap) -> bytes:
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, MAP_SCHEMA, options=ipc.IpcWriteOptions(compression="lz4")) as writer:
        writer.write_table(omap.entries)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def build_map(p: PartitionPlan, store: ObjectStore | None = None) -> MapResult:
    """Map task: the offset map over ``[first_dirty, first_uncleanable)``, stored at ``p.map_key``."""
    store = store or object_store_for(p.url)
    upper, first_dirty = p.plan.first_uncleanable, p.plan.first_dirty
    builder = OffsetMapBuilder(start_offset=first_dirty, capacity=p.capacity)
    read = 0
    for seg in p.segments:
        if seg.base_offset >= upper or seg.end_offset <= first_dirty:
            continue
        parts = list(segment_tables(store, segment_source(seg), max(seg.base_offset, first_dirty), seg.end_offset,
                                    columns=["offset", "key"], chunk_bytes=1 << 62))
        rows = pa.concat_tables(parts) if parts else pa.schema(
            [RECORD_SCHEMA.field("offset"), RECORD_SCHEMA.field("key")]).empty_table()
        read += int(rows.nbytes)
        if not builder.add_segment(rows, next_base=min(upper, seg.end_offset)):
            break
    omap = builder.finish(upper=upper)
    store.put(p.map_key, _encode_map(omap))
    return MapResult(omap.latest_offset, omap.full, omap.size, read)


_MAPS: dict[str, OffsetMap] = {}
_MAPS_LOCK = threading.Lock()


def _load_map(store: ObjectStore, p: PartitionPlan, m: MapResult) -> OffsetMap:
    """The stored map of ``p`` (cached per executor process: every group of a partition uses it)."""
    with _MAPS_LOCK:
        hit = _MAPS.get(p.map_key)
    if hit is not None:
        return hit
    data = store.get(p.map_key)
    try:
        entries = ipc.open_stream(pa.py_buffer(data)).read_all()
    except (pa.ArrowException, OSError) as exc:
        raise CorruptData(f"cannot decode the offset map: {exc}", source=p.map_key) from exc
    if not entries.schema.equals(MAP_SCHEMA) or entries.num_rows != m.size:
        raise CorruptData("the offset map does not match its task's report", source=p.map_key)
    omap = OffsetMap(entries, m.latest_offset, m.full, p.capacity, p.plan.first_dirty)
    with _MAPS_LOCK:
        if len(_MAPS) > 8:
            _MAPS.clear()
        _MAPS[p.map_key] = omap
    return omap


def groups_of(p: PartitionPlan, m: MapResult) -> list[list[SegmentRef]]:
    """The cleaner's groups (CLEAN-GRP-1) of ``p`` once its map is known."""
    return group_segments(list(p.segments), end_offset=m.latest_offset + 1, max_bytes=p.segment_bytes,
                          upper=p.plan.first_uncleanable)


def _min_horizon(table: pa.Table, current: int | None) -> int | None:
    low = pc.min(table.column("horizon_ms")).as_py() if table.num_rows else None
    if low is None:
        return current
    return int(low) if current is None else min(current, int(low))


def rewrite_group(p: PartitionPlan, m: MapResult, index: int, store: ObjectStore | None = None,
                  ids: IdSource | None = None) -> GroupResult:
    """Rewrite task: group ``index``'s survivors as one cleaned segment (PUT, not yet referenced)."""
    store = store or object_store_for(p.url)
    group = groups_of(p, m)[index]
    omap = _load_map(store, p, m)
    stats, horizon, kept = KeepStats(0, 0, 0, 0, 0), None, []
    for seg in group:
        for chunk in segment_tables(store, segment_source(seg), seg.base_offset, seg.end_offset,
                                    chunk_bytes=CHUNK_BYTES):
            survivors, s = retain(chunk, omap, now_ms=p.now_ms, delete_retention_ms=p.delete_retention_ms)
            stats = KeepStats(*(a + b for a, b in zip(dataclasses.astuple(stats), dataclasses.astuple(s),
                                                      strict=True)))
            horizon = _min_horizon(survivors, horizon)
            kept.append(survivors)
    table = pa.concat_tables(kept) if kept else RECORD_SCHEMA.empty_table()
    first_ts = int(table.column("timestamp")[0].as_py()) if table.num_rows else -1
    data, summary = encode_segment(table, base_offset=group[0].base_offset, last_offset=group[-1].last_offset,
                                   first_batch_max_timestamp=first_ts, row_group_bytes=p.row_group_bytes)
    key = layout.segment_key(p.topic_id, p.partition, group[0].base_offset, (ids or IdSource()).ulid(p.now_ms))
    store.put(key, data)
    ref = SegmentRef(key=key, base_offset=group[0].base_offset, last_offset=group[-1].last_offset,
                     size_bytes=summary.size_bytes, object_size=summary.object_size,
                     record_count=summary.record_count, max_timestamp=summary.max_timestamp,
                     first_batch_max_timestamp=first_ts, created_ms=group[-1].created_ms, crc32c=summary.crc32c,
                     cleaned=True)
    return GroupResult(index, ref, stats, horizon, sum(s.size_bytes for s in group))


def swap(reader: LogReader, p: PartitionPlan, m: MapResult, results: Sequence[GroupResult]) -> Manifest:
    """ONE commit: the inputs become the outputs, with the checkpoint and the earliest tombstone horizon.

    Raises CommitConflict (an input is gone) or Fenced (a newer cleaner); the caller deletes the outputs.
    """
    inputs = [s.key for g in groups_of(p, m) for s in g]
    outputs = [r.output for r in sorted(results, key=lambda r: r.index)]
    horizons = [r.min_horizon for r in results if r.min_horizon is not None]
    horizon = str(min(horizons)) if horizons else None
    topic = reader.topic(p.topic)
    return reader.manifest_store(topic, p.partition).commit(
        compose(replace_segments(inputs, outputs, now_ms=p.now_ms, checkpoint=m.latest_offset + 1),
                set_attribute(HORIZON_ATTRIBUTE, horizon)),
        check=cleaner_fence(p.epoch))
