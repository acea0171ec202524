"""S3 throttling storms and outages lasting minutes: backpressure, bounded memory, nothing lost, recovery.

What ``tests/engine/test_outage.py`` already proves (not repeated): ``ack=wal`` appends ride through a short
outage; a full buffer blocks ``max.block.ms`` then raises BufferFull; ``ack=s3`` fails retriably; retries back
off up to their cap with the same object. Added here:

* a **throttling storm** (every request answered 503 SlowDown, with producers appending in a loop from two
  threads, real threads and time, ~2 s): appends get backpressure (each refused one blocked ``max.block.ms``,
  then BufferFull, retriable; ``ack=s3`` appends StoreUnavailable, retriable), the bytes held in memory
  (``s3stream_buffered_bytes``, sampled throughout) never exceed ``buffer.bytes`` plus one append, and after
  the storm everything acknowledged uploads and reads back exactly;
* an **outage of minutes** (5 simulated minutes of an unreachable endpoint, or of SlowDown, in
  ``background=manual`` with ``ManualClock(pacing="manual")``: no real waiting): retries keep going at the
  backoff cap (never faster, never given up), memory stays within ``buffer.bytes``, appends are taken until
  the buffer is full and then refused (BufferFull / StoreUnavailable, both retriable), and after it every
  acknowledged record lands, exactly once, in a dense sequence of WAL objects.
"""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import s3stream
from s3stream import ManualClock, Record
from s3stream.base import layout
from s3stream.base.errors import BufferFull, StoreAccessError, StoreUnavailable, Throttled
from s3stream.base.ids import IdSource
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.objectstore.protocol import ObjectStore
from s3stream.testing.faults import FaultRule, FaultyObjectStore
from s3stream.testing.gated import GatedObjectStore
from tests.engine.helpers import T0, open_mem, read_all

RECORD = 2048
BUFFER = 64 * 1024


def _node(store: s3stream.Store) -> Any:
    node = store.runtime.existing_node()
    assert node is not None
    return node


def _wal_seqs(inner: ObjectStore, node_id: str) -> list[int]:
    return sorted(s for e in inner.list(layout.wal_prefix(node_id)) if (s := layout.parse_seq(e.key)) is not None)


def _buffered_metric(store: s3stream.Store) -> float:
    value = store.metrics_registry.get_sample_value("s3stream_buffered_bytes", {})
    return 0.0 if value is None else float(value)


def test_a_throttling_storm_gives_backpressure_bounded_memory_and_loses_nothing(mem_url: str,
                                                                                 tmp_path: Path) -> None:
    faulty = FaultyObjectStore(MemoryObjectStore(mem_url.removeprefix("memory://")), ids=IdSource(5))
    store = open_mem(mem_url, tmp_path, object_store=faulty, flush_interval_ms=20, flush_bytes=16 * 1024,
                     buffer_bytes=BUFFER, max_block_ms=100, upload_retry_backoff_ms=5, upload_retry_backoff_max_ms=50)
    acked: list[tuple[int, bytes]] = []
    refusals: list[tuple[BaseException, float]] = []
    peaks = [0.0, 0.0]  # uploader state, metric
    lock = threading.Lock()
    storm = threading.Event()
    try:
        store.create_topic("t")
        log = store.partition("t", 0)
        acked.append((log.append([Record(b"k", b"before")]).base_offset, b"before"))
        store.flush()
        node = _node(store)
        faulty.set_rules([FaultRule(None, None, "throttle")])  # every request: 503 SlowDown
        storm.set()

        def produce(name: str) -> None:
            i = 0
            while storm.is_set():
                value = b"%s-%05d-" % (name.encode(), i) + b"x" * RECORD
                started = time.monotonic()
                try:
                    offset = log.append([Record(b"k", value)]).base_offset
                except BufferFull as exc:
                    with lock:
                        refusals.append((exc, time.monotonic() - started))
                else:
                    with lock:
                        acked.append((offset, value))
                i += 1

        def sample() -> None:
            while storm.is_set():
                peaks[0] = max(peaks[0], node.uploader.buffered_bytes)
                peaks[1] = max(peaks[1], _buffered_metric(store))
                time.sleep(0.002)

        threads = [threading.Thread(target=produce, args=(n,)) for n in ("a", "b")] + [threading.Thread(target=sample)]
        for t in threads:
            t.start()
        time.sleep(1.5)
        with pytest.raises(StoreUnavailable) as s3_refused:  # ack=s3 during the storm: retriable, typed
            log.append([Record(b"k", b"ack s3 in the storm")], ack="s3")
        assert s3_refused.value.retriable
        storm.clear()
        for t in threads:
            t.join(30)
        throttled = faulty.injected().get("throttle", 0)
        assert throttled >= 20  # a storm: the same objects throttled again and again, retried
        assert refusals and all(exc.retriable and "buffer.bytes" in str(exc) for exc, _ in refusals)
        assert min(took for _, took in refusals) >= 0.09  # each refused append was held max.block.ms first
        assert "throttled" in str(refusals[-1][0]).lower() or "slowdown" in str(refusals[-1][0]).lower()
        one_append = RECORD + 256
        assert 0 < peaks[0] <= BUFFER + one_append, peaks  # memory bounded by buffer.bytes (+ one append)
        assert 0 < peaks[1] <= BUFFER + one_append, peaks
        assert len(acked) > 10  # appends were taken while there was room
        faulty.set_rules([])  # the storm ends
        store.flush()
        assert node.uploader.buffered_bytes == 0 and node.uploader.failing_for_s == 0.0
        got = {r.offset: r.value for r in read_all(log)}
        assert all(got[offset] == value for offset, value in acked)  # every acknowledged record, at its offset
        assert sorted(got) == list(range(len(got)))
        # the timed-out ack=s3 append may land once (at-least-once, like a Kafka delivery timeout), else nothing
        assert set(got.values()) - {v for _, v in acked} <= {b"ack s3 in the storm"}
        seqs = _wal_seqs(faulty.inner, node.node_id)
        assert seqs == list(range(seqs[0], seqs[-1] + 1))
        print(f"storm: {len(acked)} acked, {len(refusals)} BufferFull, {throttled} throttled requests, "
              f"peak buffered {peaks[0]:.0f} B (buffer.bytes {BUFFER})")
    finally:
        storm.clear()
        faulty.set_rules([])
        store.close()


class Unreachable(GatedObjectStore):
    """Every request fails as ``kind`` while :attr:`down`: an unreachable endpoint (StoreAccessError after the
    S3 backend's own attempts) or 503 SlowDown; counts the refused WAL-object PUTs and when they came."""

    def __init__(self, inner: ObjectStore, kind: str, clock: ManualClock) -> None:
        super().__init__(inner)
        self.kind = kind
        self.clock = clock
        self.down = False
        self.wal_put_times: dict[str, list[float]] = {}  # WAL-object key -> when each PUT of it was refused

    def gate(self, op: str, key: str) -> None:
        if not self.down:
            return
        if op == "put" and key.startswith("wal/"):
            self.wal_put_times.setdefault(key, []).append(self.clock.monotonic())
        if self.kind == "unreachable":
            raise StoreAccessError(f"endpoint http://127.0.0.1:9 unreachable (bucket b) after 8 attempts: "
                                   f"{op.upper()} {key!r}: EndpointConnectionError")
        raise Throttled(f"{op.upper()} {key!r}: 503 SlowDown", key=key)


@pytest.mark.parametrize("kind", ["unreachable", "slowdown"])
def test_an_outage_of_minutes_backs_off_at_the_cap_bounds_memory_and_recovers(mem_url: str, tmp_path: Path,
                                                                              kind: str) -> None:
    clock = ManualClock(T0, pacing="manual")
    outage = Unreachable(MemoryObjectStore(mem_url.removeprefix("memory://"), clock=clock), kind, clock)
    cap_s, buffer = 5.0, 16 * 1024
    store = open_mem(mem_url, tmp_path, clock=clock, ids=IdSource(9), background="manual", object_store=outage,
                     flush_interval_ms=100, flush_bytes=4096, buffer_bytes=buffer, max_block_ms=2000,
                     upload_retry_backoff_ms=100, upload_retry_backoff_max_ms=int(cap_s * 1000))
    acked: list[tuple[int, bytes]] = []
    refused: list[BaseException] = []
    try:
        store.create_topic("t")
        log = store.partition("t", 0)
        steps = store.runtime.steps()
        acked.append((log.append([Record(b"k", b"before")]).base_offset, b"before"))
        store.flush()
        node = _node(store)
        outage.down = True
        started = clock.monotonic()
        peak = 0
        minutes = 5
        i = 0
        while clock.monotonic() - started < minutes * 60:
            value = b"%05d-" % i + b"y" * 1000
            try:
                acked.append((log.append([Record(b"k", value)]).base_offset, value))
            except BufferFull as exc:
                refused.append(exc)
            if i % 7 == 0:
                with pytest.raises(StoreUnavailable) as s3_refused:  # ack=s3: refused, retriable
                    log.append([Record(b"k", b"s3 %d" % i)], ack="s3")
                refused.append(s3_refused.value)
            steps.run_until_idle()
            peak = max(peak, node.uploader.buffered_bytes)
            clock.advance(1000)
            i += 1
        first = outage.wal_put_times[min(outage.wal_put_times)]  # the object in flight since the outage began
        assert first[-1] - first[0] >= (minutes - 0.5) * 60  # retried for the whole outage, never given up
        for times in outage.wal_put_times.values():  # each object in flight retried on its own backoff
            gaps = [b - a for a, b in itertools.pairwise(times)]
            # once at the cap: every cap_s/2..cap_s s (jittered), +1 s as the loop moves time in 1 s steps
            late = gaps[len(gaps) // 2:]
            assert all(cap_s / 2 - 1 <= g <= cap_s + 1 for g in late), late
            assert len(times) <= 20 + minutes * 60 / (cap_s / 2)  # no busy retrying
        assert len(first) >= minutes * 60 / (cap_s + 1)
        assert 0 < peak <= buffer + 1100  # memory bound: buffer.bytes (+ one append)
        assert refused and all(e.retriable for e in refused)
        assert any(isinstance(e, BufferFull) for e in refused)
        assert 5 < len(acked) < 40  # taken while the buffer had room, then refused
        outage.down = False  # the endpoint is back
        store.flush()
        steps.run_until_idle()
        assert node.uploader.buffered_bytes == 0 and node.uploader.failing_for_s == 0.0
        after = log.append([Record(b"k", b"after")])
        acked.append((after.base_offset, b"after"))
        store.flush()
        got = [(r.offset, r.value) for r in read_all(log)]
        _assert_acked_exactly(got, acked)
        seqs = _wal_seqs(outage.inner, node.node_id)
        assert seqs == list(range(seqs[0], seqs[-1] + 1))
    finally:
        outage.down = False
        store.close()
    with open_mem(mem_url, tmp_path, wal="reader") as reader:
        _assert_acked_exactly([(r.offset, r.value) for r in read_all(reader.partition("t", 0))], acked)


def _assert_acked_exactly(got: list[tuple[int | None, bytes | None]], acked: list[tuple[int, bytes]]) -> None:
    """Every acknowledged record at its offset, once; besides them only ``ack=s3`` appends that timed out
    (their records were in the local WAL already: they land once, like a Kafka delivery timeout's)."""
    assert [o for o, _ in got] == list(range(len(got)))
    by_offset = dict(got)
    assert all(by_offset[o] == v for o, v in acked)
    extra = [v for o, v in got if o not in dict(acked)]
    assert all(v is not None and v.startswith(b"s3 ") for v in extra) and len(set(extra)) == len(extra)
