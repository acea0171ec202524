"""Partition manifests: the immutable value, pure intents, the commit protocol, topic documents, GC.

* :mod:`~s3stream.manifest.model`: :class:`Manifest` and its parts, :func:`check_invariants`;
* :mod:`~s3stream.manifest.codec`: canonical JSON encode/decode (strict; CorruptData on any defect);
* :mod:`~s3stream.manifest.intents`: pure, idempotent edits (seal, retention, compaction swap, epochs);
* :mod:`~s3stream.manifest.versioned`: put-if-absent commits with rebase, read-back and fencing;
* :mod:`~s3stream.manifest.topicdoc`: topic documents on the same protocol;
* :mod:`~s3stream.manifest.gc`: GC planners (pure) and a one-partition GC pass.

The design is written up in ``docs/design/manifest-protocol.md``.
"""

from s3stream.manifest.codec import MANIFEST_FORMAT, decode_manifest, encode_manifest
from s3stream.manifest.gc import (
    GcReport,
    collect_log_garbage,
    plan_manifest_deletions,
    plan_orphan_deletions,
    plan_removed_deletions,
)
from s3stream.manifest.intents import (
    Intent,
    add_segment,
    advance_log_start,
    claim_cleaner,
    claim_writer,
    compose,
    drop_segments,
    forget_removed,
    replace_segments,
    set_wal_cursor,
)
from s3stream.manifest.model import (
    Epoch,
    FrozenMap,
    Manifest,
    RemovedObject,
    SegmentRef,
    WalCursor,
    check_invariants,
)
from s3stream.manifest.topicdoc import TopicDoc, decode_topic_doc, encode_topic_doc, topic_store
from s3stream.manifest.versioned import (
    DocCodec,
    ManifestStore,
    VersionedStore,
    cleaner_fence,
    manifest_store,
    writer_fence,
)

__all__ = [
    "MANIFEST_FORMAT",
    "DocCodec",
    "Epoch",
    "FrozenMap",
    "GcReport",
    "Intent",
    "Manifest",
    "ManifestStore",
    "RemovedObject",
    "SegmentRef",
    "TopicDoc",
    "VersionedStore",
    "WalCursor",
    "add_segment",
    "advance_log_start",
    "check_invariants",
    "claim_cleaner",
    "claim_writer",
    "cleaner_fence",
    "collect_log_garbage",
    "compose",
    "decode_manifest",
    "decode_topic_doc",
    "drop_segments",
    "encode_manifest",
    "encode_topic_doc",
    "forget_removed",
    "manifest_store",
    "plan_manifest_deletions",
    "plan_orphan_deletions",
    "plan_removed_deletions",
    "replace_segments",
    "set_wal_cursor",
    "topic_store",
    "writer_fence",
]
