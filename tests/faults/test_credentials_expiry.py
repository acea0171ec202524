"""Credentials expiring mid-run, on a real S3 server (moto) through the real S3 backend and botocore.

The store's credentials come from the standard AWS chain, here a ``credential_process`` profile: botocore
makes those *refreshable* credentials and re-reads them itself before they expire. The server (a hook on
botocore's send, in front of moto, which checks no signature) answers ``ExpiredToken`` to every request signed
with the old access key once it has "expired". Proven:

* the caller gets typed errors: an object-store call :class:`StoreAccessError` naming ``ExpiredToken``
  (not retriable: an operator or the chain must act), an ``ack=s3`` append :class:`StoreUnavailable` after
  ``max.block.ms`` (retriable); ``ack=wal`` appends are still acknowledged from the local WAL meanwhile,
  and uploads are retried (an access error is an outage, not a failure of the node);
* once the credential source holds new keys, the store's *same* client signs with them (s3stream does not
  freeze the credentials it was opened with), uploads resume by themselves, and every acknowledged record
  reads back exactly, from this store and from a fresh one;
* the rotated secret key and session token never appear in error messages or botocore's DEBUG logs.
"""

from __future__ import annotations

import datetime
import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from botocore.awsrequest import AWSResponse

import s3stream
from s3stream import Record
from s3stream.base.errors import StoreAccessError, StoreUnavailable
from s3stream.objectstore.s3 import S3ObjectStore
from tests.engine.helpers import read_all

pytestmark = pytest.mark.s3

OLD = ("AKIDOLDOLDOLDOLD0001", "old-secret-Xq1", "old-token-Zr2")
NEW = ("AKIDNEWNEWNEWNEW0002", "new-secret-Kp3", "new-token-Wt4")


class _Raw:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._data


class ExpiringServer:
    """Answers ExpiredToken to requests signed with an expired access key (a before-send hook on every botocore
    session the store makes); records which keys signed requests."""

    def __init__(self) -> None:
        self.expired: set[str] = set()
        self.signed_with: list[str] = []
        self.lock = threading.Lock()

    def before_send(self, request: Any, **_: Any) -> AWSResponse | None:
        auth = request.headers.get("Authorization", b"")
        auth = auth.decode() if isinstance(auth, bytes) else str(auth)
        key = auth.split("Credential=", 1)[-1].split("/", 1)[0] if "Credential=" in auth else ""
        with self.lock:
            self.signed_with.append(key)
            if key not in self.expired:
                return None
        body = (b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>ExpiredToken</Code>"
                b"<Message>The provided token has expired.</Message></Error>")
        return AWSResponse(request.url, 400, {"Content-Type": "application/xml"}, _Raw(body))


def _write_credentials(path: Path, creds: tuple[str, str, str]) -> None:
    # within botocore's 15-minute advisory window: it re-reads the source before using the credentials
    expires = datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=12)
    path.write_text(json.dumps({"Version": 1, "AccessKeyId": creds[0], "SecretAccessKey": creds[1],
                                "SessionToken": creds[2], "Expiration": expires.isoformat()}))


@pytest.fixture
def rotating_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, moto_endpoint: str) -> Iterator[Path]:
    """A ``credential_process`` profile reading ``creds.json`` (rewrite it to rotate the credentials)."""
    creds = tmp_path / "creds.json"
    _write_credentials(creds, OLD)
    config = tmp_path / "aws-config"
    config.write_text(f"[profile rotating]\ncredential_process = /bin/cat {creds}\n")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-such-credentials-file"))
    monkeypatch.setenv("AWS_PROFILE", "rotating")
    yield creds


def test_expired_credentials_are_typed_lose_nothing_and_a_rotation_resumes_the_store(
        rotating_profile: Path, moto_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    server = ExpiringServer()
    real_get_session = botocore.session.get_session

    def get_session(*args: Any, **kwargs: Any) -> botocore.session.Session:
        session = real_get_session(*args, **kwargs)
        session.register("before-send.s3", server.before_send)
        return session

    monkeypatch.setattr(botocore.session, "get_session", get_session)
    bucket, prefix = "creds-expiry", f"run-{tmp_path.name}"
    S3ObjectStore(bucket, endpoint_url=moto_endpoint).ensure_bucket()
    url = f"s3://{bucket}/{prefix}?endpoint_url={moto_endpoint}"
    store = s3stream.open_store(url, wal_dir=str(tmp_path / "wal"), probe=False, flush_interval_ms=20,
                                max_block_ms=1000, upload_retry_backoff_ms=10, upload_retry_backoff_max_ms=100)
    acked: list[tuple[int, bytes]] = []
    try:
        store.create_topic("t")
        log = store.partition("t", 0)
        for i in range(5):
            acked.append((log.append([Record(b"k", b"before-%d" % i)]).base_offset, b"before-%d" % i))
        store.flush()
        node = store.runtime.existing_node()
        assert node is not None
        assert set(server.signed_with) == {OLD[0]}

        server.expired.add(OLD[0])  # the credentials expire
        with pytest.raises(StoreAccessError, match="ExpiredToken") as direct:
            list(store.object_store.list(""))
        assert not direct.value.retriable
        for i in range(5):  # ack=wal: acknowledged from the local WAL while uploads fail
            acked.append((log.append([Record(b"k", b"during-%d" % i)]).base_offset, b"during-%d" % i))
        deadline = time.monotonic() + 10
        while node.uploader.failing_for_s == 0.0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert node.uploader.failing_for_s > 0  # uploads retried, the node not failed
        node.uploader.check()
        with pytest.raises(StoreUnavailable, match="ExpiredToken") as s3_refused:
            log.append([Record(b"k", b"ack s3 while expired")], ack="s3")
        assert s3_refused.value.retriable

        caplog.set_level(logging.DEBUG, logger="botocore")
        _write_credentials(rotating_profile, NEW)  # the credential source is rotated
        node.uploader.flush(timeout_s=30)  # the same client picks the new keys up: uploads resume by themselves
        assert node.uploader.failing_for_s == 0.0 and node.uploader.buffered_bytes == 0
        assert server.signed_with[-1] == NEW[0]
        value = b"after rotation"
        acked.append((log.append([Record(b"k", value)]).base_offset, value))
        store.flush()
        got = {r.offset: r.value for r in read_all(log)}
        assert all(got[o] == v for o, v in acked)
        assert set(got.values()) - {v for _, v in acked} <= {b"ack s3 while expired"}  # timed out: lands once
        assert sorted(got) == list(range(len(got)))
        for secret in (*NEW[1:], *OLD[1:]):
            assert secret not in caplog.text, "a credential in botocore's DEBUG log"
            assert secret not in str(direct.value) and secret not in str(s3_refused.value)
    finally:
        server.expired.clear()
        store.close()
    with s3stream.open_store(url, wal_dir=str(tmp_path / "reader"), probe=False) as reader:
        got = {r.offset: r.value for r in read_all(reader.partition("t", 0))}
        assert all(got[o] == v for o, v in acked)
