"""The topic index: one versioned document listing every topic name, so listing topics needs no LIST.

``catalog/topics/{seq:020d}.json`` holds ``{"format": 1, "names": [...]}`` plus the commit fields, committed
with the same put-if-absent protocol as manifests. Finding the latest version probes from the cached
sequence (one GET that answers 404 in steady state). A name is added *before* its topic document is
created and removed *after* the topic is deleted, so a crash in between only leaves a name whose
document is missing or deleted, which readers skip.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from s3stream.base.clock import Clock
from s3stream.base.errors import CorruptData, InternalError
from s3stream.base.ids import IdSource
from s3stream.manifest.versioned import VersionedStore
from s3stream.objectstore.protocol import ObjectStore

__all__ = ["TOPIC_INDEX_PREFIX", "TopicIndex", "topic_index_store"]

TOPIC_INDEX_PREFIX = "catalog/topics/"
TOPIC_INDEX_FORMAT = 1


@dataclass(frozen=True, slots=True)
class TopicIndex:
    names: tuple[str, ...] = ()
    format: int = TOPIC_INDEX_FORMAT
    seq: int = 0
    parent_seq: int | None = None
    commit_id: str = ""
    committed_at_ms: int = 0

    def with_name(self, name: str) -> TopicIndex | None:
        return None if name in self.names else dataclasses.replace(self, names=tuple(sorted({*self.names, name})))

    def without_name(self, name: str) -> TopicIndex | None:
        if name not in self.names:
            return None
        return dataclasses.replace(self, names=tuple(n for n in self.names if n != name))


class TopicIndexCodec:
    """:class:`~s3stream.manifest.versioned.DocCodec` of the topic index."""

    def encode(self, doc: TopicIndex) -> bytes:
        body = {"format": doc.format, "names": list(doc.names), "seq": doc.seq, "parent_seq": doc.parent_seq,
                "commit_id": doc.commit_id, "committed_at_ms": doc.committed_at_ms}
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    def decode(self, data: bytes, *, source: str) -> TopicIndex:
        try:
            obj = json.loads(data)
            if not isinstance(obj, dict) or obj.get("format") != TOPIC_INDEX_FORMAT:
                raise ValueError(f"unsupported format {obj.get('format') if isinstance(obj, dict) else None!r}")
            names = obj["names"]
            if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
                raise ValueError("names must be a list of non-empty strings")
            parent = obj["parent_seq"]
            doc = TopicIndex(tuple(names), TOPIC_INDEX_FORMAT, _int(obj["seq"]), None if parent is None else
                             _int(parent), str(obj["commit_id"]), _int(obj["committed_at_ms"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptData(f"invalid topic index: {exc}", source=source) from None
        return doc

    def seq(self, doc: TopicIndex) -> int:
        return doc.seq

    def commit_id(self, doc: TopicIndex) -> str:
        return doc.commit_id

    def stamp(self, doc: TopicIndex, *, seq: int, parent_seq: int | None, commit_id: str,
              now_ms: int) -> TopicIndex:
        return dataclasses.replace(doc, seq=seq, parent_seq=parent_seq, commit_id=commit_id,
                                   committed_at_ms=now_ms)

    def validate(self, doc: TopicIndex) -> None:
        if list(doc.names) != sorted(set(doc.names)):
            raise InternalError("topic index names must be sorted and unique")


def _int(value: object) -> int:
    if type(value) is not int:
        raise ValueError(f"expected an integer, got {value!r}")
    return value


def _key(seq: int) -> str:
    return f"{TOPIC_INDEX_PREFIX}{seq:020d}.json"


def topic_index_store(store: ObjectStore, *, clock: Clock, ids: IdSource) -> VersionedStore[TopicIndex]:
    """The versioned topic index of a store."""
    return VersionedStore(store, key_for_seq=_key, prefix=TOPIC_INDEX_PREFIX, codec=TopicIndexCodec(), clock=clock,
                          ids=ids)
