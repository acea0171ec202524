"""The contract against moto's threaded S3 server (session-scoped, marked ``s3``).

moto honours If-None-Match/If-Match but its check-then-put is not atomic under concurrency, so the
race tests are skipped here (they run on SeaweedFS and any S3STREAM_TEST_S3_URL).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from s3stream.objectstore.protocol import ObjectStore
from s3stream.objectstore.s3 import S3ObjectStore
from s3stream.testing.contract import ObjectStoreContract

from .s3support import PAGINATION_KEYS, PART_SIZE, S3MultipartTests, empty_prefix, fresh_s3_store

pytestmark = pytest.mark.s3
BUCKET = "s3stream-contract"


@pytest.fixture(scope="module")
def moto_bucket(moto_endpoint: str) -> str:
    S3ObjectStore(BUCKET, endpoint_url=moto_endpoint).ensure_bucket()
    return BUCKET


class TestMotoContract(ObjectStoreContract, S3MultipartTests):
    atomic_conditional_writes = False
    pagination_keys = PAGINATION_KEYS
    upload_part_bytes = PART_SIZE

    @pytest.fixture
    def store(self, moto_endpoint: str, moto_bucket: str) -> Iterator[ObjectStore]:
        # moto lists in key order, so it covers the lazy server-side listing (SeaweedFS: sorted mode)
        store = fresh_s3_store(moto_bucket, endpoint_url=moto_endpoint, list_order="server")
        yield store
        empty_prefix(store)
        store.close()
