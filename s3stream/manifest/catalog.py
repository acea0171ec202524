"""Topics: create, describe, alter, delete, list — each a versioned topic document in the bucket.

A topic is ``topics/{name}/meta/{seq}.json`` documents committed with the manifest protocol; the topic
index (``catalog/topics/{seq}.json``, :mod:`s3stream.manifest.topicindex`) lists every name ever created so
listing topics is a probe, not a LIST. Its
partitions' data lives under ``logs/{topic_id}/``; the id is new each time a name is (re)created, so a
re-created topic never sees the old one's data. Deleting a topic commits a ``deleted`` version; the
data becomes garbage that GC removes after ``file.delete.delay.ms``.

Documents are cached per process and re-read after ``refresh_s`` so that config changes made by other
processes take effect at the next pass (retention, cleaning) without a restart.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import replace

from s3stream.base.clock import Clock
from s3stream.base.errors import (
    InvalidArgument,
    InvalidPartitions,
    ObjectStoreError,
    StoreAccessError,
    TopicExists,
    UnknownTopic,
)
from s3stream.base.ids import IdSource
from s3stream.base.topic_config import (
    TopicConfig,
    alter_topic_config,
    effective_topic_config,
    normalize_topic_config,
    topic_collision_name,
    validate_topic_name,
)
from s3stream.manifest.topicdoc import TopicDoc, topic_store
from s3stream.manifest.topicindex import TopicIndex, topic_index_store
from s3stream.manifest.versioned import VersionedStore
from s3stream.objectstore.protocol import ObjectStore

__all__ = ["TopicCatalog"]

MAX_PARTITIONS = 100_000


class TopicCatalog:
    """The topics of one store (thread-safe)."""

    def __init__(self, store: ObjectStore, *, clock: Clock, ids: IdSource,
                 default_config: Mapping[str, str] | None = None, refresh_s: float = 10.0) -> None:
        self._store = store
        self._clock = clock
        self._ids = ids
        self._defaults = dict(default_config or {})
        self._refresh_s = refresh_s
        self._lock = threading.Lock()
        self._docs: dict[str, tuple[TopicDoc | None, float]] = {}
        self._vstores: dict[str, VersionedStore[TopicDoc]] = {}
        self._configs: dict[str, tuple[TopicDoc, TopicConfig]] = {}  # by the document it was parsed from
        self._index: VersionedStore[TopicIndex] = topic_index_store(store, clock=clock, ids=ids)

    def versions(self, name: str) -> VersionedStore[TopicDoc]:
        """The versioned documents of ``name``; InvalidTopic for a name Kafka's rules refuse (checked
        before the name reaches a cache: a list or dict there would be a TypeError)."""
        validate_topic_name(name)
        with self._lock:
            vs = self._vstores.get(name)
            if vs is None:
                vs = topic_store(self._store, name, clock=self._clock, ids=self._ids)
                self._vstores[name] = vs
            return vs

    def _remember(self, name: str, doc: TopicDoc | None) -> None:
        with self._lock:
            self._docs[name] = (doc, self._clock.monotonic())

    def load(self, name: str, *, refresh: bool = False) -> TopicDoc | None:
        """The latest document of ``name`` (deleted ones included), or None; InvalidTopic for an invalid name."""
        validate_topic_name(name)
        with self._lock:
            hit = self._docs.get(name)
        if hit is not None and not refresh and self._clock.monotonic() - hit[1] < self._refresh_s:
            return hit[0]
        try:
            doc = self.versions(name).load_latest()
        except (ObjectStoreError, StoreAccessError):
            if hit is None or refresh:
                raise
            # an unreachable store must not fail appends that the local WAL can acknowledge: keep the
            # cached document (a periodic refresh, not an explicit one) and try again after refresh_s
            self._remember(name, hit[0])
            return hit[0]
        self._remember(name, doc)
        return doc

    def get(self, name: str, *, refresh: bool = False) -> TopicDoc:
        """The live topic ``name``; UnknownTopic when it does not exist or was deleted."""
        doc = self.load(name, refresh=refresh)
        if doc is None or doc.deleted:
            raise UnknownTopic(f"unknown topic {name!r}")
        return doc

    def config(self, name: str, *, refresh: bool = False) -> TopicConfig:
        """The topic's parsed config: parsed once per document (a Kafka server asks on every produce)."""
        doc = self.get(name, refresh=refresh)
        hit = self._configs.get(name)
        if hit is not None and hit[0] is doc:
            return hit[1]
        cfg = TopicConfig.from_overrides(doc.config)
        self._configs[name] = (doc, cfg)
        return cfg

    def effective_config(self, name: str) -> dict[str, str]:
        return effective_topic_config(self.get(name, refresh=True).config)

    def create(self, name: str, partitions: int = 1, config: Mapping[str, object] | None = None) -> TopicDoc:
        """Create topic ``name``; TopicExists if a live topic has it (or a colliding name)."""
        validate_topic_name(name)
        value: object = partitions  # callers outside mypy may pass anything
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_PARTITIONS:
            raise InvalidPartitions(f"partitions must be an integer in [1, {MAX_PARTITIONS}], got {partitions!r}")
        overrides = normalize_topic_config({**self._defaults, **dict(config or {})})
        collision = topic_collision_name(name)
        for other in self.names():
            if other != name and topic_collision_name(other) == collision:
                raise TopicExists(f"topic {name!r} collides with existing topic {other!r} "
                                  "('.' and '_' are interchangeable in metric names)")
        now = self._clock.now_ms()
        topic_id = self._ids.ulid(now).lower()
        # the name goes into the index first: a crash before the document leaves a name readers skip
        self._index.commit(lambda cur: (cur or TopicIndex()).with_name(name))

        def intent(cur: TopicDoc | None) -> TopicDoc:
            if cur is not None and not cur.deleted:
                raise TopicExists(f"topic {name!r} already exists")
            return TopicDoc(name=name, topic_id=topic_id, partitions=partitions, config=overrides,
                            deleted=False, created_ms=now)

        doc = self.versions(name).commit(intent)
        assert doc is not None
        self._remember(name, doc)
        return doc

    def alter(self, name: str, updates: Mapping[str, object | None]) -> TopicDoc:
        """Change config overrides (a None value restores the default); validated as a whole."""
        def intent(cur: TopicDoc | None) -> TopicDoc | None:
            if cur is None or cur.deleted:
                raise UnknownTopic(f"unknown topic {name!r}")
            new_config = alter_topic_config(cur.config, updates)
            if dict(new_config) == dict(cur.config):
                return None
            return replace(cur, config=new_config)

        doc = self.versions(name).commit(intent)
        if doc is None or doc.deleted:
            raise UnknownTopic(f"unknown topic {name!r}")
        self._remember(name, doc)
        return doc

    def add_partitions(self, name: str, total: int) -> TopicDoc:
        """Grow topic ``name`` to ``total`` partitions (Kafka's CreatePartitions); never shrinks it.

        The existing partitions keep their data and offsets; the new ones start empty (a partition's manifest
        is created by its first commit). Raises UnknownTopic; InvalidArgument when ``total`` is not an int;
        InvalidPartitions when it is not more than the topic has or over ``MAX_PARTITIONS``.
        """
        value: object = total  # callers outside mypy may pass anything
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidArgument(f"the partition total must be an int, not {type(value).__name__} {value!r}")
        if total > MAX_PARTITIONS:
            raise InvalidPartitions(f"topic {name!r}: {total} partitions is more than the maximum {MAX_PARTITIONS}")

        def intent(cur: TopicDoc | None) -> TopicDoc:
            if cur is None or cur.deleted:
                raise UnknownTopic(f"unknown topic {name!r}")
            if total <= cur.partitions:
                raise InvalidPartitions(f"topic {name!r} has {cur.partitions} partitions: the new total {total} "
                                        "must be larger (partitions are never removed)")
            return replace(cur, partitions=total)

        doc = self.versions(name).commit(intent)
        assert doc is not None, f"internal: adding partitions to {name!r} committed no document"
        self._remember(name, doc)
        return doc

    def delete(self, name: str) -> TopicDoc:
        """Mark the topic deleted (its data is collected later)."""
        def intent(cur: TopicDoc | None) -> TopicDoc:
            if cur is None or cur.deleted:
                raise UnknownTopic(f"unknown topic {name!r}")
            return replace(cur, deleted=True)

        doc = self.versions(name).commit(intent)
        assert doc is not None
        self._remember(name, doc)
        return doc

    def names(self, *, include_deleted: bool = False, fresh: bool = True) -> list[str]:
        """Names of the live topics, sorted: from the topic index (a probe, no LIST in steady state).

        ``fresh`` reads every topic's document again to see which were deleted (a request per topic);
        without it, the ones read within ``refresh_s`` are taken as this process last saw them, as appends
        and reads take them (a Kafka server answering all-topics Metadata from a bucket of many topics).
        """
        index = self._index.load_latest()
        names: set[str] = set(index.names) if index is not None else set()
        if index is None:  # an empty store, or one written before the index existed: list the documents
            for entry in self._store.list("topics/"):
                parts = entry.key.split("/")
                if len(parts) == 4 and parts[2] == "meta":
                    names.add(parts[1])
        out = []
        for name in sorted(names):
            doc = self.load(name, refresh=fresh)
            if doc is not None and (include_deleted or not doc.deleted):
                out.append(name)
        return out

    def docs(self, *, include_deleted: bool = True) -> list[TopicDoc]:
        """Latest documents of every topic (for GC and describe)."""
        out = []
        for name in self.names(include_deleted=include_deleted):
            doc = self.load(name)
            if doc is not None:
                out.append(doc)
        return out
