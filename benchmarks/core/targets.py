"""Benchmark targets: where a run's objects go, and the raw clients that measure that place's limits.

Target specs (the ``--target`` option):

* ``file``: a :class:`~s3stream.objectstore.local.LocalObjectStore` in the run's work directory;
* ``latency:<profile>``: the same, behind :class:`~s3stream.testing.latency.LatencyObjectStore` with
  one of :data:`~s3stream.testing.latency.LATENCY_PROFILES` (``s3-standard``, ``s3-express``, ``lan``);
* ``seaweedfs``: ``weed mini`` started for the run in the work directory (its throwaway credentials
  installed in this process's environment for the run), stopped at the end;
* ``s3://BUCKET[/PREFIX]?endpoint_url=...&region=...``: an existing bucket, credentials from the
  standard AWS chain; the run writes under ``PREFIX/s3stream-bench-<ulid>/`` and deletes it at the end.

Invariants: every store a run opens gets a fresh root (``Target.store(name)``) and its own local WAL
directory (``Target.wal_dir(name)``), so phases never see each other's data; the raw client of an S3
target is boto3 itself (no s3stream code between the benchmark and the server), the raw client of a
local target is the same ObjectStore the engine uses (its PUT is the fsync'd temp file + rename).
Leaving :func:`open_target` stops what it started and removes what it wrote.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlencode

from s3stream.base.clock import SystemClock
from s3stream.base.errors import InvalidRequest
from s3stream.base.ids import IdSource
from s3stream.objectstore.protocol import ByteRange, ObjectStore
from s3stream.objectstore.url import display_url, open_object_store, parse_store_url
from s3stream.testing.latency import LATENCY_PROFILES, LatencyObjectStore

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import ObjectIdentifierTypeDef

__all__ = ["RawObjects", "Target", "open_target", "target_slug"]

BENCH_BUCKET = "s3stream-bench"
_AWS_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")


class RawObjects(Protocol):
    """The thinnest client of a target: what the raw limits are measured with."""

    def put(self, key: str, data: bytes) -> None: ...

    def get_range(self, key: str, start: int, end: int) -> bytes: ...

    def close(self) -> None: ...


@dataclass(slots=True)
class _S3Raw:
    """boto3 directly (one client shared by all threads; boto3 clients are thread-safe)."""

    client: S3Client
    bucket: str
    prefix: str

    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=f"{self.prefix}/{key}", Body=data)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        resp = self.client.get_object(Bucket=self.bucket, Key=f"{self.prefix}/{key}", Range=f"bytes={start}-{end - 1}")
        with resp["Body"] as body:
            return body.read()

    def close(self) -> None:
        self.client.close()


@dataclass(slots=True)
class _StoreRaw:
    """An ObjectStore used directly (local targets, where there is no wire protocol to bypass)."""

    store: ObjectStore

    def put(self, key: str, data: bytes) -> None:
        self.store.put(key, data)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return self.store.get(key, ByteRange(start, end))

    def close(self) -> None:
        self.store.close()


@dataclass(slots=True)
class Target:
    """An open target. ``store(name)`` gives a fresh store root: its URL and an ObjectStore on it."""

    spec: str
    kind: str
    work_dir: Path
    raw: RawObjects
    description: dict[str, Any] = field(default_factory=dict)
    _base_url: str = ""
    _query: str = ""
    _profile: str | None = None
    _seed: int = 0

    @property
    def slug(self) -> str:
        return target_slug(self.spec)

    def store_url(self, name: str) -> str:
        if self.kind in ("file", "latency"):
            return f"file://{self.work_dir / 'objects' / name}"
        return f"{self._base_url}/{name}{self._query}"

    def store(self, name: str) -> tuple[str, ObjectStore]:
        """A fresh store root named ``name``: its URL and a new ObjectStore (the engine closes it)."""
        url = self.store_url(name)
        return url, _open_store(url, self._profile, self._seed)

    def wal_dir(self, name: str) -> str:
        """The local WAL directory of the store ``name`` (always on the work directory's disk)."""
        return str(self.work_dir / "wal" / name)


def target_slug(spec: str) -> str:
    """A file-name-safe name of a target spec: ``latency:lan`` -> ``latency-lan``, ``s3://...`` -> ``s3``."""
    if spec.startswith("s3://"):
        return "s3"
    return "".join(c if c.isalnum() else "-" for c in spec).strip("-") or "target"


@contextlib.contextmanager
def open_target(spec: str, work_dir: Path, *, seed: int = 0) -> Iterator[Target]:
    """Open the target ``spec`` (see the module docstring) with scratch space under ``work_dir``.

    Raises:
        InvalidRequest: an unknown spec or latency profile.
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    run_id = IdSource(None).ulid(SystemClock().now_ms()).lower()
    if spec == "file" or spec.startswith("latency:"):
        with _local_target(spec, work_dir, seed) as target:
            yield target
    elif spec == "seaweedfs":
        with _seaweedfs_target(work_dir, run_id, seed) as target:
            yield target
    elif spec.startswith("s3://"):
        with _s3_target(spec, work_dir, run_id, seed) as target:
            yield target
    else:
        raise InvalidRequest(f"unknown target {spec!r}: use file, seaweedfs, latency:<profile> "
                             f"({', '.join(sorted(LATENCY_PROFILES))}) or s3://BUCKET/PREFIX?endpoint_url=...")


@contextlib.contextmanager
def _local_target(spec: str, work_dir: Path, seed: int) -> Iterator[Target]:
    profile = None
    if spec.startswith("latency:"):
        profile = spec.split(":", 1)[1]
        if profile not in LATENCY_PROFILES:
            raise InvalidRequest(f"unknown latency profile {profile!r}; known: {sorted(LATENCY_PROFILES)}")
    kind = "file" if profile is None else "latency"
    raw = _StoreRaw(_open_store(f"file://{work_dir / 'objects' / 'raw'}", profile, seed))
    target = Target(spec, kind, work_dir, raw=raw, _profile=profile, _seed=seed,
                    description={"kind": kind, "latency_profile": profile,
                                 "objects_dir": str(work_dir / "objects")})
    try:
        yield target
    finally:
        raw.close()


def _open_store(url: str, profile: str | None, seed: int) -> ObjectStore:
    """The ObjectStore at ``url``, behind the latency model ``profile`` if one is given."""
    store = open_object_store(url, clock=SystemClock(), ids=IdSource(seed))
    if profile is not None:
        store = LatencyObjectStore(store, profile, clock=SystemClock(), ids=IdSource(seed))
    return store


def _boto3_client(endpoint_url: str | None, region: str | None) -> S3Client:
    import boto3
    from botocore.config import Config

    config = Config(region_name=region or "us-east-1", max_pool_connections=32,
                    retries={"max_attempts": 3, "mode": "standard"},
                    s3={"addressing_style": "path"} if endpoint_url else {})
    return boto3.session.Session().client("s3", endpoint_url=endpoint_url, config=config)


@contextlib.contextmanager
def _aws_env(values: dict[str, str]) -> Iterator[None]:
    """Install the local server's credentials in the environment for the run, then restore it."""
    saved = {name: os.environ.get(name) for name in _AWS_ENV}
    for name in _AWS_ENV:
        os.environ.pop(name, None)
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _seaweedfs_target(work_dir: Path, run_id: str, seed: int) -> Iterator[Target]:
    from s3stream.apps.servers import seaweedfs_server, test_credentials_env

    weed_dir = work_dir / "seaweedfs"
    with _aws_env(test_credentials_env()), seaweedfs_server(weed_dir) as endpoint:
        client = _boto3_client(endpoint, "us-east-1")
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
            client.create_bucket(Bucket=BENCH_BUCKET)
        raw = _S3Raw(client, BENCH_BUCKET, f"{run_id}/raw")
        query = "?" + urlencode({"endpoint_url": endpoint, "region": "us-east-1"})
        target = Target("seaweedfs", "seaweedfs", work_dir, raw=raw, _base_url=f"s3://{BENCH_BUCKET}/{run_id}",
                        _query=query, _seed=seed,
                        description={"kind": "seaweedfs", "endpoint": endpoint, "bucket": BENCH_BUCKET,
                                     "prefix": run_id, "data_dir": str(weed_dir)})
        try:
            yield target
        finally:
            raw.close()
    shutil.rmtree(weed_dir, ignore_errors=True)


@contextlib.contextmanager
def _s3_target(spec: str, work_dir: Path, run_id: str, seed: int) -> Iterator[Target]:
    parsed = parse_store_url(spec)
    endpoint = parsed.params.get("endpoint_url") or None
    region = parsed.params.get("region") or None
    prefix = f"{parsed.prefix}/s3stream-bench-{run_id}" if parsed.prefix else f"s3stream-bench-{run_id}"
    client = _boto3_client(endpoint, region)
    raw = _S3Raw(client, parsed.bucket_or_path, f"{prefix}/raw")
    query = "?" + urlencode(parsed.params) if parsed.params else ""
    target = Target(spec, "s3", work_dir, raw=raw, _base_url=f"s3://{parsed.bucket_or_path}/{prefix}",
                    _query=query, _seed=seed,
                    description={"kind": "s3", "url": display_url(spec), "prefix": prefix})
    try:
        yield target
    finally:
        try:
            _delete_prefix(client, parsed.bucket_or_path, prefix + "/")
        finally:
            raw.close()


def _delete_prefix(client: S3Client, bucket: str, prefix: str) -> None:
    """Delete every object under ``prefix`` (this run's unique prefix only)."""
    paginator = client.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
        keys: list[ObjectIdentifierTypeDef] = [{"Key": obj["Key"]} for obj in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
