"""The contract against a real endpoint: ``S3STREAM_TEST_S3_URL`` (skipped when unset).

Example: ``S3STREAM_TEST_S3_URL='s3://my-bucket/ci?endpoint_url=http://127.0.0.1:9000'`` for MinIO, or
``s3://my-bucket/ci?region=eu-west-1`` for AWS. Credentials come from the environment as it was when
pytest started (the local-server fixtures' throwaway credentials are undone for these tests). Every test
works under its own sub-prefix and deletes what it wrote. Set ``S3STREAM_TEST_S3_ATOMIC=0`` for a server
whose conditional writes are not atomic (the race tests are then skipped).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from s3stream.objectstore.protocol import ObjectStore
from s3stream.objectstore.url import parse_store_url
from s3stream.testing.contract import ObjectStoreContract

from .s3support import PAGINATION_KEYS, PART_SIZE, S3MultipartTests, empty_prefix, fresh_s3_store

URL = os.environ.get("S3STREAM_TEST_S3_URL", "")
pytestmark = [pytest.mark.s3, pytest.mark.skipif(not URL, reason="S3STREAM_TEST_S3_URL is not set")]


class TestEnvS3Contract(ObjectStoreContract, S3MultipartTests):
    atomic_conditional_writes = os.environ.get("S3STREAM_TEST_S3_ATOMIC", "1") != "0"
    pagination_keys = PAGINATION_KEYS
    upload_part_bytes = PART_SIZE

    @pytest.fixture
    def store(self, monkeypatch: pytest.MonkeyPatch,
              original_aws_env: dict[str, str | None]) -> Iterator[ObjectStore]:
        for name, value in original_aws_env.items():
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, value)
        parsed = parse_store_url(URL)
        order = parsed.params.get("list_order")
        store = fresh_s3_store(parsed.bucket_or_path, endpoint_url=parsed.params.get("endpoint_url"),
                               base_prefix=parsed.prefix, region=parsed.params.get("region"),
                               list_order="sort" if order == "sort" else "server" if order else None)
        yield store
        empty_prefix(store)
        store.close()
