"""The commit protocol: immutable numbered documents created with put-if-absent, rebased on conflict.

Vocabulary: a **versioned document** (a partition manifest, a topic document) is a chain of immutable
objects ``key_for_seq(1), key_for_seq(2), ...``; version ``seq`` names its parent ``seq - 1``. The
object key is the commit point: whoever creates ``key_for_seq(n)`` (``If-None-Match: *``) committed
version n. There is no mutable pointer, so there is no ABA (manifest-protocol.md 4.1-4.3).

Reading the latest (:meth:`VersionedStore.load_latest`): from the cached version, probe ``seq+1, ...``
with GET until ObjectNotFound (GET is strongly consistent; LIST may lag, L2). Without a usable cache,
LIST the prefix, parse and sort the seqs numerically (never trusting listing order), GET the largest,
then probe forward; a listed key that 404s (GC raced, L1) retries the LIST, bounded. After
``max_probes`` consecutive hits the reader is far behind and jumps with one LIST.

Committing (:meth:`VersionedStore.commit`): load the latest, run the fencing ``check``, apply the
intent, stamp ``seq + 1``/``parent_seq``/a fresh ULID ``commit_id``, validate, PUT if absent.

* 412/409 (:class:`PreconditionFailed`): someone else won, or an SDK retry of our own landed PUT.
  Read the key back: our ``commit_id`` means success (S1); otherwise reload and rebase (R2).
* :class:`TransientError`/:class:`Throttled` (outcome unknown, S2): read back: ours means success,
  someone else's means rebase, absent means retry the same body (a late landing then shows as ours).
* Transient errors while reading the latest version are retried with backoff until the deadline.
* Success is returned only after our PUT returned or we read back our own ``commit_id``, so a false
  success is impossible. Jittered exponential backoff between attempts; the deadline
  (``commit_timeout_s`` on ``clock.monotonic``) is checked before every PUT -> :class:`CommitTimeout`.
  A timeout after an ambiguous attempt leaves the outcome unknown; intents are idempotent, so the
  caller may simply commit again.

Invariants: versions are dense (1, 2, 3 ...); a version is never overwritten; the cache only moves
forward, and a cached "nothing after seq" is trusted only for ``cache_ttl_s`` (it must stay well below
the manifest GC's ``manifest_min_age``, or a deleted successor could be mistaken for "no successor": a
store's partitions take :func:`cache_ttl_for` of its setting).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import re
import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from s3stream.base import layout
from s3stream.base.clock import Clock
from s3stream.base.crashpoints import NO_CRASH, CrashPoints
from s3stream.base.errors import (
    CommitTimeout,
    CorruptData,
    Fenced,
    InternalError,
    ObjectNotFound,
    PreconditionFailed,
    Throttled,
    TransientError,
)
from s3stream.base.ids import IdSource
from s3stream.manifest.codec import ManifestDocCodec
from s3stream.manifest.model import Epoch, Manifest
from s3stream.objectstore.protocol import ListEntry, ObjectStore

__all__ = [
    "CACHE_TTL_S",
    "DocCodec",
    "ManifestStore",
    "VersionedStore",
    "cache_ttl_for",
    "cleaner_fence",
    "manifest_store",
    "writer_fence",
]

T = TypeVar("T")

_SEQ_TAIL = re.compile(r"(\d+)(?:\.[A-Za-z0-9]+)?$")
_LIST_RETRIES = 5
_BACKOFF_BASE_S = 0.1
_BACKOFF_MAX_S = 5.0


class DocCodec(Protocol[T]):
    """How the commit protocol encodes, decodes, numbers and checks one document type."""

    def encode(self, doc: T) -> bytes: ...

    def decode(self, data: bytes, *, source: str) -> T:
        """Parse bytes from ``source``; any defect raises CorruptData naming it."""
        ...

    def seq(self, doc: T) -> int: ...

    def commit_id(self, doc: T) -> str: ...

    def stamp(self, doc: T, *, seq: int, parent_seq: int | None, commit_id: str, now_ms: int) -> T:
        """``doc`` as version ``seq`` of the chain, committed by attempt ``commit_id`` at ``now_ms``."""
        ...

    def validate(self, doc: T) -> None:
        """Invariants checked before every PUT; a violation is a bug (InternalError)."""
        ...


class _Outcome(enum.Enum):
    LANDED = "landed"  # our body is stored at the key
    LOST = "lost"  # another commit holds the key: rebase
    UNKNOWN = "unknown"  # nothing at the key (yet): retry the same body


@dataclasses.dataclass(frozen=True, slots=True)
class _Cached(Generic[T]):
    doc: T
    seq: int
    validated_at: float  # monotonic time at which "no seq + 1 exists" was last true


class VersionedStore(Generic[T]):
    """Load and commit one chain of versioned documents under ``prefix`` (thread-safe)."""

    def __init__(self, store: ObjectStore, *, key_for_seq: Callable[[int], str], prefix: str,
                 codec: DocCodec[T], clock: Clock, ids: IdSource, commit_timeout_s: float = 60.0,
                 max_probes: int = 4, crash_points: CrashPoints | None = None,
                 cache_ttl_s: float = 300.0) -> None:
        if max_probes < 1:
            raise InternalError("VersionedStore: max_probes must be >= 1")
        self._store = store
        self._key_for_seq = key_for_seq
        self._prefix = prefix
        self._codec = codec
        self._clock = clock
        self._ids = ids
        self._commit_timeout_s = commit_timeout_s
        self._max_probes = max_probes
        self._crash = crash_points if crash_points is not None else NO_CRASH
        self._cache_ttl_s = cache_ttl_s
        self._lock = threading.Lock()
        self._cached: _Cached[T] | None = None

    @property
    def prefix(self) -> str:
        """The key prefix under which every version lives."""
        return self._prefix

    def key_for_seq(self, seq: int) -> str:
        """The object key of version ``seq``."""
        return self._key_for_seq(seq)

    # --- reading ---------------------------------------------------------------------------------

    def load(self, seq: int) -> T:
        """Version ``seq``; ObjectNotFound if it does not exist (or was garbage collected)."""
        return self._get(seq)

    def load_latest(self) -> T | None:
        """The newest committed version, or None if the chain is empty (see the module docstring)."""
        with self._lock:
            cached = self._cached
        if cached is not None and self._clock.monotonic() - cached.validated_at < self._cache_ttl_s:
            return self._probe_forward(cached.doc, cached.seq)
        doc, seq = self._load_by_listing(cached)
        return self._probe_forward(doc, seq)

    def list_entries(self) -> list[tuple[int, ListEntry]]:
        """``(seq, entry)`` of every listed version, sorted by seq (LIST may miss the newest ones)."""
        out: list[tuple[int, ListEntry]] = []
        for entry in self._store.list(self._prefix):
            m = _SEQ_TAIL.search(entry.key)
            if m is not None and self._key_for_seq(int(m.group(1))) == entry.key:
                out.append((int(m.group(1)), entry))
        out.sort(key=lambda item: item[0])
        return out

    def list_seqs(self) -> list[int]:
        """The listed version numbers, sorted numerically."""
        return [seq for seq, _ in self.list_entries()]

    def _get(self, seq: int) -> T:
        key = self._key_for_seq(seq)
        doc = self._codec.decode(self._store.get(key), source=key)
        stored = self._codec.seq(doc)
        if stored != seq:
            raise CorruptData(f"document says seq {stored} but is stored as seq {seq}", source=key)
        return doc

    def _probe_forward(self, doc: T | None, seq: int) -> T | None:
        while True:
            for _ in range(self._max_probes):
                started = self._clock.monotonic()
                try:
                    nxt = self._get(seq + 1)
                except ObjectNotFound:
                    if doc is not None:
                        self._remember(doc, seq, started)
                    return doc
                doc, seq = nxt, seq + 1
            jumped = self._jump_by_listing(seq)
            if jumped is not None:
                doc, seq = jumped

    def _jump_by_listing(self, after_seq: int) -> tuple[T, int] | None:
        newer = [s for s in self.list_seqs() if s > after_seq]
        if not newer:
            return None
        try:
            return self._get(newer[-1]), newer[-1]
        except ObjectNotFound:
            return None  # GC raced the listing; keep probing

    def _load_by_listing(self, cached: _Cached[T] | None) -> tuple[T | None, int]:
        for _ in range(_LIST_RETRIES):
            seqs = self.list_seqs()
            if cached is not None and (not seqs or seqs[-1] <= cached.seq):
                return cached.doc, cached.seq  # the listing lags what we already saw
            if not seqs:
                return None, 0
            try:
                return self._get(seqs[-1]), seqs[-1]
            except ObjectNotFound:
                continue  # listed but gone: GC raced the listing (L1)
        raise TransientError(f"{self._prefix}: the listing keeps naming deleted versions", key=self._prefix)

    def _remember(self, doc: T, seq: int, validated_at: float) -> None:
        with self._lock:
            cur = self._cached
            if cur is None or seq > cur.seq or (seq == cur.seq and validated_at > cur.validated_at):
                self._cached = _Cached(doc, seq, validated_at)

    # --- committing ------------------------------------------------------------------------------

    def commit(self, intent: Callable[[T | None], T | None], *,
               check: Callable[[T | None], None] | None = None) -> T | None:
        """Apply ``intent`` to the latest version and commit the result as the next version.

        Returns the committed document, or the current one (possibly None) when the intent had
        nothing to change. Raises what ``check`` raises (Fenced), what the intent raises
        (CommitConflict), CommitTimeout past the deadline, InternalError if the result is invalid.
        """
        deadline = self._clock.monotonic() + self._commit_timeout_s
        cur = self._reload(deadline)
        pending: T | None = None
        attempt = 0
        while True:
            if pending is None:
                if check is not None:
                    check(cur)
                new = intent(cur)
                if new is None:
                    return cur
                pending = self._stamp(cur, new)
            if self._clock.monotonic() > deadline:
                raise CommitTimeout(f"{self._prefix}: commit did not land within {self._commit_timeout_s} s "
                                    f"({attempt} attempts)")
            started = self._clock.monotonic()  # no successor of ours can exist before this instant
            outcome = self._put_once(pending)
            if outcome is _Outcome.LANDED:
                self._crash.hit("manifest.after_put")
                self._remember(pending, self._codec.seq(pending), started)
                return pending
            self._backoff(attempt, deadline)
            attempt += 1
            if outcome is _Outcome.LOST:
                pending = None
                cur = self._reload(deadline)

    def _reload(self, deadline: float) -> T | None:
        """``load_latest``, riding out transient read errors until the commit deadline."""
        attempt = 0
        while True:
            try:
                return self.load_latest()
            except (TransientError, Throttled):
                self._backoff(attempt, deadline)
                attempt += 1

    def _stamp(self, cur: T | None, new: T) -> T:
        cur_seq = self._codec.seq(cur) if cur is not None else 0
        now_ms = self._clock.now_ms()
        stamped = self._codec.stamp(new, seq=cur_seq + 1, parent_seq=cur_seq if cur is not None else None,
                                    commit_id=self._ids.ulid(now_ms), now_ms=now_ms)
        self._codec.validate(stamped)
        return stamped

    def _put_once(self, doc: T) -> _Outcome:
        key = self._key_for_seq(self._codec.seq(doc))
        data = self._codec.encode(doc)
        self._crash.hit("manifest.before_put")
        try:
            self._store.put(key, data, if_none_match=True)
        except PreconditionFailed:
            mine = self._is_mine(key, self._codec.commit_id(doc))
            return _Outcome.LANDED if mine else _Outcome.LOST
        except (TransientError, Throttled):
            mine = self._is_mine(key, self._codec.commit_id(doc))
            if mine is None:
                return _Outcome.UNKNOWN
            return _Outcome.LANDED if mine else _Outcome.LOST
        return _Outcome.LANDED

    def _is_mine(self, key: str, commit_id: str) -> bool | None:
        """Read ``key`` back: True if it holds our attempt, False if another's, None if absent/unknown."""
        try:
            data = self._store.get(key)
        except ObjectNotFound:
            return None
        except (TransientError, Throttled):
            return None  # still unknown: retrying the same body settles it
        return self._codec.commit_id(self._codec.decode(data, source=key)) == commit_id

    def _backoff(self, attempt: int, deadline: float) -> None:
        delay = min(_BACKOFF_BASE_S * 2 ** min(attempt, 16), _BACKOFF_MAX_S) * self._ids.uniform(0.5, 1.0)
        remaining = deadline - self._clock.monotonic()
        if remaining <= 0:
            raise CommitTimeout(f"{self._prefix}: commit did not land within {self._commit_timeout_s} s "
                                f"({attempt + 1} attempts)")
        self._clock.sleep(min(delay, remaining))


# --- partition manifests ---------------------------------------------------------------------------


class ManifestStore(VersionedStore[Manifest]):
    """The manifest chain of one partition; intents and checks see ``Manifest.empty`` instead of None."""

    def __init__(self, store: ObjectStore, *, topic: str, topic_id: str, partition: int, clock: Clock,
                 ids: IdSource, crash_points: CrashPoints | None = None, commit_timeout_s: float = 60.0,
                 max_probes: int = 4, cache_ttl_s: float = 300.0) -> None:
        super().__init__(store, key_for_seq=functools.partial(layout.manifest_key, topic_id, partition),
                         prefix=f"{layout.log_prefix(topic_id, partition)}manifest/",
                         codec=ManifestDocCodec(topic_id, partition), clock=clock, ids=ids,
                         commit_timeout_s=commit_timeout_s, max_probes=max_probes,
                         crash_points=crash_points, cache_ttl_s=cache_ttl_s)
        self.topic = topic
        self.topic_id = topic_id
        self.partition = partition

    @property
    def segments_prefix(self) -> str:
        """Where this partition's segment objects live (orphan GC lists it)."""
        return f"{layout.log_prefix(self.topic_id, self.partition)}segments/"

    def empty(self) -> Manifest:
        """The partition's state before its first commit."""
        return Manifest.empty(self.topic, self.topic_id, self.partition)

    def load_latest_or_empty(self) -> Manifest:
        """The latest manifest, or the empty one if nothing was committed yet."""
        m = self.load_latest()
        return m if m is not None else self.empty()

    def commit(self, intent: Callable[[Manifest], Manifest | None], *,
               check: Callable[[Manifest], None] | None = None) -> Manifest:
        """As :meth:`VersionedStore.commit`, with ``Manifest.empty`` standing in for "no manifest"."""

        def wrapped(cur: Manifest | None) -> Manifest | None:
            return intent(cur if cur is not None else self.empty())

        def wrapped_check(cur: Manifest | None) -> None:
            if check is not None:
                check(cur if cur is not None else self.empty())

        result = super().commit(wrapped, check=wrapped_check)
        return result if result is not None else self.empty()


#: How long a cached "no version after this one" is trusted at most (see the module docstring).
CACHE_TTL_S = 300.0


def cache_ttl_for(manifest_min_age_ms: int) -> float:
    """The cache TTL for a store whose GC deletes superseded manifest versions after ``manifest_min_age_ms``:
    :data:`CACHE_TTL_S`, or half that grace when it is shorter (a probe finding no successor could otherwise
    meet one GC deleted, and a reader would go on with a stale manifest: a moved log start unseen, deleted
    segments read)."""
    return min(CACHE_TTL_S, manifest_min_age_ms / 2000.0)


def manifest_store(store: ObjectStore, *, topic: str, topic_id: str, partition: int, clock: Clock,
                   ids: IdSource, crash_points: CrashPoints | None = None,
                   commit_timeout_s: float = 60.0, cache_ttl_s: float = CACHE_TTL_S) -> ManifestStore:
    """The :class:`ManifestStore` of partition ``partition`` of topic ``topic_id``."""
    return ManifestStore(store, topic=topic, topic_id=topic_id, partition=partition, clock=clock, ids=ids,
                         crash_points=crash_points, commit_timeout_s=commit_timeout_s, cache_ttl_s=cache_ttl_s)


def _fence(role: str, me: Epoch,
           get: Callable[[Manifest], Epoch | None]) -> Callable[[Manifest | None], None]:
    def check(cur: Manifest | None) -> None:
        if cur is None:
            return
        holder = get(cur)
        if holder is not None and (holder.epoch > me.epoch
                                   or (holder.epoch == me.epoch and holder.owner != me.owner)):
            raise Fenced(f"{role} {me.owner} (epoch {me.epoch}) was fenced by {holder.owner} "
                         f"(epoch {holder.epoch}) on {cur.topic_id}/{cur.partition}")

    return check


def writer_fence(me: Epoch) -> Callable[[Manifest | None], None]:
    """A commit check raising Fenced once another writer claimed the partition after ``me``.

    It accepts None (no manifest yet: nothing to fence) so it fits both :meth:`ManifestStore.commit`
    and a plain ``VersionedStore[Manifest].commit``.
    """
    return _fence("writer", me, lambda m: m.writer)


def cleaner_fence(me: Epoch) -> Callable[[Manifest | None], None]:
    """A commit check raising Fenced once another cleaner claimed the partition after ``me``."""
    return _fence("cleaner", me, lambda m: m.cleaner)
