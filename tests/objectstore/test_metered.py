"""MeteredObjectStore: every request counted by op, every failure by op and kind, the contract unbent."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter

from s3stream.base.errors import ObjectNotFound, PreconditionFailed, Throttled, TransientError
from s3stream.base.ids import IdSource
from s3stream.objectstore.forwarding import ForwardingObjectStore
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.objectstore.metered import OPS, MeteredObjectStore, error_kind
from s3stream.objectstore.protocol import ByteRange, ObjectStore
from s3stream.testing import FaultRule, FaultyObjectStore
from s3stream.testing.contract import ObjectStoreContract
from s3stream.write.metrics import StoreMetrics


class _Meter:
    def __init__(self, inner: ObjectStore) -> None:
        self.registry = CollectorRegistry()
        self.store = MeteredObjectStore(
            inner, requests=Counter("req", "requests", ["op"], registry=self.registry),
            errors=Counter("err", "errors", ["op", "kind"], registry=self.registry))

    def requests(self) -> dict[str, float]:
        return {op: self.registry.get_sample_value("req_total", {"op": op}) or 0.0 for op in OPS
                if self.registry.get_sample_value("req_total", {"op": op})}

    def errors(self) -> dict[tuple[str, str], float]:
        return {(s.labels["op"], s.labels["kind"]): s.value for m in self.registry.collect() if m.name == "err"
                for s in m.samples if s.name == "err_total"}


def test_counts_requests_and_errors_by_op_and_kind() -> None:
    m = _Meter(MemoryObjectStore())
    s = m.store
    s.put("a", b"1")
    with pytest.raises(PreconditionFailed):
        s.put("a", b"2", if_none_match=True)
    assert s.get("a") == b"1"
    with pytest.raises(ObjectNotFound):
        s.get("missing")
    with pytest.raises(ObjectNotFound):
        s.head("missing")
    s.head("a")
    assert [e.key for e in s.list("")] == ["a"]
    s.delete("a")
    s.delete("a")  # idempotent: not an error
    assert m.requests() == {"put": 2, "get": 2, "head": 2, "list": 1, "delete": 2}
    assert m.errors() == {("put", "precondition_failed"): 1, ("get", "not_found"): 1, ("head", "not_found"): 1}


def test_get_view_is_a_counted_get_of_the_inner_view() -> None:
    inner = MemoryObjectStore()
    m = _Meter(inner)
    m.store.put("a", b"0123456789")
    view = m.store.get_view("a", ByteRange(2, 6))
    with pytest.raises(ObjectNotFound):
        m.store.get_view("missing")
    assert view.tobytes() == b"2345"
    assert view.obj is inner.get_view("a").obj  # the memory backend's own bytes: not copied on the way
    assert m.requests() == {"put": 1, "get": 2}
    assert m.errors() == {("get", "not_found"): 1}


def test_get_views_counts_a_get_per_range_and_exists_only_where_the_inner_store_has_it() -> None:
    m = _Meter(MemoryObjectStore())
    m.store.put("a", b"0123456789")
    get_views = m.store.get_views
    assert get_views is not None
    assert [v.tobytes() for v in get_views("a", [ByteRange(0, 2), ByteRange(5, 7), ByteRange(9)])] == [
        b"01", b"56", b"9"]
    with pytest.raises(ObjectNotFound):
        get_views("missing", [ByteRange(0, 1), ByteRange(2, 3)])
    assert m.requests() == {"put": 1, "get": 5}
    assert m.errors() == {("get", "not_found"): 1}
    faulty = FaultyObjectStore(MemoryObjectStore(), ids=IdSource(1), rules=[])  # a wrapper without it
    assert _Meter(faulty).store.get_views is None


def test_a_forwarding_subclass_sees_get_view_through_its_get() -> None:
    class Upper(ForwardingObjectStore):
        def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
            return self.inner.get(key, byte_range).upper()

    store = Upper(MemoryObjectStore())
    store.put("k", b"abc")
    assert store.get_view("k").tobytes() == b"ABC"


def test_error_kinds_follow_the_taxonomy() -> None:
    faulty = FaultyObjectStore(MemoryObjectStore(), ids=IdSource(1), rules=[
        FaultRule("get", None, "throttle", count=1), FaultRule("delete", None, "error", count=1),
        FaultRule("list", None, "error", count=1)])
    m = _Meter(faulty)
    with pytest.raises(Throttled):
        m.store.get("k")
    with pytest.raises(TransientError):
        m.store.delete("k")
    with pytest.raises(TransientError):
        list(m.store.list(""))
    assert m.errors() == {("get", "throttled"): 1, ("delete", "transient"): 1, ("list", "transient"): 1}
    assert error_kind(ValueError("x")) == "other"


def test_list_counts_one_request_per_page_of_1000() -> None:
    inner = MemoryObjectStore()
    for i in range(2001):
        inner.put(f"k/{i:05d}", b"")
    m = _Meter(inner)
    assert len(list(m.store.list("k/"))) == 2001
    assert m.requests() == {"list": 3}


def test_streamed_uploads_count_their_requests() -> None:
    m = _Meter(MemoryObjectStore())
    with m.store.open_upload("small", part_bytes=10) as up:
        up.write(b"x" * 10)
        up.complete()
    assert m.requests() == {"put": 1}  # at most one part: one plain PUT
    with m.store.open_upload("big", part_bytes=10) as up:
        up.write(b"y" * 25)
        up.complete()
    assert m.store.get("big") == b"y" * 25
    assert m.requests() == {"put": 1, "get": 1, "create_multipart": 1, "upload_part": 3, "complete_multipart": 1}
    with m.store.open_upload("dropped", part_bytes=10) as up:
        up.write(b"z" * 15)  # started, then left without complete
    assert m.requests()["abort_multipart"] == 1
    assert m.errors() == {}


def test_store_metrics_meter_a_store_once() -> None:
    first, second = StoreMetrics(), StoreMetrics()
    metered = first.meter(MemoryObjectStore())
    again = second.meter(metered)
    assert isinstance(again, MeteredObjectStore) and again.inner is metered.inner  # type: ignore[attr-defined]
    again.put("k", b"v")
    assert second.registry.get_sample_value("s3stream_object_store_requests_total", {"op": "put"}) == 1
    assert first.registry.get_sample_value("s3stream_object_store_requests_total", {"op": "put"}) == 0


def test_the_old_forwarding_import_path_still_works() -> None:
    from s3stream.testing.forwarding import ForwardingObjectStore as Old

    assert Old is ForwardingObjectStore


class TestMeteredMemoryContract(ObjectStoreContract):
    offers_get_views = True

    @pytest.fixture
    def store(self) -> Iterator[ObjectStore]:
        yield _Meter(MemoryObjectStore()).store
