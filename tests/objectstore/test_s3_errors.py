"""S3 error mapping and retry policy: unit tests on the mapping function and a stubbed client."""

from __future__ import annotations

import datetime as dt
import io
import traceback
from collections.abc import Iterator

import botocore.exceptions as bce
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber

from s3stream.base.errors import (
    CorruptData,
    InvalidRequest,
    ObjectNotFound,
    ObjectStoreError,
    PreconditionFailed,
    StoreAccessError,
    Throttled,
    TransientError,
)
from s3stream.base.ids import IdSource
from s3stream.objectstore.protocol import ByteRange
from s3stream.objectstore.s3 import S3ObjectStore, map_botocore_error

from .support import SleepLog

SECRET = "s3stream-unit-secret-DO-NOT-PRINT"
ENDPOINT = "http://127.0.0.1:9"


def _client_error(code: str, status: int, message: str = "msg") -> bce.ClientError:
    return bce.ClientError({"Error": {"Code": code, "Message": message},
                            "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject")


@pytest.mark.parametrize(("exc", "op", "expected"), [
    (_client_error("NoSuchKey", 404), "GET", ObjectNotFound),
    (_client_error("404", 404), "HEAD", ObjectNotFound),
    (_client_error("PreconditionFailed", 412), "PUT", PreconditionFailed),
    (_client_error("ConditionalRequestConflict", 409), "PUT", PreconditionFailed),
    (_client_error("SlowDown", 503), "PUT", Throttled),
    (_client_error("ServiceUnavailable", 503), "GET", Throttled),
    (_client_error("TooManyRequests", 429), "GET", Throttled),
    (_client_error("Throttling", 400), "LIST", Throttled),
    (_client_error("InternalError", 500), "PUT", TransientError),
    (_client_error("BadGateway", 502), "GET", TransientError),
    (_client_error("RequestTimeout", 400), "PUT", TransientError),
    (_client_error("OperationAborted", 409), "DELETE", TransientError),
    (_client_error("NoSuchBucket", 404), "GET", StoreAccessError),
    (_client_error("AccessDenied", 403), "GET", StoreAccessError),
    (_client_error("InvalidAccessKeyId", 403), "PUT", StoreAccessError),
    (_client_error("SignatureDoesNotMatch", 403), "PUT", StoreAccessError),
    (_client_error("PermanentRedirect", 301), "GET", StoreAccessError),
    (_client_error("EntityTooLarge", 400), "PUT", ObjectStoreError),
    (bce.EndpointConnectionError(endpoint_url=ENDPOINT), "GET", TransientError),
    (bce.ConnectTimeoutError(endpoint_url=ENDPOINT), "PUT", TransientError),
    (bce.ReadTimeoutError(endpoint_url=ENDPOINT), "PUT", TransientError),
    (bce.ConnectionClosedError(endpoint_url=ENDPOINT), "PUT", TransientError),
    (bce.IncompleteReadError(actual_bytes=1, expected_bytes=2), "GET", TransientError),
    (bce.NoCredentialsError(), "GET", StoreAccessError),
    (bce.FlexibleChecksumError(error_msg="crc32 mismatch"), "GET", CorruptData),
    (bce.ParamValidationError(report="bad"), "PUT", InvalidRequest),
])
def test_mapping(exc: Exception, op: str, expected: type[Exception]) -> None:
    err = map_botocore_error(exc, op=op, key="k/1", endpoint=ENDPOINT, bucket="bkt")
    assert type(err) is expected
    if expected is StoreAccessError:
        assert ENDPOINT in str(err) and "bkt" in str(err)


def test_409_on_put_notes_the_conflict() -> None:
    err = map_botocore_error(_client_error("ConditionalRequestConflict", 409), op="PUT", key="m",
                             endpoint=ENDPOINT, bucket="bkt")
    assert isinstance(err, PreconditionFailed) and "409" in str(err)


# -- retries, with a stubbed client -------------------------------------------------------------------


@pytest.fixture
def clock() -> SleepLog:
    return SleepLog()


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch, clock: SleepLog) -> Iterator[S3ObjectStore]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "unit-access")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    s = S3ObjectStore("bkt", prefix="pre", endpoint_url=ENDPOINT, clock=clock, ids=IdSource(0),
                      max_attempts=4, multipart_threshold=10, part_size=6, list_order="server")
    yield s
    s.close()


@pytest.fixture
def stub(store: S3ObjectStore) -> Iterator[Stubber]:
    with Stubber(store._client) as stubber:
        yield stubber
        stubber.assert_no_pending_responses()


def _body(data: bytes) -> StreamingBody:
    return StreamingBody(io.BytesIO(data), len(data))


def _error(stub: Stubber, method: str, code: str, status: int, message: str = "msg") -> None:
    stub.add_client_error(method, service_error_code=code, service_message=message, http_status_code=status)


def test_idempotent_get_is_retried_with_backoff(stub: Stubber, store: S3ObjectStore, clock: SleepLog) -> None:
    _error(stub, "get_object", "InternalError", 500)
    _error(stub, "get_object", "SlowDown", 503)
    stub.add_response("get_object", {"Body": _body(b"data"), "ContentLength": 4}, {"Bucket": "bkt", "Key": "pre/k"})
    assert store.get("k") == b"data"
    assert len(clock.sleeps) == 2
    assert 0.025 <= clock.sleeps[0] <= 0.05 and 0.05 <= clock.sleeps[1] <= 0.1


def test_retries_stop_after_max_attempts(stub: Stubber, store: S3ObjectStore, clock: SleepLog) -> None:
    for _ in range(4):
        _error(stub, "put_object", "InternalError", 500)
    with pytest.raises(TransientError):
        store.put("k", b"x")  # unconditional: idempotent, retried
    assert len(clock.sleeps) == 3


def test_conditional_put_is_not_retried_after_an_unknown_outcome(stub: Stubber, store: S3ObjectStore,
                                                                 clock: SleepLog) -> None:
    _error(stub, "put_object", "InternalError", 500)
    with pytest.raises(TransientError):
        store.put("m/1", b"x", if_none_match=True)
    _error(stub, "put_object", "InternalError", 500)
    with pytest.raises(TransientError):
        store.put("m/1", b"x", if_match='"e"')
    assert clock.sleeps == []


def test_conditional_put_retries_a_throttle_then_reports_the_412(stub: Stubber, store: S3ObjectStore,
                                                                 clock: SleepLog) -> None:
    _error(stub, "put_object", "SlowDown", 503)
    _error(stub, "put_object", "PreconditionFailed", 412)
    with pytest.raises(PreconditionFailed):
        store.put("m/1", b"x", if_none_match=True)
    assert len(clock.sleeps) == 1


def test_conditional_put_sends_the_headers(stub: Stubber, store: S3ObjectStore) -> None:
    stub.add_response("put_object", {"ETag": '"a"'},
                      {"Bucket": "bkt", "Key": "pre/m/1", "Body": b"x", "IfNoneMatch": "*"})
    stub.add_response("put_object", {"ETag": '"b"'},
                      {"Bucket": "bkt", "Key": "pre/m/1", "Body": b"y", "IfMatch": '"a"'})
    assert store.put("m/1", b"x", if_none_match=True).etag == '"a"'
    assert store.put("m/1", b"y", if_match='"a"').etag == '"b"'


def test_messages_never_contain_the_secret(stub: Stubber, store: S3ObjectStore) -> None:
    _error(stub, "get_object", "SignatureDoesNotMatch", 403, message=f"computed with {SECRET}")
    with pytest.raises(StoreAccessError) as info:
        store.get("k")
    assert SECRET not in str(info.value)
    assert info.value.__cause__ is None  # the botocore exception carried the secret: not chained
    assert SECRET not in "".join(traceback.format_exception(info.value))
    assert ENDPOINT in str(info.value) and "bkt" in str(info.value)


def test_ranged_get_checks_content_range(stub: Stubber, store: S3ObjectStore) -> None:
    stub.add_response("get_object", {"Body": _body(b"234"), "ContentRange": "bytes 2-4/10"},
                      {"Bucket": "bkt", "Key": "pre/k", "Range": "bytes=2-4"})
    assert store.get("k", ByteRange(2, 5)) == b"234"
    stub.add_response("get_object", {"Body": _body(b"345"), "ContentRange": "bytes 3-5/10"})
    with pytest.raises(CorruptData, match="asked for bytes"):
        store.get("k", ByteRange(2, 5))
    stub.add_response("get_object", {"Body": _body(b"0123456789")})  # a server that ignores Range
    assert store.get("k", ByteRange.last(3)) == b"789"


def test_range_past_the_end_is_empty(stub: Stubber, store: S3ObjectStore) -> None:
    _error(stub, "get_object", "InvalidRange", 416)
    assert store.get("k", ByteRange(100)) == b""


def test_misordered_listing_is_corrupt_in_server_mode(stub: Stubber, store: S3ObjectStore) -> None:
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    stub.add_response("list_objects_v2", {"IsTruncated": False, "Contents": [
        {"Key": "pre/b", "Size": 1, "LastModified": now}, {"Key": "pre/a", "Size": 1, "LastModified": now}]})
    with pytest.raises(CorruptData, match="out of order"):
        list(store.list(""))


def test_listing_pages_follow_continuation_tokens(stub: Stubber, store: S3ObjectStore) -> None:
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    stub.add_response("list_objects_v2", {
        "IsTruncated": True, "NextContinuationToken": "t1",
        "Contents": [{"Key": "pre/a", "Size": 1, "LastModified": now}]},
        {"Bucket": "bkt", "Prefix": "pre/", "MaxKeys": 1000, "StartAfter": "pre/0"})
    _error(stub, "list_objects_v2", "InternalError", 500)  # the page request is retried alone
    stub.add_response("list_objects_v2", {
        "IsTruncated": False, "Contents": [{"Key": "pre/b", "Size": 2, "LastModified": now}]},
        {"Bucket": "bkt", "Prefix": "pre/", "MaxKeys": 1000, "StartAfter": "pre/0", "ContinuationToken": "t1"})
    entries = list(store.list("", start_after="0"))
    assert [(e.key, e.size, e.last_modified_ms) for e in entries] == [
        ("a", 1, int(now.timestamp() * 1000)), ("b", 2, int(now.timestamp() * 1000))]


def test_multipart_upload_aborts_on_failure(stub: Stubber, store: S3ObjectStore) -> None:
    stub.add_response("create_multipart_upload", {"UploadId": "u1"})
    stub.add_response("upload_part", {"ETag": '"p1"'})
    _error(stub, "upload_part", "AccessDenied", 403)
    stub.add_response("abort_multipart_upload", {}, {"Bucket": "bkt", "Key": "pre/big", "UploadId": "u1"})
    with pytest.raises(StoreAccessError):
        store.put("big", b"x" * 11)


def test_multipart_complete_with_a_lost_response_is_read_back(stub: Stubber, store: S3ObjectStore) -> None:
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    stub.add_response("create_multipart_upload", {"UploadId": "u1"})
    stub.add_response("upload_part", {"ETag": '"p1"'}, {"Bucket": "bkt", "Key": "pre/big", "UploadId": "u1",
                                                      "PartNumber": 1, "Body": b"x" * 6})
    stub.add_response("upload_part", {"ETag": '"p2"'}, {"Bucket": "bkt", "Key": "pre/big", "UploadId": "u1",
                                                      "PartNumber": 2, "Body": b"x" * 5})
    _error(stub, "complete_multipart_upload", "InternalError", 500)
    _error(stub, "complete_multipart_upload", "NoSuchUpload", 404)
    stub.add_response("head_object", {"ContentLength": 11, "ETag": '"m-2"', "LastModified": now})
    assert store.put("big", b"x" * 11).etag == '"m-2"'
