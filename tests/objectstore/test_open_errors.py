"""Failures at open (issue 24, items 6 and 8): an endpoint that refuses connections or credentials it
rejects is a StoreAccessError, in seconds, never an UnsafeStore; credentials in an ``endpoint_url`` are
refused before botocore (whose debug log prints the endpoint) sees them."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import s3stream
from s3stream.apps.servers import free_ports
from s3stream.base.errors import InvalidRequest, StoreAccessError, UnsafeStore
from s3stream.base.ids import IdSource
from s3stream.objectstore.probe import probe_conditional_writes
from s3stream.objectstore.s3 import S3ObjectStore
from s3stream.objectstore.url import open_object_store, parse_store_url

from .support import SleepLog

FAKE_SECRET = "fake-secret-for-a-closed-port-0123456789"
WRONG_SECRET = "wrong-secret-that-must-never-be-printed"


@pytest.fixture
def fake_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "fake-access")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", FAKE_SECRET)


def test_a_closed_port_at_open_is_an_access_error_in_seconds(fake_credentials: None, tmp_path: Path) -> None:
    (port,) = free_ports(1)  # nothing listens there
    endpoint = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    with pytest.raises(StoreAccessError, match="unreachable") as info:
        s3stream.open_store(f"s3://bkt/p?endpoint_url={endpoint}", wal_dir=str(tmp_path / "wal"))
    elapsed = time.monotonic() - started
    assert not isinstance(info.value, UnsafeStore)
    assert endpoint in str(info.value) and "bkt" in str(info.value)
    assert elapsed < 5, f"open took {elapsed:.1f} s to report a closed port (was ~20 s)"
    assert not (tmp_path / "wal").exists() or not any((tmp_path / "wal").iterdir())


def test_the_probe_lets_access_errors_through(fake_credentials: None) -> None:
    """A store handed to open_store (or opened without the check) still fails as StoreAccessError: an
    unreachable endpoint says nothing about conditional writes, and the probe does not spend the retries
    of three deletes on it."""
    (port,) = free_ports(1)
    clock = SleepLog()
    store = S3ObjectStore("bkt", endpoint_url=f"http://127.0.0.1:{port}", clock=clock, ids=IdSource(0),
                          max_attempts=2, connect_timeout_s=1)
    with pytest.raises(StoreAccessError, match="unreachable"):
        probe_conditional_writes(store, IdSource(0))
    assert len(clock.sleeps) == 1  # the first PUT's one retry; no cleanup deletes against a dead endpoint


def test_check_access_keeps_normal_retries(fake_credentials: None) -> None:
    (port,) = free_ports(1)
    clock = SleepLog()
    store = S3ObjectStore("bkt", endpoint_url=f"http://127.0.0.1:{port}", clock=clock, ids=IdSource(0),
                          max_attempts=6, connect_timeout_s=1)
    with pytest.raises(StoreAccessError, match="after 3 attempts"):
        store.check_access()
    assert len(clock.sleeps) == 2 and sum(clock.sleeps) < 1  # short at open
    with pytest.raises(StoreAccessError, match="after 6 attempts"):
        store.get("k")  # the store's own calls keep their retry budget (they ride through restarts)
    assert len(clock.sleeps) == 2 + 5


@pytest.mark.s3
@pytest.mark.seaweedfs
def test_a_wrong_secret_at_open_is_an_access_error(seaweedfs_endpoint: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    S3ObjectStore("s3stream-open-auth", endpoint_url=seaweedfs_endpoint).ensure_bucket()
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", WRONG_SECRET)
    url = f"s3://s3stream-open-auth/p?endpoint_url={seaweedfs_endpoint}"
    started = time.monotonic()
    with pytest.raises(StoreAccessError) as info:
        s3stream.open_store(url, wal_dir=str(tmp_path / "wal"))
    assert time.monotonic() - started < 5
    text = f"{info.value!s} {info.value!r} {info.value.__cause__!s}"
    assert "SignatureDoesNotMatch" in text
    assert seaweedfs_endpoint in str(info.value) and "s3stream-open-auth" in str(info.value)
    assert WRONG_SECRET not in text
    # the same through the probe alone (a store handed in): an access error, not a probe finding
    store = S3ObjectStore("s3stream-open-auth", endpoint_url=seaweedfs_endpoint, max_attempts=2)
    with pytest.raises(StoreAccessError):
        probe_conditional_writes(store, IdSource(0), parallel=2)


@pytest.mark.s3
def test_open_store_on_a_missing_bucket_is_an_access_error(moto_endpoint: str, tmp_path: Path) -> None:
    with pytest.raises(StoreAccessError, match="no-such-bucket-at-open"):
        s3stream.open_store(f"s3://no-such-bucket-at-open/p?endpoint_url={moto_endpoint}",
                            wal_dir=str(tmp_path / "wal"))


@pytest.mark.parametrize("endpoint", [
    "http://AKIAEXAMPLE:hunter2secret@127.0.0.1:9000",
    "https://user:hunter2secret@s3.example.com",
    "http://hunter2secret@127.0.0.1:9000",
])
def test_credentials_in_the_endpoint_are_refused_unechoed(fake_credentials: None, endpoint: str,
                                                          caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    caplog.set_level(logging.DEBUG)  # botocore's debug log printed the endpoint, userinfo and all
    attempts: list[Callable[[], object]] = [
        lambda: parse_store_url(f"s3://bkt/p?endpoint_url={endpoint}"),
        lambda: open_object_store(f"s3://bkt/p?endpoint_url={endpoint}"),
        lambda: s3stream.open_store(f"s3://bkt/p?endpoint_url={endpoint}", wal_dir=str(tmp_path / "wal")),
        lambda: S3ObjectStore("bkt", endpoint_url=endpoint),
    ]
    for attempt in attempts:
        with pytest.raises(InvalidRequest, match="must not carry credentials") as info:
            attempt()
        assert "hunter2secret" not in str(info.value)
    assert "hunter2secret" not in caplog.text


@pytest.mark.parametrize("endpoint", ["not a url", "127.0.0.1:9000", "http://", "ftp://host", "http://h:99999",
                                      "http://h:9000?x=1"])
def test_malformed_endpoints_are_invalid_requests(fake_credentials: None, endpoint: str) -> None:
    attempts: list[Callable[[], object]] = [lambda: parse_store_url(f"s3://bkt?endpoint_url={endpoint}"),
                                            lambda: S3ObjectStore("bkt", endpoint_url=endpoint)]
    for attempt in attempts:
        with pytest.raises(InvalidRequest, match="endpoint_url"):  # was a bare ValueError from botocore
            attempt()
