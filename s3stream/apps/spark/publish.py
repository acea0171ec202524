"""Publishing staged segment objects (the driver's commit of a Spark write) and discarding the rest.

:func:`publish` is the commit of :mod:`s3stream.apps.spark.writer`: it opens a Store on the URL (a producer
process, with its own node and WAL namespace) and, per partition in the order ``(topic, partition)``,
calls ``PartitionLog.publish_segments`` with the staged objects in ``(task, seq)`` order: one claim as
writer (fencing the previous writer), one manifest commit assigning consecutive offsets. With a marker
``(writer_id, batch_id)`` a replayed streaming micro-batch publishes nothing, and its freshly staged
objects are deleted at once. :func:`discard_unpublished` is the abort: it deletes staged objects that no
latest manifest references, so nothing a partial commit made visible is ever touched.
No pyspark here: both run on the driver side and are testable without a JVM.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from s3stream.apps.spark.snapshot import LogReader
from s3stream.apps.spark.staging import StagedObject
from s3stream.apps.spark.tasks import object_store_for
from s3stream.base.errors import S3StreamError, UnknownTopic
from s3stream.base.records import AppendResult
from s3stream.objectstore.protocol import ObjectStore

__all__ = ["discard_unpublished", "publish"]

log = logging.getLogger(__name__)


def publish(url: str, staged: Sequence[StagedObject], *,
            marker: tuple[str, int] | None = None) -> dict[tuple[str, int], AppendResult | None]:
    """Publish staged objects, one manifest commit per partition (see the module docstring).

    Returns, per ``(topic, partition)``, the offsets assigned, or None for a replayed micro-batch (whose
    staged objects are then deleted).
    """
    from s3stream.partition.log import StagedSegment
    from s3stream.store import open_store

    groups: dict[tuple[str, int], list[StagedObject]] = {}
    for obj in sorted(staged, key=lambda o: (o.task, o.seq)):
        groups.setdefault((obj.topic, obj.partition), []).append(obj)
    results: dict[tuple[str, int], AppendResult | None] = {}
    if not groups:
        return results
    with open_store(url) as store:
        for topic, partition in sorted(groups):
            items = groups[(topic, partition)]
            plog = store.partition(topic, partition)
            if plog.topic_id != items[0].topic_id:
                raise UnknownTopic(f"topic {topic!r} was deleted (and re-created) during the write")
            segments = [StagedSegment(key=o.key, object_size=o.object_size, record_count=o.record_count,
                                      size_bytes=o.size_bytes, max_timestamp=o.max_timestamp,
                                      first_timestamp=o.first_timestamp, crc32c=o.crc32c) for o in items]
            result = plog.publish_segments(segments, marker=marker)
            results[(topic, partition)] = result
            if result is None:
                log.info("%s/%d: micro-batch %s was already committed; dropping its replayed objects",
                         topic, partition, marker)
                _delete(store.object_store, [o.key for o in items])
    return results


def _delete(store: ObjectStore, keys: Sequence[str]) -> None:
    for key in keys:
        try:
            store.delete(key)
        except S3StreamError as exc:
            log.warning("could not delete staged object %s (GC will): %s", key, exc)


def discard_unpublished(url: str, staged: Sequence[StagedObject]) -> int:
    """Delete the staged objects no latest manifest references; returns how many were deleted."""
    if not staged:
        return 0
    store = object_store_for(url)
    reader = LogReader(store)
    doomed: list[str] = []
    by_partition: dict[tuple[str, str, int], list[StagedObject]] = {}
    for obj in staged:
        by_partition.setdefault((obj.topic, obj.topic_id, obj.partition), []).append(obj)
    for (topic, topic_id, partition), items in sorted(by_partition.items()):
        try:
            info = reader.topic(topic)
            live = {s.key for s in reader.manifest_store(info, partition).load_latest_or_empty().segments} \
                if info.topic_id == topic_id else set()
        except S3StreamError as exc:
            log.warning("abort: cannot check %s/%d (leaving its staged objects to GC): %s", topic, partition, exc)
            continue
        doomed.extend(o.key for o in items if o.key not in live)
    _delete(store, doomed)
    return len(doomed)
