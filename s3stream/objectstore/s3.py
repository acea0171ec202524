"""The S3 backend (AWS S3 and S3-compatible servers: SeaweedFS, MinIO, moto) over boto3.

Vocabulary: the store's ``prefix`` is prepended to every key (``prefix/key``) and stripped back in
listings; the **endpoint** is ``endpoint_url`` (path-style addressing) or AWS itself.

Invariants:

* One boto3 client, shared by all threads (boto3 clients are thread-safe); botocore's own retries are
  **off** (``total_max_attempts=1``) because retrying is our decision (:mod:`s3stream.objectstore.retry`):
  idempotent calls retry with jittered backoff on the injected clock; a conditional PUT whose request
  may have reached the server is never repeated, its :class:`TransientError` goes up (outcome
  unknown) so the manifest protocol can read back its ``commit_id``. Multipart (a large ``put``, and
  ``open_upload``): each part is an idempotent request retried alone; a complete retried after an
  unknown outcome that then finds no upload is accepted only if the key now holds an object of the
  upload's size (the first attempt completed); any failure aborts the upload (best effort).
* Every botocore/urllib3 exception is translated by :func:`~s3stream.objectstore.retry.map_botocore_error`
  (re-exported here), the only place that knows S3 error codes; nothing above this module sees botocore.
* Credentials come only from the standard AWS chain (environment, profile, role). For a non-AWS
  endpoint with no credentials found, nothing is invented: :class:`StoreAccessError`. Error messages
  name the endpoint and bucket, never a credential (and are scrubbed of the secret key regardless). An
  ``endpoint_url`` carrying ``user:password@`` is refused before botocore (whose debug log prints it)
  sees it. botocore's DEBUG logs are filtered (:mod:`s3stream.objectstore.s3redact`): the secret key,
  the session token and request signatures print as ``***``.
* Opening fails fast: :meth:`S3ObjectStore.check_access` (one LIST, short connect timeout, three
  attempts) tells a closed port or rejected credentials in seconds, as :class:`StoreAccessError`;
  normal operation keeps ``max_attempts`` and its timeouts, to ride through a server restart.
* Bytes from the network are checked: a ranged GET must come back with the range asked for (or the
  whole object, which is then sliced), listings must be under the prefix (and, in ``server`` order,
  ordered); otherwise :class:`CorruptData`.
* Listings are lexicographic whatever the server does: SeaweedFS lists (and applies StartAfter) in its
  directory-tree order ("a/x" before "a-b"), so for non-AWS endpoints the default ``list_order`` is
  ``sort`` (whole prefix listed, sorted here); AWS (and opt-in MinIO) use lazy ``server`` order.
"""

from __future__ import annotations

import bisect
import functools
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

import boto3
import botocore.exceptions as bce
import botocore.loaders
import botocore.session
from botocore.config import Config

from s3stream.base.clock import Clock, SystemClock
from s3stream.base.errors import (
    CorruptData,
    InvalidRequest,
    ObjectNotFound,
    S3StreamError,
    StoreAccessError,
)
from s3stream.base.ids import IdSource
from s3stream.objectstore.endpoint import display_url, validate_endpoint_url
from s3stream.objectstore.keys import validate_key, validate_prefix
from s3stream.objectstore.protocol import DEFAULT_PART_BYTES, Body, ByteRange, ListEntry, ObjectMeta
from s3stream.objectstore.retry import (
    BACKEND_ERRORS,
    NOT_SENT_ERRORS,
    Attempt,
    BackoffPolicy,
    map_botocore_error,
    retry_call,
)
from s3stream.objectstore.s3body import read_body, read_body_pooled
from s3stream.objectstore.s3redact import install_redaction
from s3stream.objectstore.upload import PartedUpload

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef

__all__ = ["ListOrder", "S3ObjectStore", "map_botocore_error"]

T = TypeVar("T")
ListOrder = Literal["server", "sort"]
MiB = 1 << 20
#: S3's multipart limits: every part but the last at least 5 MiB, at most 10,000 parts.
MIN_PART_BYTES = 5 * MiB
MAX_PARTS = 10_000

_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")
#: :meth:`S3ObjectStore.check_access` at open: ~0.3 s of backoff in all, and at most these timeouts
#: per attempt, so an endpoint that is down is reported in seconds (not after ~20 s of retries).
_OPEN_POLICY = BackoffPolicy(base_s=0.1, cap_s=0.5, max_attempts=3)
_OPEN_CONNECT_TIMEOUT_S = 2.0
_OPEN_READ_TIMEOUT_S = 5.0
_LOADER_LOCK = threading.Lock()
_LOADER: list[botocore.loaders.Loader] = []


def _shared_loader() -> botocore.loaders.Loader:
    """One botocore data loader for every store: parsing the S3 service model costs ~0.2 s a client."""
    with _LOADER_LOCK:
        if not _LOADER:
            _LOADER.append(botocore.loaders.create_loader())
        return _LOADER[0]


class S3ObjectStore:
    """An ObjectStore on one S3 bucket (optionally under a key prefix). Thread-safe.

    Tuning beyond the protocol: ``max_attempts`` (ours; botocore never retries), ``put`` goes multipart
    above ``multipart_threshold`` in ``part_size`` parts (S3's minimum part is 5 MiB; ``open_upload``
    takes its part size per upload and uses the same multipart code), ``list_page_size``
    (MaxKeys; tests shrink it to cross pages cheaply) and ``list_order`` (see the module docstring).
    """

    def __init__(self, bucket: str, *, prefix: str = "", endpoint_url: str | None = None,
                 region: str | None = None, clock: Clock | None = None, ids: IdSource | None = None,
                 max_attempts: int = 8, multipart_threshold: int = 128 * MiB, part_size: int = 64 * MiB,
                 max_pool_connections: int = 32, connect_timeout_s: float = 5,
                 read_timeout_s: float = 30, list_page_size: int = 1000,
                 list_order: ListOrder | None = None) -> None:
        if list_order not in (None, "server", "sort"):
            raise InvalidRequest(f"list_order must be 'server' or 'sort', not {list_order!r}")
        if not bucket or "/" in bucket:
            raise InvalidRequest(f"invalid bucket name {bucket!r}")
        if part_size <= 0 or multipart_threshold <= 0 or not 1 <= list_page_size <= 1000:
            raise InvalidRequest("part_size, multipart_threshold must be > 0; list_page_size in [1, 1000]")
        prefix = prefix.strip("/")
        if prefix:
            validate_key(prefix)
        if endpoint_url is not None:
            validate_endpoint_url(endpoint_url)
        self._bucket, self._prefix, self._base = bucket, prefix, (prefix + "/" if prefix else "")
        self._endpoint_url = endpoint_url
        self._endpoint = display_url(endpoint_url) if endpoint_url else "AWS S3"
        self._clock = clock or SystemClock()
        self._ids = ids or IdSource()
        self._policy = BackoffPolicy(max_attempts=max_attempts)
        self._multipart_threshold, self._part_size = multipart_threshold, part_size
        self._page_size = list_page_size
        self._sort_listings = (list_order == "sort") if list_order else endpoint_url is not None
        self._client, self._secrets = self._make_client(region, max_pool_connections,
                                                        connect_timeout_s, read_timeout_s)

    def _make_client(self, region: str | None, pool: int, connect_s: float,
                     read_s: float) -> tuple[S3Client, tuple[str, ...]]:
        """The client, and the secrets no message may show; keeps the session and config for
        :meth:`check_access`'s short-lived client."""
        core = botocore.session.get_session()  # a fresh session: credentials resolved per store
        core.register_component("data_loader", _shared_loader())
        session = boto3.session.Session(botocore_session=core, region_name=region)
        creds = session.get_credentials()
        if creds is None and self._endpoint_url is not None:
            raise StoreAccessError(
                f"no AWS credentials found for endpoint {self._endpoint}, bucket {self._bucket}: set "
                "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a profile (s3stream never invents them)")
        secrets: tuple[str, ...] = ()
        if creds is not None:
            frozen = creds.get_frozen_credentials()
            secrets = tuple(s for s in (frozen.secret_key, frozen.token) if s)
        install_redaction(secrets)  # botocore's DEBUG logs print the token and signatures otherwise
        config = Config(
            region_name=session.region_name or "us-east-1",
            # botocore's "max_attempts" counts RETRIES (1 would still retry once): total_max_attempts=1
            # is the setting that really turns botocore's retries off.
            retries={"total_max_attempts": 1, "mode": "standard"},
            max_pool_connections=pool, connect_timeout=connect_s, read_timeout=read_s,
            s3={"addressing_style": "path"} if self._endpoint_url else {},
        )
        client = session.client("s3", endpoint_url=self._endpoint_url, config=config)
        self._session, self._config, self._timeouts = session, config, (connect_s, read_s)
        return client, secrets

    def check_access(self) -> None:
        """Check that the bucket can be listed under the prefix, failing fast: for opening a store.

        One LIST of at most one key with its own client (connect timeout ``_OPEN_CONNECT_TIMEOUT_S``) and
        ``_OPEN_POLICY``'s three attempts, so a closed port, an unknown host, a missing bucket or rejected
        credentials raise :class:`StoreAccessError` in seconds; the store's own client and retries (meant
        to ride through a server restart) stay as configured.
        """
        connect, read = min(_OPEN_CONNECT_TIMEOUT_S, self._timeouts[0]), min(_OPEN_READ_TIMEOUT_S, self._timeouts[1])
        client = self._session.client("s3", endpoint_url=self._endpoint_url, config=self._config.merge(
            Config(connect_timeout=connect, read_timeout=read, max_pool_connections=1)))
        try:
            retry_call(lambda: client.list_objects_v2(Bucket=self._bucket, Prefix=self._base, MaxKeys=1),
                       self._classify("LIST", None), idempotent=True, policy=_OPEN_POLICY, clock=self._clock,
                       ids=self._ids, on_exhausted=functools.partial(self._unreachable, _OPEN_POLICY))
        finally:
            client.close()

    # -- plumbing ---------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        query = f"?endpoint_url={self._endpoint}" if self._endpoint_url else ""
        return f"s3://{self._bucket}/{self._prefix}{query}"

    @property
    def bucket(self) -> str:
        """The bucket name."""
        return self._bucket

    def _full(self, key: str) -> str:
        """The bucket key of a valid object ``key`` (raises InvalidRequest otherwise)."""
        return self._base + validate_key(key)

    def _scrub(self, err: S3StreamError) -> bool:
        """Belt and braces: no message may contain the secret key or session token. True if it did."""
        text = str(err)
        if not any(s in text for s in self._secrets):
            return False
        for s in self._secrets:
            text = text.replace(s, "***")
        err.args = (text,)
        return True

    def _classify(self, op: str, key: str | None) -> Callable[[BaseException], Attempt | None]:
        def classify(exc: BaseException) -> Attempt | None:
            if not isinstance(exc, BACKEND_ERRORS):
                return None
            err = map_botocore_error(exc, op=op, key=key, endpoint=self._endpoint, bucket=self._bucket)
            # A scrubbed error must not carry the botocore exception (and its text) as its cause.
            return Attempt(err, not_sent=isinstance(exc, NOT_SENT_ERRORS), chain=not self._scrub(err))
        return classify

    def _unreachable(self, policy: BackoffPolicy, attempt: Attempt) -> S3StreamError:
        if attempt.not_sent:
            return StoreAccessError(f"endpoint {self._endpoint} unreachable (bucket {self._bucket}) after "
                                    f"{policy.max_attempts} attempts: {attempt.error}")
        return attempt.error

    def _call(self, op: str, key: str | None, fn: Callable[[], T], *, idempotent: bool = True) -> T:
        return retry_call(fn, self._classify(op, key), idempotent=idempotent, policy=self._policy,
                          clock=self._clock, ids=self._ids,
                          on_exhausted=functools.partial(self._unreachable, self._policy))

    # -- the ObjectStore verbs --------------------------------------------------------------------

    def put(self, key: str, data: bytes | bytearray | memoryview, *, if_none_match: bool = False,
            if_match: str | None = None) -> ObjectMeta:
        full = self._full(key)
        if if_none_match and if_match is not None:
            raise InvalidRequest("put: if_none_match and if_match are mutually exclusive")
        view = memoryview(data).cast("B")
        size = len(view)
        if if_none_match or if_match is not None or size <= self._multipart_threshold:
            body = data if isinstance(data, bytes | bytearray) else view.tobytes()
            etag = self._put_single(key, full, body, if_none_match=if_none_match, if_match=if_match)
        else:
            etag = self._put_multipart(key, full, view)
        return ObjectMeta(key, size, etag, self._clock.now_ms())

    def _put_single(self, key: str, full: str, data: bytes | bytearray, *, if_none_match: bool,
                    if_match: str | None) -> str:
        body = cast("bytes", data)  # botocore sends a bytearray as is (its stubs say bytes)

        def once() -> str:
            if if_none_match:
                resp = self._client.put_object(Bucket=self._bucket, Key=full, Body=body, IfNoneMatch="*")
            elif if_match is not None:
                resp = self._client.put_object(Bucket=self._bucket, Key=full, Body=body, IfMatch=if_match)
            else:
                resp = self._client.put_object(Bucket=self._bucket, Key=full, Body=body)
            return _etag(resp, key, self._bucket)

        conditional = if_none_match or if_match is not None
        return self._call("PUT", key, once, idempotent=not conditional)

    def _put_multipart(self, key: str, full: str, view: memoryview) -> str:
        """Upload ``view`` in ``part_size`` parts (each retried alone); abort the upload on failure."""
        upload = _S3Upload(self, key, full, self._part_size)
        upload.write(view)
        return upload.complete().etag

    def open_upload(self, key: str, *, part_bytes: int = DEFAULT_PART_BYTES) -> _S3Upload:
        """A multipart upload (created with the first part; a single PUT for an object of one part)."""
        full = self._full(key)
        if part_bytes < MIN_PART_BYTES:
            raise InvalidRequest(f"part_bytes {part_bytes} is below S3's minimum part of {MIN_PART_BYTES} bytes")
        return _S3Upload(self, key, full, part_bytes)

    def _upload_part(self, key: str, full: str, upload_id: str, number: int, chunk: bytes | bytearray) -> str:
        # botocore takes a bytearray body (its stubs say bytes): the part buffer is sent without a copy
        resp = self._client.upload_part(Bucket=self._bucket, Key=full, UploadId=upload_id,
                                        PartNumber=number, Body=cast("bytes", chunk))
        return _etag(resp, key, self._bucket)

    def _complete(self, key: str, full: str, upload_id: str, parts: list[CompletedPartTypeDef],
                  size: int, tries: list[int]) -> str:
        tries[0] += 1
        try:
            resp = self._client.complete_multipart_upload(
                Bucket=self._bucket, Key=full, UploadId=upload_id, MultipartUpload={"Parts": parts})
        except bce.ClientError as exc:
            if tries[0] > 1 and exc.response.get("Error", {}).get("Code") == "NoSuchUpload":
                meta = self.head(key)  # an earlier attempt completed but its response was lost
                if meta.size == size:
                    return meta.etag
            raise
        return _etag(resp, key, self._bucket)

    def _abort(self, full: str, upload_id: str) -> None:
        """Best effort: a failed abort leaves parts for the bucket's AbortIncompleteMultipartUpload rule."""
        try:
            self._client.abort_multipart_upload(Bucket=self._bucket, Key=full, UploadId=upload_id)
        except BACKEND_ERRORS:
            pass

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        return self._get(key, byte_range, read_body, b"")

    def get_view(self, key: str, byte_range: ByteRange | None = None) -> memoryview:
        """The body read from the socket into Arrow's pooled memory (:mod:`~s3stream.objectstore.s3body`)."""
        return self._get(key, byte_range, read_body_pooled, memoryview(b""))

    def _get(self, key: str, byte_range: ByteRange | None, read: Callable[[Mapping[str, Any]], Body],
             empty: Body) -> Body:
        full = self._full(key)
        header = None if byte_range is None else _range_header(byte_range)
        if byte_range is not None and header is None:  # an empty [start, start) range
            self.head(key)  # still raises ObjectNotFound for a missing key
            return empty
        source = f"s3://{self._bucket}/{full}"

        def once() -> Body:
            try:
                if header is None:
                    resp = self._client.get_object(Bucket=self._bucket, Key=full)
                else:
                    resp = self._client.get_object(Bucket=self._bucket, Key=full, Range=header)
            except bce.ClientError as exc:
                if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 416:
                    return empty  # the range starts at or past the end (the key exists: else 404)
                raise
            return _check_range_body(read(resp), resp.get("ContentRange"), byte_range, source)

        return self._call("GET", key, once)

    def head(self, key: str) -> ObjectMeta:
        full = self._full(key)
        resp = self._call("HEAD", key, lambda: self._client.head_object(Bucket=self._bucket, Key=full))
        return ObjectMeta(key, int(resp["ContentLength"]), _etag(resp, key, self._bucket),
                          int(resp["LastModified"].timestamp() * 1000))

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ListEntry]:
        """Keys under ``prefix`` after ``start_after`` in key order: lazily from the server (``server``
        order, verified) or listed whole, then sorted and filtered here (``sort``)."""
        validate_prefix(prefix)
        if not self._sort_listings:
            return self._list_pages(prefix, start_after, ordered=True)
        entries = sorted(self._list_pages(prefix, None, ordered=False), key=lambda e: e.key)
        if start_after is not None:
            entries = entries[bisect.bisect_right([e.key for e in entries], start_after):]
        return iter(entries)

    def _list_pages(self, prefix: str, start_after: str | None, *, ordered: bool) -> Iterator[ListEntry]:
        """Yield entries page by page; each page is one retried (idempotent) request."""
        kwargs: dict[str, Any] = {"Bucket": self._bucket, "Prefix": self._base + prefix,
                                  "MaxKeys": self._page_size}
        if start_after is not None:
            kwargs["StartAfter"] = self._base + start_after
        cut, last = len(self._base), kwargs.get("StartAfter", "")
        while True:
            page = dict(kwargs)
            resp = self._call("LIST", prefix, functools.partial(self._client.list_objects_v2, **page))
            for obj in resp.get("Contents", []):
                full = obj["Key"]
                if not full.startswith(kwargs["Prefix"]) or (ordered and full <= last):
                    raise CorruptData(f"listing returned {full!r} out of order or outside the prefix "
                                      "(for servers that do not list in key order use list_order='sort')",
                                      source=f"s3://{self._bucket}/{kwargs['Prefix']}")
                last = full
                yield ListEntry(full[cut:], int(obj["Size"]), int(obj["LastModified"].timestamp() * 1000))
            if not resp.get("IsTruncated"):
                return
            token = resp.get("NextContinuationToken")
            if not token:
                raise CorruptData("truncated listing without a continuation token",
                                  source=f"s3://{self._bucket}/{kwargs['Prefix']}")
            kwargs["ContinuationToken"] = token

    def delete(self, key: str) -> None:
        full = self._full(key)
        try:
            self._call("DELETE", key, lambda: self._client.delete_object(Bucket=self._bucket, Key=full))
        except ObjectNotFound:
            pass  # some stores answer 404 for a missing key; deleting it is still a success

    def ensure_bucket(self) -> None:
        """Create the bucket if it is missing (for tests and the local stack, not production)."""
        try:
            try:
                self._client.head_bucket(Bucket=self._bucket)
                return
            except bce.ClientError as exc:  # 404 (or 403 on some servers) when it does not exist
                if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") not in (403, 404):
                    raise
            region = self._client.meta.region_name
            extra: dict[str, Any] = ({} if region in (None, "us-east-1") else
                                     {"CreateBucketConfiguration": {"LocationConstraint": region}})
            self._client.create_bucket(Bucket=self._bucket, **extra)
        except BACKEND_ERRORS as exc:
            if isinstance(exc, bce.ClientError) and \
                    exc.response.get("Error", {}).get("Code") == "BucketAlreadyOwnedByYou":
                return
            err = map_botocore_error(exc, op="BUCKET", key=None, endpoint=self._endpoint, bucket=self._bucket)
            raise err from (None if self._scrub(err) else exc)

    def close(self) -> None:
        self._client.close()


def _etag(resp: Any, key: str, bucket: str) -> str:
    etag = resp.get("ETag")
    if not isinstance(etag, str) or not etag:
        raise CorruptData(f"response for {key!r} carries no ETag", source=f"s3://{bucket}/{key}")
    return etag


def _range_header(byte_range: ByteRange) -> str | None:
    """The HTTP ``Range`` header of ``byte_range``; None when the range is empty by construction."""
    if byte_range.suffix is not None:
        return f"bytes=-{byte_range.suffix}"
    if byte_range.end is None:
        return f"bytes={byte_range.start}-"
    if byte_range.end <= byte_range.start:
        return None
    return f"bytes={byte_range.start}-{byte_range.end - 1}"


def _check_range_body(body: Body, content_range: str | None, byte_range: ByteRange | None,
                      source: str) -> Body:
    """Check a GET body against the range asked for (never trust the server to have honoured it).

    A 206 must carry ``Content-Range: bytes first-last/total`` matching the resolved range and the
    body length; a 200 without it is the whole object (some servers ignore ``Range``), sliced here.
    """
    if byte_range is None:
        return body
    if not content_range:
        start, end = byte_range.resolve(len(body))
        return body[start:end]
    m = _CONTENT_RANGE.fullmatch(content_range.strip())
    if m is None:
        raise CorruptData(f"unparseable Content-Range {content_range!r}", source=source)
    first, last, total = int(m[1]), int(m[2]), int(m[3])
    start, end = byte_range.resolve(total)
    if (first, last + 1) != (start, end) or len(body) != end - start:
        raise CorruptData(f"asked for bytes [{start}, {end}) of {total}, got {content_range!r} with "
                          f"{len(body)} bytes", source=source)
    return body


class _S3Upload(PartedUpload):
    """One multipart upload: created lazily with part 1, each part retried alone (an unconditional part
    is idempotent), completed once with the check :meth:`S3ObjectStore._complete` does for a lost
    response, aborted on any failure (best effort: the bucket's AbortIncompleteMultipartUpload rule
    removes what an abort could not)."""

    def __init__(self, store: S3ObjectStore, key: str, full: str, part_bytes: int) -> None:
        super().__init__(key, part_bytes)
        self._store, self._full = store, full
        self._upload_id: str | None = None
        self._done: list[CompletedPartTypeDef] = []

    def _put_whole(self, data: bytearray) -> ObjectMeta:
        store = self._store
        etag = store._put_single(self.key, self._full, data, if_none_match=False, if_match=None)
        return ObjectMeta(self.key, len(data), etag, store._clock.now_ms())

    def _send_part(self, number: int, data: bytearray | memoryview) -> None:
        if number > MAX_PARTS:
            raise InvalidRequest(f"upload of {self.key!r} needs more than {MAX_PARTS} parts: raise the part size")
        store = self._store
        call = functools.partial(store._call, "PUT", self.key)
        if self._upload_id is None:
            self._upload_id = call(lambda: store._client.create_multipart_upload(
                Bucket=store.bucket, Key=self._full)["UploadId"])
        body = data if isinstance(data, bytearray) else bytes(data)  # botocore takes no memoryview body
        etag = call(functools.partial(store._upload_part, self.key, self._full, self._upload_id, number, body))
        self._done.append({"ETag": etag, "PartNumber": number})

    def _finish(self, parts: int, size: int) -> ObjectMeta:
        assert self._upload_id is not None
        store = self._store
        tries = [0]
        etag = store._call("PUT", self.key, functools.partial(
            store._complete, self.key, self._full, self._upload_id, self._done, size, tries))
        return ObjectMeta(self.key, size, etag, store._clock.now_ms())

    def _discard(self) -> None:
        if self._upload_id is not None:
            self._store._abort(self._full, self._upload_id)
