"""The public error taxonomy: each class is named for what the caller should do.

Tree (``retriable`` says whether retrying the same call may succeed)::

    S3StreamError                        base of everything s3stream raises on purpose
    ├── InvalidRequest                   the caller's input is wrong; fix it
    │   ├── InvalidConfig                a config key/value breaks a rule (message names key and rule)
    │   ├── InvalidTopic                 a topic name breaks Kafka's naming rules
    │   ├── InvalidArgument              an argument has the wrong type or an impossible value (read("a"));
    │   │                                also a TypeError and a ValueError
    │   ├── InvalidRecord                a record is not acceptable (e.g. null key on a compacted topic)
    │   │   └── MalformedRecord          a Record field of the wrong type or range (also InvalidArgument)
    │   ├── RecordTooLarge               a record or batch exceeds max.message.bytes
    │   ├── OffsetOutOfRange             below the log start offset or above the log end offset
    │   ├── UnknownTopic                 no such topic or partition
    │   ├── InvalidPartitions            a partition count out of range, or not more than the topic has
    │   ├── TopicExists                  create_topic on an existing name
    │   ├── PolicyViolation              the topic's policy forbids this (DeleteRecords on compact-only)
    │   └── OutOfOrderSequence           an idempotent producer skipped a sequence number (KIP-98)
    ├── ProducerFenced                   a newer epoch of this producer id exists; the old one must stop
    ├── UnknownProducerId                the log holds no state for this producer id (expired or removed)
    ├── Fenced                           a newer writer/cleaner owns this; stop, never retry
    ├── CorruptData                      bytes failed a checksum/bounds/version check; quarantine
    │   └── LocalWalCorrupt              the local WAL holds damage a crash does not explain; open refused,
    │                                    nothing changed (names file, byte offset): `s3stream wal quarantine`
    ├── LocalWalUnavailable              the local WAL directory cannot be written or read (read-only,
    │   │                                permission, I/O error): fix the disk, then reopen the store
    │   └── LocalWalFull                 no space left for the local WAL (retriable: appends resume by
    │                                    themselves once space returns)
    ├── Closed                           the store or log was closed
    ├── UnsafeStore                      the object store's conditional writes are broken (probe finding)
    ├── StoreAccessError                 endpoint/bucket/credentials problem (names endpoint and bucket)
    ├── StoreUnavailable                 ack=s3: the object store is unreachable for now (retriable)
    ├── BufferFull                       appends waited max.block.ms for buffer room (retriable)
    ├── ObjectStoreError                 object store adapter errors
    │   ├── ObjectNotFound               (also a FileNotFoundError)
    │   ├── PreconditionFailed           a conditional write lost (412 or 409)
    │   ├── Throttled                    503 SlowDown / 429  (retriable)
    │   └── TransientError               5xx, timeout, reset: outcome unknown for writes (retriable)
    ├── CommitConflict                   an intent no longer applies (its inputs are gone); abandon
    ├── CommitTimeout                    the commit deadline passed under contention (retriable)
    └── InternalError                    a bug in s3stream

The object store adapters translate their library's exceptions into these classes in one place each;
nothing above an adapter sees botocore or OSError.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "BufferFull",
    "Closed",
    "CommitConflict",
    "CommitTimeout",
    "CorruptData",
    "Fenced",
    "InternalError",
    "InvalidArgument",
    "InvalidConfig",
    "InvalidPartitions",
    "InvalidRecord",
    "InvalidRequest",
    "InvalidTopic",
    "LocalWalCorrupt",
    "LocalWalFull",
    "LocalWalUnavailable",
    "MalformedRecord",
    "ObjectNotFound",
    "ObjectStoreError",
    "OffsetOutOfRange",
    "OutOfOrderSequence",
    "PolicyViolation",
    "PreconditionFailed",
    "ProducerFenced",
    "RecordTooLarge",
    "S3StreamError",
    "StoreAccessError",
    "StoreUnavailable",
    "Throttled",
    "TopicExists",
    "TransientError",
    "UnknownProducerId",
    "UnknownTopic",
    "UnsafeStore",
]


class S3StreamError(Exception):
    """Base class of every error s3stream raises on purpose."""

    retriable: ClassVar[bool] = False


class InvalidRequest(S3StreamError):
    """The caller's request is wrong; retrying it unchanged fails again."""


class InvalidConfig(InvalidRequest):
    """A configuration key or value breaks a rule; the message names the key and the rule."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class InvalidTopic(InvalidRequest):
    """A topic name breaks Kafka's naming rules."""


class InvalidRecord(InvalidRequest):
    """A record cannot be appended (for example a null key on a compacted topic)."""


class InvalidArgument(InvalidRequest, TypeError, ValueError):
    """An argument has the wrong type or an impossible value (``read("a")``, ``max_bytes=-1``); fix the call.

    Also a TypeError and a ValueError, so code written for Python's conventions catches it too.
    """


class MalformedRecord(InvalidRecord, InvalidArgument):
    """A :class:`~s3stream.base.records.Record` was built from a field of the wrong type or range (an int
    header value, a bool timestamp); raised when the Record is built, before any append."""


class RecordTooLarge(InvalidRequest):
    """A record or a batch is larger than the topic's ``max.message.bytes``."""


class OffsetOutOfRange(InvalidRequest):
    """The offset is below the log start offset or above the log end offset."""

    def __init__(self, message: str, *, offset: int | None = None, log_start_offset: int | None = None,
                 log_end_offset: int | None = None) -> None:
        super().__init__(message)
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class UnknownTopic(InvalidRequest):
    """No such topic, or no such partition of an existing topic."""


class InvalidPartitions(InvalidRequest):
    """A partition count out of range, or (adding partitions) not more than the topic has: Kafka's
    INVALID_PARTITIONS."""


class TopicExists(InvalidRequest):
    """A topic with this name already exists."""


class PolicyViolation(InvalidRequest):
    """The topic's policy forbids the operation (e.g. DeleteRecords on a compact-only topic)."""


class OutOfOrderSequence(InvalidRequest):
    """An idempotent producer's batch does not continue its sequence (a gap: an earlier batch was lost)."""


class ProducerFenced(S3StreamError):
    """A batch carries an older epoch of its producer id than the log has seen: a newer instance took over."""


class UnknownProducerId(S3StreamError):
    """A batch continues a sequence the log holds no state for (the producer's state expired or was removed)."""


class Fenced(S3StreamError):
    """A newer writer or cleaner epoch owns this log; the fenced process must stop, never overwrite."""


class CorruptData(S3StreamError):
    """Bytes read from disk, the network or the bucket failed a checksum, bounds or version check."""

    def __init__(self, message: str, *, source: str | None = None) -> None:
        super().__init__(f"{source}: {message}" if source else message)
        self.source = source


class LocalWalCorrupt(CorruptData):
    """The local WAL holds damage a crash does not explain (entries after it may have been acknowledged).

    The store refuses to open it and changes nothing; ``path`` and ``offset`` say where the damage starts,
    ``directory`` is the node's WAL directory to quarantine (``s3stream wal quarantine DIRECTORY``).
    """

    def __init__(self, message: str, *, directory: str | None = None, path: str | None = None,
                 offset: int | None = None) -> None:
        super().__init__(message)  # the message names the path already
        self.source = path
        self.directory = directory
        self.path = path
        self.offset = offset


class LocalWalUnavailable(S3StreamError):
    """The local WAL directory cannot be used: read-only, permission denied, an I/O error.

    Fix the disk or the directory, then reopen the store (restart the process); ``errno`` is the OS
    error's number when one caused it.
    """

    def __init__(self, message: str, *, directory: str | None = None, errno: int | None = None) -> None:
        super().__init__(message)
        self.directory = directory
        self.errno = errno


class LocalWalFull(LocalWalUnavailable):
    """No space left on the local WAL's disk (or quota); retry: appends resume once space returns."""

    retriable = True


class Closed(S3StreamError):
    """The store, log or component was closed."""


class UnsafeStore(S3StreamError):
    """The object store's conditional writes are missing or broken; multi-writer mode is refused."""


class StoreAccessError(S3StreamError):
    """The store cannot be reached or used: wrong endpoint, missing bucket, denied credentials."""


class ObjectStoreError(S3StreamError):
    """Base of the errors an ObjectStore backend raises."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class ObjectNotFound(ObjectStoreError, FileNotFoundError):
    """The object does not exist (404 / NoSuchKey)."""


class PreconditionFailed(ObjectStoreError):
    """A conditional write lost: If-None-Match on an existing key, or an If-Match mismatch (412/409)."""


class Throttled(ObjectStoreError):
    """The store asked us to slow down (503 SlowDown, 429)."""

    retriable = True


class TransientError(ObjectStoreError):
    """5xx, timeout or connection reset: for a write the outcome is unknown."""

    retriable = True


class CommitConflict(S3StreamError):
    """An intent no longer applies to the latest manifest (e.g. compaction inputs are gone)."""


class CommitTimeout(S3StreamError):
    """The commit could not land before its deadline (contention or an unavailable store)."""

    retriable = True


class InternalError(S3StreamError):
    """An invariant of s3stream itself was broken: a bug."""


class StoreUnavailable(S3StreamError):
    """The object store cannot be reached right now; retry later, the node keeps retrying by itself.

    With ``ack=s3`` an append raises it when its WAL object was not committed within ``max.block.ms``
    (its records stay in the local WAL and may still be committed: a retry can duplicate them), and at
    once, writing nothing, while uploads have been failing for longer than that.
    """

    retriable = True


class BufferFull(S3StreamError):
    """An append waited ``max.block.ms`` for room in ``buffer.bytes``; nothing was written: retry later.

    The buffer drains as WAL objects are committed, so this means uploads lag behind appends (an
    object-store outage, or more load than the store takes).
    """

    retriable = True
