"""The simulated bucket as the auditor sees it: every write and delete that reached it, and the manifests.

:class:`BucketObserver` sits between the processes' fault injectors and the bucket itself, so it sees exactly
what the bucket sees (a request an injected fault stopped never reaches it; one whose response was lost
did). It keeps when each object was last written, the latest manifest of every partition (decoded as it is
written, so no request is needed to audit it) and which segment keys any manifest ever referenced, and it
checks each delete against the grace periods when it happens (:meth:`BucketObserver.check_delete`),
recording violations for the auditor to report after the step.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from s3stream.base import layout
from s3stream.base.clock import Clock
from s3stream.base.errors import CorruptData, ObjectNotFound
from s3stream.manifest.codec import decode_manifest
from s3stream.manifest.model import Manifest
from s3stream.objectstore.forwarding import ForwardingObjectStore
from s3stream.objectstore.protocol import ObjectMeta, ObjectStore

__all__ = ["BucketObserver", "Grace"]

_MANIFEST = re.compile(r"^(logs/[^/]+/\d+/)manifest/(\d{20})\.json$")
_SEGMENT = re.compile(r"^(logs/[^/]+/\d+/)segments/")


@dataclass(slots=True)
class Grace:
    """The grace periods the auditor holds GC to (the smallest value each ever had, so a config change in
    between never makes a legitimate delete look early)."""

    orphan_min_age_ms: int
    manifest_min_age_ms: int
    file_delete_delay_ms: dict[str, int]  # topic id -> the smallest file.delete.delay.ms it ever had


class BucketObserver(ForwardingObjectStore):
    """Records writes, deletes and manifests of the bucket ``inner`` (see the module docstring)."""

    def __init__(self, inner: ObjectStore, clock: Clock, grace: Grace,
                 on_claim: Callable[[str, str, int], None] | None = None) -> None:
        super().__init__(inner)
        self._clock = clock
        self.grace = grace
        self._on_claim = on_claim  # (log prefix, new writer's node id, the manifest's next offset)
        self.written_ms: dict[str, int] = {}  # key -> when it was last written
        self.latest: dict[str, Manifest] = {}  # log prefix -> its newest manifest
        self.referenced: set[str] = set()  # segment keys some manifest ever referenced
        self.start_moved_at: dict[str, float] = {}  # log prefix -> pacing time its log start last moved
        self.violations: list[str] = []
        self.deletes = 0
        self.dead_topic_ids: set[str] = set()  # deleted topics (or earlier incarnations of a name): GC takes all

    def put(self, key: str, data: bytes | bytearray | memoryview, *, if_none_match: bool = False,
            if_match: str | None = None) -> ObjectMeta:
        meta = self.inner.put(key, data, if_none_match=if_none_match, if_match=if_match)
        self.written_ms[key] = self._clock.now_ms()
        match = _MANIFEST.match(key)
        if match is not None:
            self._manifest(match.group(1), bytes(data), key)
        return meta

    def _manifest(self, prefix: str, data: bytes, key: str) -> None:
        try:
            m = decode_manifest(data, source=key)
        except CorruptData as exc:
            self.violations.append(f"a corrupt manifest was written at {key}: {exc}")
            return
        self.referenced.update(s.key for s in m.segments)
        cur = self.latest.get(prefix)
        if cur is None or m.seq > cur.seq:
            self.latest[prefix] = m
            if cur is not None and m.log_start_offset > cur.log_start_offset:
                self.start_moved_at[prefix] = self._clock.monotonic()
            before = None if cur is None or cur.writer is None else cur.writer.owner
            if m.writer is not None and m.writer.owner != before and self._on_claim is not None:
                # another node claimed the partition: what the old one had in the bucket is sealed by now
                self._on_claim(prefix, m.writer.owner, m.next_offset)

    def delete(self, key: str) -> None:
        if key in self.written_ms:
            self.check_delete(key)
        self.inner.delete(key)
        self.written_ms.pop(key, None)

    def check_delete(self, key: str) -> None:
        """Record a violation if deleting ``key`` now breaks a grace period or drops a referenced object."""
        self.deletes += 1
        if key.startswith("logs/") and key.split("/")[1] in self.dead_topic_ids:
            return
        now = self._clock.now_ms()
        age = now - self.written_ms[key]
        g = self.grace
        if (match := _MANIFEST.match(key)) is not None:
            latest = self.latest.get(match.group(1))
            if latest is not None and key == layout.manifest_key(*_log_of(match.group(1)), latest.seq):
                self.violations.append(f"GC deleted the latest manifest {key}")
            elif age < g.manifest_min_age_ms:
                self.violations.append(f"manifest version {key} deleted {age} ms after it was written "
                                       f"(manifest_min_age_ms={g.manifest_min_age_ms})")
        elif (match := _SEGMENT.match(key)) is not None:
            self._check_segment_delete(key, match.group(1), now, age)
        elif (parsed := layout.parse_wal_key(key)) is not None:
            node_id, seq = parsed
            newest = max((p[1] for k in self.written_ms
                          if (p := layout.parse_wal_key(k)) is not None and p[0] == node_id), default=-1)
            if seq == newest:
                self.violations.append(f"GC deleted {key}, the newest object of its WAL namespace")
            elif age < g.orphan_min_age_ms:
                self.violations.append(f"WAL object {key} deleted {age} ms after it was written "
                                       f"(orphan_min_age_ms={g.orphan_min_age_ms})")

    def _check_segment_delete(self, key: str, prefix: str, now: int, age: int) -> None:
        g = self.grace
        latest = self.latest.get(prefix)
        if latest is not None and any(s.key == key for s in latest.segments):
            self.violations.append(f"segment {key} deleted while the latest manifest (seq {latest.seq}) "
                                   "references it")
            return
        if key not in self.referenced:
            return  # never committed: its writer's own discard, or an orphan (the manifest check covers it)
        removed = None if latest is None else next((r for r in latest.removed if r.key == key), None)
        topic_id = prefix.split("/")[1]
        delay = g.file_delete_delay_ms.get(topic_id)
        if removed is None:
            if delay is not None:  # a live topic: a committed segment goes only through the removed list
                self.violations.append(f"segment {key} deleted although no manifest lists it as removed")
            return
        if delay is not None and now - removed.removed_at_ms < delay:
            self.violations.append(f"segment {key} deleted {now - removed.removed_at_ms} ms after it was removed "
                                   f"from the manifest (file.delete.delay.ms={delay})")

    def missing_objects(self) -> list[str]:
        """Segment keys a latest manifest references that are not in the bucket."""
        out: list[str] = []
        for prefix, m in sorted(self.latest.items()):
            if prefix.split("/")[1] in self.dead_topic_ids:
                continue
            for s in m.segments:
                try:
                    self.inner.head(s.key)
                except ObjectNotFound:
                    out.append(f"{prefix} manifest seq {m.seq} references the missing {s.key}")
        return out


def _log_of(prefix: str) -> tuple[str, int]:
    """``(topic_id, partition)`` of a log prefix ``logs/{topic_id}/{partition}/``."""
    _, topic_id, partition, _ = prefix.split("/")
    return topic_id, int(partition)
