"""Helpers for running the contract against S3 servers: a fresh key prefix per test, small parts."""

from __future__ import annotations

import itertools

from s3stream.ids import IdSource
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
