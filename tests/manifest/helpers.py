"""Test helpers: segment builders, a manifest strategy and a tiny fault-injecting ObjectStore wrapper.

The wrapper complements ``s3stream.testing.faults.FaultyObjectStore`` (used by ``test_faults.py``):
it scripts faults per PUT deterministically, interleaves a rival commit just before a PUT, and fakes a
lagging LIST, which the seeded, rate-based wrapper does not.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator

from hypothesis import strategies as st

from s3stream.base import layout
from s3stream.base.errors import PreconditionFailed, Throttled, TransientError
from s3stream.base.ids import IdSource
from s3stream.manifest.model import Epoch, Manifest, RemovedObject, SegmentRef, WalCursor
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.objectstore.protocol import ByteRange, ListEntry, ObjectMeta, ObjectStore

TOPIC, TOPIC_ID, PARTITION = "orders", "t-0001", 0

_ids = IdSource(7)


def seg_key(base: int, born_ms: int = 0, *, ids: IdSource | None = None) -> str:
    """A segment key with a ULID minted at ``born_ms``."""
    return layout.segment_key(TOPIC_ID, PARTITION, base, (ids or _ids).ulid(born_ms))


def seg(base: int, last: int, *, key: str | None = None, max_ts: int = -1, created_ms: int = 0,
        size: int = 100, cleaned: bool = False) -> SegmentRef:
    return SegmentRef(key=key or seg_key(base, created_ms), base_offset=base, last_offset=last,
                      size_bytes=size, object_size=size + 10, record_count=last - base + 1,
                      max_timestamp=max_ts, first_batch_max_timestamp=max_ts, created_ms=created_ms,
                      crc32c=1234, cleaned=cleaned)


def manifest_with(*ranges: tuple[int, int], log_start: int = 0, seq: int = 0) -> Manifest:
    """A manifest whose segments cover ``ranges`` (which must be contiguous)."""
    segs = tuple(seg(a, b) for a, b in ranges)
    return Manifest(topic=TOPIC, topic_id=TOPIC_ID, partition=PARTITION, seq=seq,
                    parent_seq=seq - 1 if seq > 0 else None, log_start_offset=log_start,
                    next_offset=segs[-1].end_offset if segs else 0, segments=segs)


# --- hypothesis -----------------------------------------------------------------------------------

_text = st.text(st.characters(codec="utf-8"), max_size=12)
_i64 = st.integers(min_value=0, max_value=2**63 - 1)
_ts = st.integers(min_value=-1, max_value=2**50)


@st.composite
def manifests(draw: st.DrawFn) -> Manifest:
    """Arbitrary valid manifests (every invariant holds)."""
    start = draw(st.integers(min_value=0, max_value=2**40))
    lengths = draw(st.lists(st.integers(min_value=1, max_value=1000), max_size=6))
    segs: list[SegmentRef] = []
    base = start
    for i, n in enumerate(lengths):
        segs.append(SegmentRef(
            key=f"logs/x/0/segments/{base:020d}-{i}{draw(_text)}", base_offset=base, last_offset=base + n - 1,
            size_bytes=draw(_i64), object_size=draw(_i64), record_count=draw(st.integers(0, n)),
            max_timestamp=draw(_ts), first_batch_max_timestamp=draw(_ts),
            created_ms=draw(st.integers(-(2**40), 2**50)), crc32c=draw(st.integers(0, 2**32 - 1)),
            added_seq=draw(st.integers(0, 10**6)), cleaned=draw(st.booleans())))
        base += n
    seq = draw(st.integers(0, 10**9))
    epoch = st.builds(Epoch, st.integers(1, 10**6), _text.filter(bool))
    return Manifest(
        topic=draw(_text), topic_id=draw(_text.filter(bool)), partition=draw(st.integers(0, 10**4)),
        seq=seq, parent_seq=draw(st.none() | st.integers(0, seq - 1)) if seq > 0 else None,
        commit_id=draw(_text), committed_at_ms=draw(st.integers(-(2**40), 2**50)),
        writer=draw(st.none() | epoch), cleaner=draw(st.none() | epoch),
        log_start_offset=draw(_i64), next_offset=base if segs else draw(_i64), segments=tuple(segs),
        wal=draw(st.none() | st.builds(WalCursor, _text.filter(bool), _i64)),
        removed=tuple(RemovedObject(f"gone/{i}", draw(st.integers(-(2**40), 2**50)), draw(_i64))
                      for i in range(draw(st.integers(0, 3)))),
        cleaner_checkpoint=draw(st.none() | _i64),
        attributes=draw(st.dictionaries(_text, _text, max_size=3)),
    )


# --- fault injection ------------------------------------------------------------------------------


class FaultyStore:
    """Delegates to ``inner``; conditional PUTs under ``prefix`` follow a script of faults.

    Script actions, consumed one per matching PUT (an empty script means "ok"):

    * ``"412"``: raise PreconditionFailed without writing (a storm when ``storm_412`` is set);
    * ``"lost"``: write, then raise TransientError (the response was lost);
    * ``"lost412"``: write, then raise PreconditionFailed (an SDK retry of a PUT that had landed);
    * ``"timeout"``: raise TransientError without writing (the request never arrived);
    * ``"throttle"``: raise Throttled without writing.

    ``latency_s`` delays every GET and PUT (widens race windows between threads); ``conflicts`` counts
    real 412s from the inner store. ``before_put`` (if set) runs once, just before the next matching
    PUT (to interleave a rival commit). ``hide_from_list`` keys are left out of listings (a lagging
    LIST); ``phantoms`` are listed once although they do not exist (GC deleted them after the listing).
    """

    def __init__(self, inner: ObjectStore | None = None, *, prefix: str = "", latency_s: float = 0.0) -> None:
        self.inner: ObjectStore = inner or MemoryObjectStore()
        self.prefix = prefix
        self.script: deque[str] = deque()
        self.storm_412 = False
        self.latency_s = latency_s
        self.conflicts = 0
        self.before_put: Callable[[], object] | None = None
        self.phantoms: list[ListEntry] = []
        self.hide_from_list: set[str] = set()
        self.puts: list[str] = []
        self.gets: list[str] = []
        self.lists = 0
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return "faulty+" + self.inner.url

    def put(self, key: str, data: bytes | bytearray | memoryview, *, if_none_match: bool = False,
            if_match: str | None = None) -> ObjectMeta:
        action = "ok"
        hook = None
        with self._lock:
            self.puts.append(key)
            if key.startswith(self.prefix):
                hook, self.before_put = self.before_put, None
                if self.storm_412:
                    action = "412"
                elif self.script:
                    action = self.script.popleft()
        if hook is not None:
            hook()
        if action == "412":
            raise PreconditionFailed(f"injected 412 on {key}", key=key)
        if action == "timeout":
            raise TransientError(f"injected timeout on {key}", key=key)
        if action == "throttle":
            raise Throttled(f"injected 503 SlowDown on {key}", key=key)
        time.sleep(self.latency_s)
        try:
            meta = self.inner.put(key, data, if_none_match=if_none_match, if_match=if_match)
        except PreconditionFailed:
            with self._lock:
                self.conflicts += 1
            raise
        if action == "lost":
            raise TransientError(f"injected lost response on {key}", key=key)
        if action == "lost412":
            raise PreconditionFailed(f"injected 412 after a landed PUT on {key}", key=key)
        return meta

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        with self._lock:
            self.gets.append(key)
        time.sleep(self.latency_s)
        return self.inner.get(key, byte_range)

    def get_view(self, key: str, byte_range: ByteRange | None = None) -> memoryview:
        return memoryview(self.get(key, byte_range))

    def head(self, key: str) -> ObjectMeta:
        return self.inner.head(key)

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ListEntry]:
        with self._lock:
            self.lists += 1
            phantoms, self.phantoms = [e for e in self.phantoms if e.key.startswith(prefix)], []
        entries = [e for e in self.inner.list(prefix, start_after=start_after)
                   if e.key not in self.hide_from_list]
        return iter(sorted([*entries, *phantoms], key=lambda e: e.key))

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def close(self) -> None:
        self.inner.close()
