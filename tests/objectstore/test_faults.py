"""FaultyObjectStore: seeded, deterministic fault injection with the semantics each kind models."""

from __future__ import annotations

import pytest

from s3stream.base.errors import ObjectNotFound, PreconditionFailed, Throttled, TransientError
from s3stream.base.ids import IdSource
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.testing import FaultRule, FaultyObjectStore


def _outcomes(seed: int, n: int = 200, rate: float = 0.3) -> list[bool]:
    store = FaultyObjectStore(MemoryObjectStore(), ids=IdSource(seed),
                              rules=[FaultRule("put", None, "error", rate=rate)])
    out = []
    for i in range(n):
        try:
            store.put(f"k/{i}", b"x")
            out.append(True)
        except TransientError:
            out.append(False)
    return out


def test_faults_are_deterministic_by_seed_and_follow_the_rate() -> None:
    a, b, c = _outcomes(7), _outcomes(7), _outcomes(8)
    assert a == b
    assert a != c
    failures = a.count(False)
    assert 40 <= failures <= 80  # 30% of 200, loosely


def test_rate_zero_never_fires_and_rate_one_always_fires() -> None:
    assert all(_outcomes(1, n=50, rate=0.0))
    assert not any(_outcomes(1, n=50, rate=1.0))


def test_count_limits_injections() -> None:
    store = FaultyObjectStore(MemoryObjectStore(), ids=IdSource(0),
                              rules=[FaultRule(None, None, "throttle", rate=1.0, count=2)])
    for _ in range(2):
        with pytest.raises(Throttled):
            store.put("k", b"x")
    store.put("k", b"x")
    assert store.injected() == {"throttle": 2}


def test_lost_response_does_the_write_then_fails() -> None:
    inner = MemoryObjectStore()
    store = FaultyObjectStore(inner, ids=IdSource(0),
                              rules=[FaultRule("put", "manifest/", "lost_response", count=1)])
    with pytest.raises(TransientError, match="response was lost"):
        store.put("manifest/00000000000000000001.json", b"mine", if_none_match=True)
    assert inner.get("manifest/00000000000000000001.json") == b"mine"
    with pytest.raises(PreconditionFailed):  # a blind retry now sees its own write as a conflict
        store.put("manifest/00000000000000000001.json", b"mine", if_none_match=True)


@pytest.mark.parametrize(("kind", "error"), [
    ("error", TransientError), ("throttle", Throttled), ("timeout_before", TransientError),
    ("precondition", PreconditionFailed), ("conflict409", PreconditionFailed),
])
def test_failing_kinds_do_not_do_the_op(kind: str, error: type[Exception]) -> None:
    inner = MemoryObjectStore()
    store = FaultyObjectStore(inner, ids=IdSource(0), rules=[FaultRule("put", None, kind, count=1)])  # type: ignore[arg-type]
    with pytest.raises(error):
        store.put("k", b"x", if_none_match=True)
    with pytest.raises(ObjectNotFound):
        inner.get("k")


def test_conflict409_message_names_409() -> None:
    store = FaultyObjectStore(MemoryObjectStore(), ids=IdSource(0),
                              rules=[FaultRule("put", None, "conflict409")])
    with pytest.raises(PreconditionFailed, match="409"):
        store.put("k", b"x", if_none_match=True)


def test_rules_select_by_op_and_key_prefix() -> None:
    inner = MemoryObjectStore()
    inner.put("seg/a", b"1")
    inner.put("man/a", b"2")
    store = FaultyObjectStore(inner, ids=IdSource(0), rules=[FaultRule("get", "seg/", "error")])
    with pytest.raises(TransientError):
        store.get("seg/a")
    assert store.get("man/a") == b"2"
    store.put("seg/b", b"3")  # another op: untouched
    assert [e.key for e in store.list("seg/")] == ["seg/a", "seg/b"]


def test_list_faults_use_the_listing_prefix() -> None:
    inner = MemoryObjectStore()
    inner.put("wal/n1/1", b"x")
    store = FaultyObjectStore(inner, ids=IdSource(0), rules=[FaultRule("list", "wal/", "timeout_before")])
    with pytest.raises(TransientError):
        list(store.list("wal/n1/"))
    assert [e.key for e in store.list("")] == ["wal/n1/1"]


def test_set_rules_replaces_rules_and_resets_counts() -> None:
    store = FaultyObjectStore(MemoryObjectStore(), ids=IdSource(0),
                              rules=[FaultRule("put", None, "error", count=1)])
    with pytest.raises(TransientError):
        store.put("k", b"x")
    store.put("k", b"x")
    store.set_rules([FaultRule("delete", None, "throttle", count=1)])
    with pytest.raises(Throttled):
        store.delete("k")
    store.delete("k")
    store.set_rules([])
    store.put("k", b"y")
    assert store.injected() == {"error": 1, "throttle": 1}


def test_invalid_rules_are_refused() -> None:
    with pytest.raises(ValueError):
        FaultRule("PUTS", None, "error")
    with pytest.raises(ValueError):
        FaultRule(None, None, "explode")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        FaultRule(None, None, "error", rate=1.5)
