"""Fixtures of the cleaner tests: per-test environments of stores ("processes") sharing one bucket.

* ``env``: a fresh memory:// namespace.
* ``any_env``: the same, parametrized over memory:// and a SeaweedFS bucket (``weed mini``, the session
  fixture ``seaweedfs_endpoint``; those cases are marked ``s3`` and ``seaweedfs``). On S3 the manual
  clock starts at the real time, so the server's LastModified and the store clock agree (orphan GC
  compares them); tests shared by both use ``env.t0``, not the constant.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

import s3stream
from s3stream import ManualClock, SystemClock
from s3stream.base.ids import IdSource
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.objectstore.protocol import ObjectStore
from s3stream.objectstore.s3 import S3ObjectStore

from .kit import T0, HookStore, open_at, unique_name

BUCKET = "s3stream-cleaner-tests"
_RUN = IdSource().token(4)
_PREFIXES = itertools.count()


class Env:
    """Stores on one bucket (memory namespace or S3 prefix), one ManualClock, WAL dirs under ``tmp``."""

    def __init__(self, url: str, raw: ObjectStore, tmp: Path, t0: int) -> None:
        self.url = url
        self.raw = raw                  # direct access to the bucket, as an operator would have
        self.tmp = tmp
        self.t0 = t0
        self.clock = ManualClock(t0)
        self.stores: list[s3stream.Store] = []
        self._hooked: list[HookStore] = []

    def open(self, wal: str = "w", **opts: Any) -> s3stream.Store:
        store = open_at(self.url, self.tmp / wal, self.clock, **opts)
        self.stores.append(store)
        return store

    def open_hooked(self, wal: str, **opts: Any) -> tuple[s3stream.Store, HookStore]:
        """A store whose object store is a :class:`HookStore` over this bucket."""
        hook = HookStore(self._fresh_raw())
        return self.open(wal, object_store=hook, **opts), hook

    def _fresh_raw(self) -> ObjectStore:
        if isinstance(self.raw, MemoryObjectStore):
            return MemoryObjectStore(self.url.removeprefix("memory://"), clock=self.clock)
        assert isinstance(self.raw, S3ObjectStore)
        return _s3_store(self.url)

    def close_all(self) -> None:
        for store in self.stores:
            with contextlib.suppress(Exception):
                store.close()


def _s3_store(url: str) -> S3ObjectStore:
    rest, _, query = url.removeprefix("s3://").partition("?")
    bucket, _, prefix = rest.partition("/")
    return S3ObjectStore(bucket, prefix=prefix, endpoint_url=query.removeprefix("endpoint_url="))


@contextlib.contextmanager
def _memory_env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    name = unique_name(request.node.name)
    e = Env(f"memory://{name}", MemoryObjectStore(name), tmp_path, T0)
    try:
        yield e
    finally:
        e.close_all()
        MemoryObjectStore.drop_namespace(name)


@pytest.fixture
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    with _memory_env(request, tmp_path) as e:
        yield e


@pytest.fixture(scope="session")
def cleaner_bucket(seaweedfs_endpoint: str) -> str:
    client = boto3.client("s3", endpoint_url=seaweedfs_endpoint, region_name="us-east-1")
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou, client.exceptions.BucketAlreadyExists):
        client.create_bucket(Bucket=BUCKET)
    return BUCKET


@pytest.fixture(params=["memory", pytest.param("seaweedfs", marks=[pytest.mark.s3, pytest.mark.seaweedfs])])
def any_env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    if request.param == "memory":
        with _memory_env(request, tmp_path) as e:
            yield e
        return
    endpoint = request.getfixturevalue("seaweedfs_endpoint")
    bucket = request.getfixturevalue("cleaner_bucket")
    url = f"s3://{bucket}/cleaner-{_RUN}/t{next(_PREFIXES):04d}?endpoint_url={endpoint}"
    raw = _s3_store(url)
    e = Env(url, raw, tmp_path, SystemClock().now_ms())
    try:
        yield e
    finally:
        e.close_all()
        for entry in list(raw.list("")):
            raw.delete(entry.key)
        raw.close()
