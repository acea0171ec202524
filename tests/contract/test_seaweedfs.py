"""The contract against SeaweedFS ``weed mini`` (session-scoped; marked ``s3`` and ``seaweedfs``).

SeaweedFS's conditional writes are atomic, so the put-if-absent and If-Match race tests run here.
Skipped (with the reason) only when the ``weed`` binary is absent.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from s3stream.objectstore.protocol import ObjectStore
from s3stream.objectstore.s3 import S3ObjectStore
from s3stream.testing.contract import ObjectStoreContract

from .s3support import PAGINATION_KEYS, PART_SIZE, S3MultipartTests, empty_prefix, fresh_s3_store

pytestmark = [pytest.mark.s3, pytest.mark.seaweedfs]
BUCKET = "s3stream-contract"


@pytest.fixture(scope="module")
def seaweedfs_bucket(seaweedfs_endpoint: str) -> str:
    S3ObjectStore(BUCKET, endpoint_url=seaweedfs_endpoint).ensure_bucket()
    return BUCKET


class TestSeaweedfsContract(ObjectStoreContract, S3MultipartTests):
    atomic_conditional_writes = True
    pagination_keys = PAGINATION_KEYS
    upload_part_bytes = PART_SIZE
    # SeaweedFS makes some losers of a put-if-absent race wait whole seconds server-side; 8 racers
    # prove atomicity as well as 16 and keep the suite fast.
    race_threads = 8

    @pytest.fixture
    def store(self, seaweedfs_endpoint: str, seaweedfs_bucket: str) -> Iterator[ObjectStore]:
        store = fresh_s3_store(seaweedfs_bucket, endpoint_url=seaweedfs_endpoint)
        yield store
        empty_prefix(store)
        store.close()
