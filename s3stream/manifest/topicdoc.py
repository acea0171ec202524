"""Topic documents: a topic's identity, partition count and config, versioned like manifests.

A topic document lives at ``layout.topic_meta_key(name, seq)`` and is committed with the same
put-if-absent protocol as partition manifests (:class:`~s3stream.manifest.versioned.VersionedStore`),
so creating a topic, changing its config, adding partitions and deleting it are all atomic edits.

Vocabulary: ``name`` is the user-facing topic name; ``topic_id`` is the immutable identity that
partition logs are keyed by (``logs/{topic_id}/...``), so a topic deleted and re-created under the same
name never sees the old data. ``deleted`` marks a tombstoned topic (its logs are collected later).

Format 1 is canonical JSON (sorted keys, no whitespace) with every field present; decoding is as strict
as the manifest codec's: exact types, no unknown fields, CorruptData naming the source on any defect.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

from s3stream.base import layout
from s3stream.base.clock import Clock
from s3stream.base.crashpoints import CrashPoints
from s3stream.base.errors import CorruptData, InternalError
from s3stream.base.ids import IdSource
from s3stream.manifest.codec import (
    FieldError,
    Fields,
    check_format,
    dumps_canonical,
    field_error_to_corrupt,
    loads_object,
)
from s3stream.manifest.model import FrozenMap
from s3stream.manifest.versioned import VersionedStore
from s3stream.objectstore.protocol import ObjectStore

__all__ = [
    "TOPIC_DOC_FORMAT",
    "TopicDoc",
    "TopicDocCodec",
    "decode_topic_doc",
    "encode_topic_doc",
    "topic_store",
]

#: The newest topic document format this code reads and the one it writes.
TOPIC_DOC_FORMAT = 1


def _empty_config() -> Mapping[str, str]:
    return FrozenMap()


@dataclass(frozen=True, slots=True)
class TopicDoc:
    """One version of a topic's metadata (``config`` holds Kafka-named overrides as strings)."""

    name: str
    topic_id: str
    partitions: int
    config: Mapping[str, str] = field(default_factory=_empty_config)
    deleted: bool = False
    created_ms: int = 0
    seq: int = 0
    parent_seq: int | None = None
    commit_id: str = ""
    committed_at_ms: int = 0
    format: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.config, FrozenMap):
            object.__setattr__(self, "config", FrozenMap(self.config))


def _problem(doc: TopicDoc) -> str | None:
    if not doc.name or not doc.topic_id:
        return "name and topic_id must be non-empty"
    if doc.partitions < 1:
        return f"partitions {doc.partitions} < 1"
    if doc.seq < 0 or (doc.parent_seq is not None and not 0 <= doc.parent_seq < doc.seq):
        return f"bad seq {doc.seq} / parent_seq {doc.parent_seq}"
    return None


def encode_topic_doc(doc: TopicDoc) -> bytes:
    """The canonical JSON bytes of ``doc``."""
    return dumps_canonical({
        "format": doc.format, "name": doc.name, "topic_id": doc.topic_id, "partitions": doc.partitions,
        "config": dict(doc.config), "deleted": doc.deleted, "created_ms": doc.created_ms, "seq": doc.seq,
        "parent_seq": doc.parent_seq, "commit_id": doc.commit_id, "committed_at_ms": doc.committed_at_ms,
    })


def decode_topic_doc(data: bytes, *, source: str) -> TopicDoc:
    """Parse and validate topic document bytes read from ``source``; CorruptData on any defect."""
    f = Fields(loads_object(data, source=source, what="topic document"), "topic")
    version = check_format(f, what="topic document", newest=TOPIC_DOC_FORMAT, source=source)
    try:
        doc = TopicDoc(
            format=version, name=f.text("name", allow_empty=False),
            topic_id=f.text("topic_id", allow_empty=False), partitions=f.integer("partitions", minimum=1),
            config=FrozenMap(f.text_map("config")), deleted=f.flag("deleted"),
            created_ms=f.integer("created_ms"), seq=f.integer("seq", minimum=0),
            parent_seq=f.opt_integer("parent_seq", minimum=0), commit_id=f.text("commit_id"),
            committed_at_ms=f.integer("committed_at_ms"),
        )
        f.finish()
    except FieldError as exc:
        raise field_error_to_corrupt(exc, what="topic document", source=source) from exc
    problem = _problem(doc)
    if problem is not None:
        raise CorruptData(f"invalid topic document: {problem}", source=source)
    return doc


class TopicDocCodec:
    """:class:`~s3stream.manifest.versioned.DocCodec` of the documents of the topic ``name``."""

    def __init__(self, name: str) -> None:
        self._name = name

    def encode(self, doc: TopicDoc) -> bytes:
        return encode_topic_doc(doc)

    def decode(self, data: bytes, *, source: str) -> TopicDoc:
        doc = decode_topic_doc(data, source=source)
        if doc.name != self._name:
            raise CorruptData(f"topic document of {doc.name!r} stored under {self._name!r}", source=source)
        return doc

    def seq(self, doc: TopicDoc) -> int:
        return doc.seq

    def commit_id(self, doc: TopicDoc) -> str:
        return doc.commit_id

    def stamp(self, doc: TopicDoc, *, seq: int, parent_seq: int | None, commit_id: str,
              now_ms: int) -> TopicDoc:
        return dataclasses.replace(doc, format=TOPIC_DOC_FORMAT, seq=seq, parent_seq=parent_seq,
                                   commit_id=commit_id, committed_at_ms=now_ms)

    def validate(self, doc: TopicDoc) -> None:
        problem = _problem(doc)
        if problem is None and doc.name != self._name:
            problem = f"name {doc.name!r} != {self._name!r}"
        if problem is not None:
            raise InternalError(f"refusing to commit an invalid topic document: {problem}")


def topic_store(store: ObjectStore, name: str, clock: Clock, ids: IdSource, *,
                crash_points: CrashPoints | None = None,
                commit_timeout_s: float = 60.0) -> VersionedStore[TopicDoc]:
    """The versioned documents of topic ``name`` (``load_latest()`` is None for an unknown topic)."""
    return VersionedStore(store, key_for_seq=functools.partial(layout.topic_meta_key, name),
                          prefix=layout.topic_meta_prefix(name), codec=TopicDocCodec(name), clock=clock,
                          ids=ids, commit_timeout_s=commit_timeout_s, crash_points=crash_points)
