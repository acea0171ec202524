"""Property: cleaning never changes what a consumer folding the log from the start ends up with (CLEAN-GUAR-2..5).

For random histories of keyed values and tombstones, rolled into random segments and cleaned at random
points (with a random dedupe buffer, so rounds are often partial, and random clock advances, so
tombstones pass their horizons), after every pass:

* folding the log last-write-wins gives the same (offset, value) per key as before the pass, except
  that a tombstone may disappear once a previous round stamped its horizon and ``now >= horizon``;
* every surviving record is one that was there before (same offset, key, value): nothing is invented;
* offsets strictly increase; the log start and the log end are unchanged.
"""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import s3stream
from s3stream import ManualClock
from s3stream.objectstore.memory import MemoryObjectStore

from .kit import COMPACT, T0, fold, horizons, kv, open_at, read_all, unique_name

KEYS = ["a", "b", "c", "d", "e"]

op = st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.sampled_from(["1", "22", "333", ""])))
segment = st.lists(op, min_size=1, max_size=6)
step = st.tuples(segment, st.booleans(), st.sampled_from([0, 400, 1000, 3000]))   # ops, clean after?, advance
history = st.lists(step, min_size=1, max_size=6)


def check_pass(store: s3stream.Store, log: s3stream.PartitionLog, clock: ManualClock) -> None:
    before = read_all(log)
    stamped = horizons(log)
    start, leo = log.log_start_offset, log.log_end_offset
    store.run_cleaner()
    after = read_all(log)
    offsets = [r.offset for r in after]
    assert all(a is not None and b is not None and a < b for a, b in itertools.pairwise(offsets))
    assert (log.log_start_offset, log.log_end_offset) == (start, leo)
    assert {(r.offset, r.key, r.value) for r in after} <= {(r.offset, r.key, r.value) for r in before}
    was, now = fold(before), fold(after)
    assert set(now) <= set(was)
    for key, (offset, value) in was.items():
        if key in now:
            assert now[key] == (offset, value)
        else:
            assert value is None, f"the latest value of {key!r} was lost"
            horizon = stamped.get(offset) if offset is not None else None
            assert horizon is not None and horizon <= clock.now_ms(), "tombstone dropped before its horizon"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history, st.sampled_from([24 * 3, 24 * 5, 1 << 20]), st.sampled_from([60, 1 << 20]))
def test_cleaning_preserves_the_folded_log(steps: list[tuple[list[tuple[str, str | None]], bool, int]],
                                           dedupe_bytes: int, segment_bytes: int) -> None:
    name = unique_name("prop")
    clock = ManualClock(T0)
    with tempfile.TemporaryDirectory() as tmp:
        store = open_at(f"memory://{name}", Path(tmp), clock, log_cleaner_dedupe_buffer_size=dedupe_bytes)
        try:
            store.create_topic("t", 1, {**COMPACT, "segment.bytes": segment_bytes})
            log = store.partition("t", 0)
            for ops, clean, advance in steps:
                for key, value in ops:
                    log.append([kv(key, value, clock.now_ms())])
                log.roll()
                clock.advance(advance)
                if clean:
                    check_pass(store, log, clock)
            for _ in range(3):
                clock.advance(1000)
                check_pass(store, log, clock)
        finally:
            store.close()
            MemoryObjectStore.drop_namespace(name)
