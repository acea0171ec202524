"""The capability probe: 'full' on correct stores, 'unsafe' (refused) on broken ones."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from s3stream.base.errors import PreconditionFailed, UnsafeStore
from s3stream.base.ids import IdSource
from s3stream.objectstore.local import LocalObjectStore
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.objectstore.probe import ProbeResult, probe_conditional_writes, require_safe
from s3stream.objectstore.protocol import ObjectMeta
from s3stream.objectstore.s3 import S3ObjectStore


class IgnoresIfNoneMatch(MemoryObjectStore):
    """Like SeaweedFS <= 4.16 / old MinIO: the header is accepted and ignored."""

    def put(self, key: str, data: bytes | bytearray | memoryview, *, if_none_match: bool = False,
            if_match: str | None = None) -> ObjectMeta:
        return super().put(key, data, if_match=if_match)


class IgnoresIfMatch(MemoryObjectStore):
    def put(self, key: str, data: bytes | bytearray | memoryview, *, if_none_match: bool = False,
            if_match: str | None = None) -> ObjectMeta:
        return super().put(key, data, if_none_match=if_none_match)


class RacyCheckThenPut(MemoryObjectStore):
    """Like moto: check, then (after a gap) put; concurrent creators all win."""

    def put(self, key: str, data: bytes | bytearray | memoryview, *, if_none_match: bool = False,
            if_match: str | None = None) -> ObjectMeta:
        if if_none_match:
            if any(e.key == key for e in self.list(key)):
                raise PreconditionFailed(f"{key} exists", key=key)
            time.sleep(0.02)
            return super().put(key, data)
        return super().put(key, data, if_match=if_match)


def _no_probe_keys_left(store: MemoryObjectStore | LocalObjectStore) -> bool:
    return list(store.list("_probe/")) == []


def test_memory_store_is_full() -> None:
    store = MemoryObjectStore()
    result = probe_conditional_writes(store, IdSource(0))
    assert (result.put_if_absent, result.if_match, result.atomic_put_if_absent) == (True, True, True)
    assert result.mode == "full" and result.findings == []
    require_safe(result)
    assert _no_probe_keys_left(store)


def test_local_store_is_full(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    result = probe_conditional_writes(store, IdSource(0))
    assert result.mode == "full", result.findings
    assert _no_probe_keys_left(store)


def test_ignored_if_none_match_is_unsafe() -> None:
    store = IgnoresIfNoneMatch()
    result = probe_conditional_writes(store, IdSource(0))
    assert not result.put_if_absent and result.mode == "unsafe"
    assert any("put-if-absent is ignored" in f for f in result.findings)
    with pytest.raises(UnsafeStore, match="put-if-absent is ignored"):
        require_safe(result)
    assert _no_probe_keys_left(store)


def test_racy_put_if_absent_is_unsafe() -> None:
    store = RacyCheckThenPut()
    result = probe_conditional_writes(store, IdSource(0), parallel=8)
    assert result.put_if_absent and result.atomic_put_if_absent is False
    assert result.mode == "unsafe"
    assert any("not atomic" in f for f in result.findings)
    with pytest.raises(UnsafeStore):
        require_safe(result)


def test_ignored_if_match_degrades_to_no_if_match() -> None:
    result = probe_conditional_writes(IgnoresIfMatch(), IdSource(0))
    assert result.put_if_absent and not result.if_match
    assert result.mode == "no-if-match"
    assert any("wrong ETag succeeded" in f for f in result.findings)
    assert any("missing key succeeded" in f for f in result.findings)
    require_safe(result)  # degraded, not refused


def test_parallel_below_two_skips_the_race() -> None:
    result = probe_conditional_writes(MemoryObjectStore(), IdSource(0), parallel=1)
    assert result.atomic_put_if_absent is None and result.mode == "full"


def test_mode_ladder() -> None:
    assert ProbeResult(True, True, True).mode == "full"
    assert ProbeResult(True, True, None).mode == "full"
    assert ProbeResult(True, False, True).mode == "no-if-match"
    assert ProbeResult(False, True, None).mode == "unsafe"
    assert ProbeResult(True, True, False).mode == "unsafe"


@pytest.mark.s3
@pytest.mark.seaweedfs
def test_seaweedfs_is_full(seaweedfs_endpoint: str) -> None:
    store = S3ObjectStore("s3stream-contract", prefix="probe", endpoint_url=seaweedfs_endpoint)
    store.ensure_bucket()
    result = probe_conditional_writes(store, IdSource(0), parallel=8)  # see test_seaweedfs.py
    assert result.mode == "full", result.findings
    assert list(store.list("_probe/")) == []


@pytest.mark.s3
def test_moto_honours_the_headers(moto_endpoint: str) -> None:
    store = S3ObjectStore("s3stream-probe", endpoint_url=moto_endpoint)
    store.ensure_bucket()
    result = probe_conditional_writes(store, IdSource(0), parallel=1)  # moto's race is not atomic
    assert (result.put_if_absent, result.if_match) == (True, True), result.findings
    assert list(store.list("_probe/")) == []


def test_race_uses_real_threads() -> None:
    seen: set[int] = set()

    class Spy(MemoryObjectStore):
        def put(self, key: str, data: bytes | bytearray | memoryview, *, if_none_match: bool = False,
                if_match: str | None = None) -> ObjectMeta:
            seen.add(threading.get_ident())
            return super().put(key, data, if_none_match=if_none_match, if_match=if_match)

    probe_conditional_writes(Spy(), IdSource(0), parallel=4)
    assert len(seen) >= 4
