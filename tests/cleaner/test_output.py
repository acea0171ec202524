"""A round's output segment streams: survivors are encoded and uploaded as they come, and an output the
round abandons (or whose upload fails) leaves no object behind."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pytest

from cleaner.output import OutputStream
from s3stream import Record
from s3stream.base.errors import TransientError
from s3stream.base.records import RECORD_SCHEMA
from s3stream.format.segment import SegmentReader
from s3stream.manifest.model import SegmentRef

from .conftest import Env
from .kit import COMPACT, T0


def _table(offsets: range) -> pa.Table:
    return pa.Table.from_pylist([
        {"offset": o, "timestamp": T0 + o, "key": b"k%d" % o, "value": b"v" * 100, "headers": None,
         "horizon_ms": None} for o in offsets], schema=RECORD_SCHEMA)


def _group(base: int, last: int) -> list[SegmentRef]:
    return [SegmentRef(f"in-{base}", base, last, 1, 1, last - base + 1, T0, T0, T0 + 7, 0)]


def _segment_keys(env: Env) -> set[str]:
    return {e.key for e in env.raw.list("") if "/segments/" in e.key}


def test_survivors_sent_in_pieces_make_one_segment_of_the_group_range(env: Env) -> None:
    store = env.open()
    store.create_topic("t", 1, dict(COMPACT))
    log = store.partition("t", 0)
    with ThreadPoolExecutor(max_workers=1) as pool:
        out = OutputStream(pool, store.runtime, log, _group(0, 99))
        for piece in (range(3, 10), range(10, 10), range(40, 41), range(90, 95)):
            out.send(_table(piece))
        ref = out.finish()
    assert (ref.base_offset, ref.last_offset, ref.record_count, ref.created_ms) == (0, 99, 13, T0 + 7)
    data = env.raw.get(ref.key)
    reader = SegmentReader(lambda a, b: data[a:b], ref.object_size, source=ref.key)
    got = reader.read(0, max_records=100)
    assert got.column("offset").to_pylist() == [*range(3, 10), 40, *range(90, 95)]
    assert reader.footer.first_batch_max_timestamp == T0 + 3


def test_an_abandoned_output_leaves_no_object(env: Env) -> None:
    store = env.open()
    store.create_topic("t", 1, dict(COMPACT))
    log = store.partition("t", 0)
    before = _segment_keys(env)
    with ThreadPoolExecutor(max_workers=1) as pool:
        out = OutputStream(pool, store.runtime, log, _group(0, 99))
        out.send(_table(range(50)))
        assert out.abort() is None
    assert _segment_keys(env) == before


def test_an_upload_error_reaches_the_round(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    store = env.open()
    store.create_topic("t", 1, dict(COMPACT))
    log = store.partition("t", 0)

    def failing(*_a: object, **_k: object) -> None:
        raise TransientError("disk on fire")

    monkeypatch.setattr(type(store.runtime.objstore), "open_upload", failing)
    with ThreadPoolExecutor(max_workers=1) as pool:
        out = OutputStream(pool, store.runtime, log, _group(0, 99))
        with pytest.raises(TransientError, match="disk on fire"):
            for _ in range(10):  # the worker fails at its first table; a send or the finish reports it
                out.send(_table(range(50)))
            out.finish()


def test_a_failed_upload_while_another_output_completes_fails_the_round_cleanly(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outputs complete in the background while the round goes on (newest group first): the second
    output's upload fails after the first one completed. The round leaves the log and the bucket as they
    were and the error marks the partition (CLEAN-ERR-1)."""
    store = env.open()
    store.create_topic("t", 1, {**COMPACT, "segment.bytes": 400})
    log = store.partition("t", 0)
    for i in range(4):
        for j in range(5):
            log.append([Record(b"k%d" % j, b"v%d" % i)])
        log.roll()
    before_keys, before_segments = _segment_keys(env), log.manifest().segments
    before_records = [(r.offset, r.key, r.value) for r in log.read(0, max_records=100)]
    real = type(store.runtime.objstore).open_upload
    calls: list[str] = []

    def second_fails(self: object, key: str, **kw: object) -> object:
        calls.append(key)
        if len(calls) == 2:
            raise TransientError("disk on fire")
        return real(self, key, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(type(store.runtime.objstore), "open_upload", second_fails)
    report = store.run_cleaner()
    assert report.cleaned is None and "disk on fire" in next(iter(report.uncleanable.values()))
    assert len(calls) >= 2
    assert _segment_keys(env) == before_keys  # the completed output was deleted, the failed one never made
    assert log.manifest(refresh=True).segments == before_segments
    assert [(r.offset, r.key, r.value) for r in log.read(0, max_records=100)] == before_records
