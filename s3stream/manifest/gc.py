"""Garbage collection of one partition's objects: pure planners, and one small executor.

Three kinds of garbage (manifest-protocol.md 4.5):

* **removed objects**: keys a manifest edit dropped (retention, compaction) and recorded as
  :class:`~s3stream.manifest.model.RemovedObject`. Deleted once ``now - removed_at_ms >=
  delete_delay_ms`` (``file.delete.delay.ms``: readers of older manifests finish first), then a commit
  forgets them. A crash between the DELETE and that commit only means a harmless re-delete (C6).
* **orphans**: segment objects that no manifest ever referenced (a crash between the segment PUT and
  the manifest commit, C1/C4). Deleted only when unreferenced, not awaiting removal, and *both* the
  ULID time in the key and the store's LastModified are at least ``orphan_min_age_ms`` old (T2/T3: an
  upload in flight is young by both clocks).
* **old manifests**: all but the newest ``keep_latest`` versions, once older than ``manifest_min_age``
  by LastModified. The latest version is never deleted, whatever the listing says.

The referenced set comes from the latest manifest loaded by probing, never from LIST alone: a lagging
LIST that missed the newest manifest would make its new segments look unreferenced (L2). Planners do
no I/O; :func:`collect_log_garbage` is the thin adapter that lists, deletes and commits.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from s3stream.base.crashpoints import NO_CRASH, CrashPoints
from s3stream.base.errors import InternalError
from s3stream.base.ids import ulid_time_ms
from s3stream.manifest.intents import forget_removed
from s3stream.manifest.model import Manifest
from s3stream.manifest.versioned import ManifestStore
from s3stream.objectstore.protocol import ListEntry, ObjectStore

__all__ = [
    "GcReport",
    "collect_log_garbage",
    "plan_manifest_deletions",
    "plan_orphan_deletions",
    "plan_removed_deletions",
    "segment_key_time_ms",
]

_SEGMENT_NAME = re.compile(r"(?:^|/)\d{20}-([0-9A-Za-z]{26})\.parquet$")


def plan_removed_deletions(m: Manifest, *, now_ms: int, delete_delay_ms: int,
                           referenced: AbstractSet[str]) -> list[str]:
    """Keys of removed objects whose delete delay has passed (exactly at the delay counts)."""
    return [r.key for r in m.removed
            if now_ms - r.removed_at_ms >= delete_delay_ms and r.key not in referenced]


def segment_key_time_ms(key: str) -> int | None:
    """The ULID time of a segment key ``.../{base:020d}-{ulid}.parquet``; None if it is not one."""
    match = _SEGMENT_NAME.search(key)
    if match is None:
        return None
    try:
        return ulid_time_ms(match.group(1))
    except ValueError:
        return None


def plan_orphan_deletions(listing: Iterable[ListEntry], *, referenced: AbstractSet[str],
                          removed: AbstractSet[str], now_ms: int, orphan_min_age_ms: int) -> list[str]:
    """Keys of listed segment objects that are orphans, old by both their ULID and their mtime.

    A key that does not parse as a segment key is kept: GC deletes only what it understands.
    """
    out: list[str] = []
    for entry in listing:
        if entry.key in referenced or entry.key in removed:
            continue
        born_ms = segment_key_time_ms(entry.key)
        if born_ms is None:
            continue
        if now_ms - born_ms >= orphan_min_age_ms and now_ms - entry.last_modified_ms >= orphan_min_age_ms:
            out.append(entry.key)
    return out


def plan_manifest_deletions(seqs: Sequence[int], *, keep_latest: int, last_modified_ms: Mapping[int, int],
                            now_ms: int, manifest_min_age_ms: int,
                            latest_seq: int | None = None) -> list[int]:
    """Manifest seqs that may be deleted, ascending.

    The newest ``keep_latest`` listed seqs and anything ``>= latest_seq`` (the latest found by probing,
    which a lagging LIST may not show) are kept; an older seq goes once its LastModified is at least
    ``manifest_min_age_ms`` old. A seq without a known LastModified is kept.
    """
    if keep_latest < 1:
        raise InternalError("plan_manifest_deletions: keep_latest must be >= 1")
    ordered = sorted(set(seqs))
    candidates = ordered[:-keep_latest]
    return [s for s in candidates
            if (latest_seq is None or s < latest_seq)
            and s in last_modified_ms and now_ms - last_modified_ms[s] >= manifest_min_age_ms]


@dataclass(frozen=True, slots=True)
class GcReport:
    """What one GC pass over one partition deleted (or, with ``dry_run``, would delete)."""

    removed_keys: tuple[str, ...] = ()
    orphan_keys: tuple[str, ...] = ()
    manifest_keys: tuple[str, ...] = ()
    forgot_removed: bool = False  # the latest manifest no longer lists the deleted removed keys
    dry_run: bool = False

    @property
    def removed_count(self) -> int:
        return len(self.removed_keys)

    @property
    def orphan_count(self) -> int:
        return len(self.orphan_keys)

    @property
    def manifest_count(self) -> int:
        return len(self.manifest_keys)


def collect_log_garbage(store: ObjectStore, vstore: ManifestStore, *, now_ms: int, delete_delay_ms: int,
                        orphan_min_age_ms: int, manifest_min_age_ms: int, keep_latest_manifests: int = 10,
                        dry_run: bool = False, crash_points: CrashPoints | None = None) -> GcReport:
    """One GC pass over the partition of ``vstore``: removed objects, then orphans, then old manifests.

    Idempotent and safe to run concurrently with writers and the cleaner (only old objects are
    deleted, and the forget commit is an idempotent intent).
    """
    crash = crash_points if crash_points is not None else NO_CRASH
    m = vstore.load_latest_or_empty()
    referenced = frozenset(s.key for s in m.segments)
    removed_keys = plan_removed_deletions(m, now_ms=now_ms, delete_delay_ms=delete_delay_ms,
                                          referenced=referenced)
    orphan_keys = plan_orphan_deletions(store.list(vstore.segments_prefix), referenced=referenced,
                                        removed=frozenset(r.key for r in m.removed), now_ms=now_ms,
                                        orphan_min_age_ms=orphan_min_age_ms)
    manifest_keys = _plan_manifests(vstore, m, now_ms=now_ms, keep_latest=keep_latest_manifests,
                                    min_age_ms=manifest_min_age_ms)
    if dry_run:
        return GcReport(tuple(removed_keys), tuple(orphan_keys), tuple(manifest_keys), dry_run=True)
    for key in removed_keys:
        store.delete(key)
    forgot = False
    if removed_keys:
        crash.hit("gc.after_delete")
        committed = vstore.commit(forget_removed(removed_keys))
        gone = frozenset(removed_keys)
        forgot = not any(r.key in gone for r in committed.removed)
    for key in orphan_keys:
        store.delete(key)
    for key in manifest_keys:
        store.delete(key)
    return GcReport(tuple(removed_keys), tuple(orphan_keys), tuple(manifest_keys), forgot_removed=forgot)


def _plan_manifests(vstore: ManifestStore, m: Manifest, *, now_ms: int, keep_latest: int,
                    min_age_ms: int) -> list[str]:
    entries = vstore.list_entries()
    seqs = plan_manifest_deletions([s for s, _ in entries], keep_latest=keep_latest,
                                   last_modified_ms={s: e.last_modified_ms for s, e in entries},
                                   now_ms=now_ms, manifest_min_age_ms=min_age_ms,
                                   latest_seq=m.seq)  # seq 0: nothing found, delete none
    return [vstore.key_for_seq(s) for s in seqs]
