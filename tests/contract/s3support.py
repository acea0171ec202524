"""Helpers for running the contract against S3 servers: a fresh key prefix per test, small parts."""

from __future__ import annotations

import itertools

import pytest

from s3stream.base.errors import InvalidRequest
from s3stream.base.ids import IdSource
from s3stream.objectstore.protocol import ObjectStore
from s3stream.objectstore.s3 import ListOrder, S3ObjectStore

MiB = 1 << 20
#: Small enough that the contract's 12 MiB object takes the multipart path (parts of 5 MiB, S3's minimum).
MULTIPART_THRESHOLD = 6 * MiB
PART_SIZE = 5 * MiB
#: A small page size so the pagination test crosses several pages with few keys.
LIST_PAGE_SIZE = 7
PAGINATION_KEYS = 40

_RUN = IdSource().token(4)
_COUNTER = itertools.count()


def fresh_s3_store(bucket: str, *, endpoint_url: str | None, base_prefix: str = "",
                   region: str | None = None, list_order: ListOrder | None = None) -> S3ObjectStore:
    """A store on ``bucket`` under a prefix no other test uses."""
    prefix = "/".join(p for p in (base_prefix.strip("/"), f"contract-{_RUN}", f"t{next(_COUNTER):04d}") if p)
    return S3ObjectStore(bucket, prefix=prefix, endpoint_url=endpoint_url, region=region,
                         multipart_threshold=MULTIPART_THRESHOLD, part_size=PART_SIZE,
                         list_page_size=LIST_PAGE_SIZE, max_attempts=4, list_order=list_order)


def empty_prefix(store: S3ObjectStore) -> None:
    """Delete every key the test left (so shared buckets stay small)."""
    for entry in list(store.list("")):
        store.delete(entry.key)


class S3MultipartTests:
    """What only an S3 server shows: multipart ETags (``-N``) and S3's minimum part size."""

    def test_large_object_used_multipart(self, store: ObjectStore) -> None:
        meta = store.put("big/mp", b"m" * (12 << 20))
        assert meta.etag.strip('"').endswith("-3")  # 5 + 5 + 2 MiB parts

    def test_upload_uses_multipart_above_one_part(self, store: ObjectStore) -> None:
        small = store.open_upload("up/small", part_bytes=PART_SIZE)
        small.write(b"s" * (PART_SIZE // 2))
        assert "-" not in small.complete().etag  # one plain PUT
        with store.open_upload("up/mp", part_bytes=PART_SIZE) as upload:
            upload.write(b"m" * (2 * PART_SIZE + 1))
            meta = upload.complete()
        assert meta.etag.strip('"').endswith("-3")  # 5 + 5 MiB + 1 byte
        assert store.head("up/mp").etag == meta.etag

    def test_upload_refuses_parts_below_s3_minimum(self, store: ObjectStore) -> None:
        with pytest.raises(InvalidRequest):
            store.open_upload("up/tiny", part_bytes=PART_SIZE - 1)
