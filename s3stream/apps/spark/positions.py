"""Where a query reads: the subscribed partitions, and each one's start and end offsets.

Rules (Spark's Kafka source, see :mod:`s3stream.apps.spark.options`):

* subscribed partitions: every partition of the ``subscribe`` topics or of the topics matching
  ``subscribePattern`` (``re.fullmatch``), or exactly the ``assign`` ones; a named topic that does not
  exist is an error (UnknownTopic), a pattern may match none;
* a start or end is resolved per partition, timestamps first (``*Timestamp`` for every partition, else
  ``*OffsetsByTimestamp`` for the partitions it names), then the offsets spec: ``-2`` earliest (the log
  start), ``-1`` latest (the log end), or an explicit offset;
* an explicit offset below the log start is data loss: an error with ``failOnDataLoss``, else the log
  start with a warning; above the log end it is an error (OffsetOutOfRange).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping

from s3stream.apps.spark.options import EARLIEST, LATEST, OffsetSpec, ReadOptions
from s3stream.apps.spark.snapshot import LogReader, PartitionSnapshot, TopicInfo
from s3stream.base.errors import InvalidRequest, OffsetOutOfRange, UnknownTopic

__all__ = ["resolve_end", "resolve_start", "subscribed"]

log = logging.getLogger(__name__)


def subscribed(opts: ReadOptions, reader: LogReader) -> list[tuple[TopicInfo, int]]:
    """Every subscribed ``(topic, partition)``, sorted by topic name then partition."""
    out: list[tuple[TopicInfo, int]] = []
    if opts.assign:
        for name in sorted(opts.assign):
            info = reader.topic(name)
            for p in opts.assign[name]:
                if p >= info.partitions:
                    raise UnknownTopic(f"topic {name!r} has no partition {p} (it has {info.partitions})")
                out.append((info, p))
        return out
    if opts.pattern is not None:
        regex = re.compile(opts.pattern)
        names = [n for n in reader.topic_names() if regex.fullmatch(n)]
    else:
        names = sorted(set(opts.topics))
    for name in names:
        info = reader.topic(name)
        out.extend((info, p) for p in range(info.partitions))
    return out


def _timestamp_for(spec: Mapping[tuple[str, int], int] | int | None, topic: str, partition: int) -> int | None:
    if spec is None:
        return None
    if isinstance(spec, int):
        return spec
    return spec.get((topic, partition))


def _explicit(snap: PartitionSnapshot, offset: int, *, what: str, fail_on_data_loss: bool) -> int:
    name = f"{snap.topic.name}/{snap.partition}"
    if offset > snap.log_end_offset:
        raise OffsetOutOfRange(f"{what} offset {offset} of {name} is past the log end {snap.log_end_offset}",
                               offset=offset, log_start_offset=snap.log_start_offset,
                               log_end_offset=snap.log_end_offset)
    if offset < snap.log_start_offset:
        message = f"{what} offset {offset} of {name} is below the log start {snap.log_start_offset}"
        if fail_on_data_loss:
            raise OffsetOutOfRange(message + " (data loss; set failOnDataLoss=false to start at the log start)",
                                   offset=offset, log_start_offset=snap.log_start_offset,
                                   log_end_offset=snap.log_end_offset)
        log.warning("%s; using the log start (failOnDataLoss=false)", message)
        return snap.log_start_offset
    return offset


def _resolve(opts: ReadOptions, reader: LogReader, snap: PartitionSnapshot, spec: OffsetSpec,
             timestamps: Mapping[tuple[str, int], int] | int | None, *, what: str) -> int:
    topic, p = snap.topic.name, snap.partition
    ts = _timestamp_for(timestamps, topic, p)
    if ts is not None:
        found = reader.offset_for_timestamp(snap, ts)
        if found is not None:
            return found
        if what == "starting" and opts.timestamp_strategy == "error":
            raise InvalidRequest(f"{topic}/{p} has no record with a timestamp >= {ts}; set "
                                 "startingOffsetsByTimestampStrategy=latest to start at the log end instead")
        return snap.log_end_offset
    value = spec.for_partition(topic, p)
    if value == EARLIEST:
        return snap.log_start_offset
    if value == LATEST:
        return snap.log_end_offset
    return _explicit(snap, value, what=what, fail_on_data_loss=opts.fail_on_data_loss)


def resolve_start(opts: ReadOptions, reader: LogReader, snap: PartitionSnapshot) -> int:
    """The first offset to read of ``snap``'s partition."""
    return _resolve(opts, reader, snap, opts.starting, opts.starting_timestamps, what="starting")


def resolve_end(opts: ReadOptions, reader: LogReader, snap: PartitionSnapshot) -> int:
    """The exclusive end offset of a batch read of ``snap``'s partition."""
    return _resolve(opts, reader, snap, opts.ending, opts.ending_timestamps, what="ending")
