"""The one table from s3stream's typed errors to Kafka error codes, and the server's own protocol errors.

Handlers catch :class:`~s3stream.base.errors.S3StreamError` per partition (or per topic) and put
:func:`error_code` of it in the response; anything not in the table is UNKNOWN_SERVER_ERROR, logged.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from s3stream.base import errors as e

__all__ = ["ERROR_CODES", "CorruptBatch", "UnsupportedCompression", "error_code"]


class CorruptBatch(e.InvalidRequest):
    """A produced record batch failed its CRC32C, its bounds or its format checks (CORRUPT_MESSAGE)."""


class UnsupportedCompression(e.InvalidRequest):
    """A batch uses a compression codec this build cannot decode (UNSUPPORTED_COMPRESSION_TYPE)."""


#: Most specific first: the first class an error is an instance of gives its code.
ERROR_CODES: tuple[tuple[type[BaseException], ErrorCode], ...] = (
    (CorruptBatch, ErrorCode.corrupt_message),
    (UnsupportedCompression, ErrorCode.unsupported_compression_type),
    (e.InvalidConfig, ErrorCode.invalid_config),
    (e.InvalidTopic, ErrorCode.invalid_topic_exception),
    (e.RecordTooLarge, ErrorCode.message_too_large),
    (e.InvalidRecord, ErrorCode.invalid_record),
    (e.OffsetOutOfRange, ErrorCode.offset_out_of_range),
    (e.UnknownTopic, ErrorCode.unknown_topic_or_partition),
    (e.InvalidPartitions, ErrorCode.invalid_partitions),
    (e.TopicExists, ErrorCode.topic_already_exists),
    (e.PolicyViolation, ErrorCode.policy_violation),
    (e.OutOfOrderSequence, ErrorCode.out_of_order_sequence_number),
    (e.ProducerFenced, ErrorCode.invalid_producer_epoch),
    (e.UnknownProducerId, ErrorCode.unknown_producer_id),
    (e.InvalidArgument, ErrorCode.invalid_request),
    (e.InvalidRequest, ErrorCode.invalid_request),
    (e.Fenced, ErrorCode.not_leader_or_follower),
    (e.Closed, ErrorCode.not_leader_or_follower),
    (e.LocalWalFull, ErrorCode.kafka_storage_error),
    (e.LocalWalUnavailable, ErrorCode.kafka_storage_error),
    (e.CorruptData, ErrorCode.kafka_storage_error),
    (e.StoreUnavailable, ErrorCode.request_timed_out),
    (e.BufferFull, ErrorCode.request_timed_out),
    (e.CommitTimeout, ErrorCode.request_timed_out),
    (e.Throttled, ErrorCode.request_timed_out),
    (e.TransientError, ErrorCode.request_timed_out),
    (e.StoreAccessError, ErrorCode.kafka_storage_error),
)


def error_code(exc: BaseException) -> ErrorCode:
    """The Kafka error code for ``exc`` (UNKNOWN_SERVER_ERROR for anything not in :data:`ERROR_CODES`)."""
    for cls, code in ERROR_CODES:
        if isinstance(exc, cls):
            return code
    return ErrorCode.unknown_server_error
