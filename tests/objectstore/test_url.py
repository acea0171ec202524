"""Store URLs: parsing, validation, opening, and display without secrets."""

from __future__ import annotations

from pathlib import Path

import pytest

from s3stream.base.errors import InvalidRequest
from s3stream.objectstore.local import LocalObjectStore
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.objectstore.prefixed import PrefixedObjectStore
from s3stream.objectstore.s3 import S3ObjectStore
from s3stream.objectstore.url import StoreUrl, display_url, open_object_store, parse_store_url


def test_parse_forms() -> None:
    assert parse_store_url("memory://unit") == StoreUrl("memory", "unit", "", {})
    assert parse_store_url("memory://unit/sub/dir") == StoreUrl("memory", "unit", "sub/dir", {})
    assert parse_store_url("file:///var/lib/s3stream/") == StoreUrl("file", "/var/lib/s3stream", "", {})
    assert parse_store_url("file://localhost/data") == StoreUrl("file", "/data", "", {})
    assert parse_store_url("s3://bkt/pre/fix?endpoint_url=http://127.0.0.1:9000&region=eu-west-1") == \
        StoreUrl("s3", "bkt", "pre/fix", {"endpoint_url": "http://127.0.0.1:9000", "region": "eu-west-1"})
    assert parse_store_url("S3://bkt") == StoreUrl("s3", "bkt", "", {})


@pytest.mark.parametrize("url", ["file://relative/dir", "file:relative", "file:./x", "file://host/abs"])
def test_relative_file_paths_are_refused(url: str) -> None:
    with pytest.raises(InvalidRequest, match="absolute path"):
        parse_store_url(url)


def test_unknown_params_are_named() -> None:
    with pytest.raises(InvalidRequest, match="endpoint, foo"):
        parse_store_url("s3://bkt/p?foo=1&endpoint=http://x&region=r")
    with pytest.raises(InvalidRequest, match="sync"):
        parse_store_url("file:///tmp/x?sync=1")


@pytest.mark.parametrize("url", ["ftp://x/y", "s3://", "memory://", "s3://bkt/a/../b", "gs://bkt/p"])
def test_malformed_urls_are_refused(url: str) -> None:
    with pytest.raises(InvalidRequest):
        parse_store_url(url)


def test_credentials_in_urls_are_refused_without_echoing_them() -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_store_url("s3://AKIAEXAMPLE:wJalrXUtnFEMI@bkt/p")
    assert "wJalrXUtnFEMI" not in str(info.value)


def test_display_url_redacts_secrets() -> None:
    shown = display_url("s3://bkt/p?endpoint_url=http://user:hunter2@minio:9000&secret_key=abc&region=r")
    assert "hunter2" not in shown and "abc" not in shown
    assert "region=r" in shown and "minio:9000" in shown
    assert display_url("http://u:pw@host/x") == "http://***@host/x"
    assert display_url("file:///data") == "file:///data"
    shown = display_url("s3://b?session_token=T0KVAL&X-Amz-Signature=S1GVAL")
    assert "T0KVAL" not in shown and "S1GVAL" not in shown


def test_open_memory_shares_a_named_namespace() -> None:
    MemoryObjectStore.drop_namespace("url-test")
    a = open_object_store("memory://url-test")
    b = open_object_store("memory://url-test")
    a.put("k", b"v")
    assert b.get("k") == b"v"
    prefixed = open_object_store("memory://url-test/tenant")
    assert isinstance(prefixed, PrefixedObjectStore)
    prefixed.put("k", b"p")
    assert a.get("tenant/k") == b"p"
    MemoryObjectStore.drop_namespace("url-test")


def test_open_file_creates_the_directory(tmp_path: Path) -> None:
    root = tmp_path / "new" / "store"
    store = open_object_store(root.as_uri())
    assert isinstance(store, LocalObjectStore) and root.is_dir()
    store.put("a/b", b"1")
    assert (root / "a" / "b").read_bytes() == b"1"


def test_open_s3_passes_endpoint_region_and_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test-access")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test-secret-value")
    store = open_object_store("s3://bkt/pre?endpoint_url=http://127.0.0.1:1&region=eu-west-1")
    assert isinstance(store, S3ObjectStore)
    assert store.url == "s3://bkt/pre?endpoint_url=http://127.0.0.1:1"
    assert "test-secret-value" not in store.url
    with pytest.raises(InvalidRequest, match="list_order"):
        open_object_store("s3://bkt?list_order=random")
