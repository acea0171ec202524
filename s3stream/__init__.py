"""s3stream: Kafka-style partitions whose data lives in S3-compatible object storage.

The stable surface::

    import s3stream
    store = s3stream.open_store("file:///var/lib/s3stream")
    store.create_topic("orders", partitions=3, config={"cleanup.policy": "compact"})
    log = store.partition("orders", 0)
    res = log.append([s3stream.Record(key=b"k1", value=b"v1")])
    log.read(res.base_offset)
"""

from __future__ import annotations

from s3stream.base import errors
from s3stream.base.clock import Clock, ManualClock, SystemClock
from s3stream.base.errors import (
    BufferFull,
    Closed,
    CorruptData,
    Fenced,
    InvalidArgument,
    InvalidConfig,
    InvalidRecord,
    OffsetOutOfRange,
    PolicyViolation,
    RecordTooLarge,
    S3StreamError,
    StoreAccessError,
    StoreUnavailable,
    TopicExists,
    UnknownTopic,
)
from s3stream.base.ids import IdSource
from s3stream.base.records import AppendResult, LogExtent, Record, SegmentInfo
from s3stream.partition.log import PartitionLog
from s3stream.store import Store, open_store

__all__ = [
    "AppendResult",
    "BufferFull",
    "Clock",
    "Closed",
    "CorruptData",
    "Fenced",
    "IdSource",
    "InvalidArgument",
    "InvalidConfig",
    "InvalidRecord",
    "LogExtent",
    "ManualClock",
    "OffsetOutOfRange",
    "PartitionLog",
    "PolicyViolation",
    "Record",
    "RecordTooLarge",
    "S3StreamError",
    "SegmentInfo",
    "Store",
    "StoreAccessError",
    "StoreUnavailable",
    "SystemClock",
    "TopicExists",
    "UnknownTopic",
    "errors",
    "open_store",
]

__version__ = "0.1.0"
