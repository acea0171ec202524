"""S3 backend access errors against real servers: wrong bucket, bad or missing credentials, no server."""

from __future__ import annotations

from pathlib import Path

import pytest

from s3stream.apps.servers import free_ports
from s3stream.base.errors import StoreAccessError
from s3stream.base.ids import IdSource
from s3stream.objectstore.s3 import S3ObjectStore

from .support import SleepLog

WRONG_SECRET = "wrong-secret-that-must-never-be-printed"


@pytest.mark.s3
def test_wrong_bucket_names_endpoint_and_bucket(moto_endpoint: str) -> None:
    store = S3ObjectStore("no-such-bucket-s3stream", endpoint_url=moto_endpoint, max_attempts=2)
    for call in (lambda: store.get("k"), lambda: list(store.list("")), lambda: store.put("k", b"x")):
        with pytest.raises(StoreAccessError) as info:
            call()
        assert moto_endpoint in str(info.value) and "no-such-bucket-s3stream" in str(info.value)


@pytest.mark.s3
@pytest.mark.seaweedfs
def test_bad_secret_is_refused_without_printing_it(seaweedfs_endpoint: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    S3ObjectStore("s3stream-auth", endpoint_url=seaweedfs_endpoint).ensure_bucket()
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", WRONG_SECRET)
    store = S3ObjectStore("s3stream-auth", endpoint_url=seaweedfs_endpoint, max_attempts=2)
    with pytest.raises(StoreAccessError) as info:
        store.put("k", b"x", if_none_match=True)
    text = f"{info.value!s} {info.value!r} {info.value.__cause__!s}"
    assert "SignatureDoesNotMatch" in text
    assert seaweedfs_endpoint in str(info.value) and "s3stream-auth" in str(info.value)
    assert WRONG_SECRET not in text


def test_no_credentials_for_a_custom_endpoint_is_a_clear_error(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                 "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(StoreAccessError, match=r"no AWS credentials.*http://127\.0\.0\.1:9.*bkt"):
        S3ObjectStore("bkt", endpoint_url="http://127.0.0.1:9")


def test_unreachable_endpoint_is_an_access_error_after_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "a")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "b")
    (port,) = free_ports(1)  # nothing listens there
    clock = SleepLog()
    endpoint = f"http://127.0.0.1:{port}"
    store = S3ObjectStore("bkt", endpoint_url=endpoint, clock=clock, ids=IdSource(0), max_attempts=3,
                          connect_timeout_s=1)
    with pytest.raises(StoreAccessError, match="unreachable") as info:
        store.get("k")
    assert endpoint in str(info.value) and "bkt" in str(info.value)
    assert len(clock.sleeps) == 2
    # A connection that never opened sent nothing: even a conditional PUT may be retried.
    with pytest.raises(StoreAccessError, match="unreachable"):
        store.put("m/1", b"x", if_none_match=True)
    assert len(clock.sleeps) == 4
