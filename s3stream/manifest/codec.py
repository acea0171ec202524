"""Manifest <-> bytes: compact, canonical JSON with strict validation on the way in.

Format 1 (the golden file ``tests/manifest/golden/manifest_v1.json`` pins it): one JSON object with
sorted keys and no whitespace. Every field of :class:`~s3stream.manifest.model.Manifest` is present
under its Python name; nested values (``writer``, ``cleaner``, ``wal``, each entry of ``segments`` and
``removed``) are objects with their dataclass field names; ``attributes`` is an object of strings.
``producers`` (the idempotent producers' snapshot, :meth:`ProducerSnapshot.to_json
<s3stream.base.producer.ProducerSnapshot.to_json>`) is written only when set, so manifests of partitions
without idempotent producers keep their bytes.

Decoding trusts nothing: the bytes must be UTF-8 JSON without duplicate keys or NaN, every field must
be present with its exact type (a JSON ``true`` is not an int), integers must fit in a signed 64-bit
offset, unknown fields are rejected (a rewrite would silently drop them), and the result must pass
:func:`~s3stream.manifest.model.check_invariants`. A ``format`` newer than :data:`MANIFEST_FORMAT` is
refused with a message saying so. Every failure is :class:`~s3stream.base.errors.CorruptData` naming the
source, never a KeyError or TypeError.

The JSON helpers (:func:`loads_object`, :class:`Fields`) are shared with the topic document codec;
:class:`ManifestDocCodec` adapts this codec to the commit protocol of one partition.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, NoReturn

from s3stream.base.errors import CorruptData, InternalError
from s3stream.base.producer import ProducerSnapshot
from s3stream.manifest.model import (
    Epoch,
    FrozenMap,
    Manifest,
    RemovedObject,
    SegmentRef,
    WalCursor,
    check_invariants,
)

__all__ = [
    "MANIFEST_FORMAT",
    "FieldError",
    "Fields",
    "ManifestDocCodec",
    "check_format",
    "decode_manifest",
    "dumps_canonical",
    "encode_manifest",
    "field_error_to_corrupt",
    "loads_object",
]

#: The newest manifest format this code reads and the one it writes.
MANIFEST_FORMAT = 1

_INT_MIN = -(2**63)
_INT_MAX = 2**63 - 1


class FieldError(Exception):
    """A field failed validation; decoders turn it into CorruptData naming the source."""


def dumps_canonical(obj: Mapping[str, Any]) -> bytes:
    """The canonical form: sorted keys, no whitespace, UTF-8, no NaN."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def loads_object(data: bytes, *, source: str, what: str) -> dict[str, Any]:
    """Parse ``data`` as one JSON object; any malformed input raises CorruptData naming ``source``."""
    try:
        obj = json.loads(bytes(data).decode("utf-8"), object_pairs_hook=_no_duplicates,
                         parse_constant=_no_constants)
    except (ValueError, RecursionError, FieldError) as exc:  # UnicodeDecodeError is a ValueError
        raise CorruptData(f"{what} is not valid JSON: {exc}", source=source) from exc
    if not isinstance(obj, dict):
        raise CorruptData(f"{what} is not a JSON object", source=source)
    return obj


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise FieldError(f"duplicate key {k!r}")
        out[k] = v
    return out


def _no_constants(name: str) -> NoReturn:
    raise FieldError(f"non-finite number {name}")


def _encodable(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8: JSON's ``\\ud800`` escape decodes to a lone surrogate, which
    no UTF-8 byte string holds (the next encode of the document, or the key reaching a store, would fail)."""
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


class Fields:
    """Typed, exhaustive access to one decoded JSON object: each getter checks presence and type."""

    def __init__(self, obj: object, where: str) -> None:
        if not isinstance(obj, dict):
            raise FieldError(f"{where} must be an object")
        self._obj: dict[str, Any] = obj
        self._where = where
        self._used: set[str] = set()

    def _get(self, name: str) -> Any:
        if name not in self._obj:
            raise FieldError(f"{self._where}: missing field {name!r}")
        self._used.add(name)
        return self._obj[name]

    def integer(self, name: str, *, minimum: int = _INT_MIN, maximum: int = _INT_MAX) -> int:
        value = self._get(name)
        if type(value) is not int:  # bool is a subclass of int: exclude it
            raise FieldError(f"{self._where}.{name} must be an integer")
        if not minimum <= value <= maximum:
            raise FieldError(f"{self._where}.{name}={value} is outside [{minimum}, {maximum}]")
        return value

    def opt_integer(self, name: str, *, minimum: int = _INT_MIN) -> int | None:
        return None if self._get(name) is None else self.integer(name, minimum=minimum)

    def text(self, name: str, *, allow_empty: bool = True) -> str:
        value = self._get(name)
        if not isinstance(value, str) or (not allow_empty and not value):
            raise FieldError(f"{self._where}.{name} must be a{'' if allow_empty else ' non-empty'} string")
        if not _encodable(value):
            raise FieldError(f"{self._where}.{name} is not valid Unicode (a lone surrogate)")
        return value

    def flag(self, name: str) -> bool:
        value = self._get(name)
        if not isinstance(value, bool):
            raise FieldError(f"{self._where}.{name} must be a boolean")
        return value

    def array(self, name: str) -> list[Any]:
        value = self._get(name)
        if not isinstance(value, list):
            raise FieldError(f"{self._where}.{name} must be an array")
        return value

    def has(self, name: str) -> bool:
        """Whether an optional field is present."""
        return name in self._obj

    def raw(self, name: str) -> Any:
        return self._get(name)

    def text_map(self, name: str) -> dict[str, str]:
        value = self._get(name)
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise FieldError(f"{self._where}.{name} must be an object of strings")
        if not all(_encodable(k) and _encodable(v) for k, v in value.items()):
            raise FieldError(f"{self._where}.{name} holds a string that is not valid Unicode (a lone surrogate)")
        return value

    def finish(self) -> None:
        """Reject fields this version does not know (rewriting would silently drop them)."""
        unknown = sorted(set(self._obj) - self._used)
        if unknown:
            raise FieldError(f"{self._where}: unknown fields {unknown}")


def check_format(fields: Fields, *, what: str, newest: int, source: str) -> int:
    """Read ``format`` first, so a newer document gets the 'newer' message, not a field error."""
    try:
        version = fields.integer("format", minimum=1)
    except FieldError as exc:
        raise CorruptData(str(exc), source=source) from exc
    if version > newest:
        raise CorruptData(f"{what} format {version} is newer than this s3stream supports (max {newest})",
                          source=source)
    return version


def field_error_to_corrupt(exc: FieldError, *, what: str, source: str) -> CorruptData:
    """The CorruptData to raise for a field error."""
    return CorruptData(f"malformed {what}: {exc}", source=source)


# --- encode -------------------------------------------------------------------------------------


def _epoch_to_json(e: Epoch | None) -> dict[str, Any] | None:
    return None if e is None else {"epoch": e.epoch, "owner": e.owner}


def _segment_to_json(s: SegmentRef) -> dict[str, Any]:
    out = {
        "key": s.key, "base_offset": s.base_offset, "last_offset": s.last_offset,
        "size_bytes": s.size_bytes, "object_size": s.object_size, "record_count": s.record_count,
        "max_timestamp": s.max_timestamp, "first_batch_max_timestamp": s.first_batch_max_timestamp,
        "created_ms": s.created_ms, "crc32c": s.crc32c, "added_seq": s.added_seq, "cleaned": s.cleaned,
    }
    if s.offset_delta:
        out["offset_delta"] = s.offset_delta  # written only when set, so ordinary manifests keep their bytes
    return out


def encode_manifest(m: Manifest) -> bytes:
    """The canonical JSON bytes of ``m`` (format :data:`MANIFEST_FORMAT`)."""
    doc: dict[str, Any] = {
        "format": m.format, "topic": m.topic, "topic_id": m.topic_id, "partition": m.partition,
        "seq": m.seq, "parent_seq": m.parent_seq, "commit_id": m.commit_id,
        "committed_at_ms": m.committed_at_ms,
        "writer": _epoch_to_json(m.writer), "cleaner": _epoch_to_json(m.cleaner),
        "log_start_offset": m.log_start_offset, "next_offset": m.next_offset,
        "segments": [_segment_to_json(s) for s in m.segments],
        "wal": None if m.wal is None else {"node_id": m.wal.node_id, "from_seq": m.wal.from_seq},
        "removed": [{"key": r.key, "removed_at_ms": r.removed_at_ms, "removed_seq": r.removed_seq}
                    for r in m.removed],
        "cleaner_checkpoint": m.cleaner_checkpoint,
        "attributes": dict(m.attributes),
    }
    if m.producers is not None:
        doc["producers"] = m.producers.to_json()
    return dumps_canonical(doc)


# --- decode -------------------------------------------------------------------------------------


def decode_manifest(data: bytes, *, source: str) -> Manifest:
    """Parse and validate manifest bytes read from ``source``; raise CorruptData on any defect."""
    f = Fields(loads_object(data, source=source, what="manifest"), "manifest")
    version = check_format(f, what="manifest", newest=MANIFEST_FORMAT, source=source)
    try:
        m = _manifest_from_fields(f, version, source)
    except FieldError as exc:
        raise field_error_to_corrupt(exc, what="manifest", source=source) from exc
    check_invariants(m, source=source)
    return m


def _manifest_from_fields(f: Fields, version: int, source: str) -> Manifest:
    m = Manifest(
        format=version,
        topic=f.text("topic"), topic_id=f.text("topic_id", allow_empty=False),
        partition=f.integer("partition", minimum=0),
        seq=f.integer("seq", minimum=0), parent_seq=f.opt_integer("parent_seq", minimum=0),
        commit_id=f.text("commit_id"), committed_at_ms=f.integer("committed_at_ms"),
        writer=_epoch_from(f.raw("writer"), "writer"), cleaner=_epoch_from(f.raw("cleaner"), "cleaner"),
        log_start_offset=f.integer("log_start_offset", minimum=0),
        next_offset=f.integer("next_offset", minimum=0),
        segments=tuple(_segment_from(s, i) for i, s in enumerate(f.array("segments"))),
        wal=_wal_from(f.raw("wal")),
        removed=tuple(_removed_from(r, i) for i, r in enumerate(f.array("removed"))),
        cleaner_checkpoint=f.opt_integer("cleaner_checkpoint", minimum=0),
        attributes=FrozenMap(f.text_map("attributes")),
        producers=ProducerSnapshot.from_json(f.raw("producers"), source=source) if f.has("producers") else None,
    )
    f.finish()
    return m


def _epoch_from(obj: object, where: str) -> Epoch | None:
    if obj is None:
        return None
    f = Fields(obj, where)
    e = Epoch(epoch=f.integer("epoch", minimum=1), owner=f.text("owner", allow_empty=False))
    f.finish()
    return e


def _wal_from(obj: object) -> WalCursor | None:
    if obj is None:
        return None
    f = Fields(obj, "wal")
    w = WalCursor(node_id=f.text("node_id", allow_empty=False), from_seq=f.integer("from_seq", minimum=0))
    f.finish()
    return w


def _segment_from(obj: object, i: int) -> SegmentRef:
    f = Fields(obj, f"segments[{i}]")
    s = SegmentRef(
        key=f.text("key", allow_empty=False),
        base_offset=f.integer("base_offset", minimum=0), last_offset=f.integer("last_offset", minimum=0),
        size_bytes=f.integer("size_bytes", minimum=0), object_size=f.integer("object_size", minimum=0),
        record_count=f.integer("record_count", minimum=0),
        max_timestamp=f.integer("max_timestamp", minimum=-1),
        first_batch_max_timestamp=f.integer("first_batch_max_timestamp", minimum=-1),
        created_ms=f.integer("created_ms"), crc32c=f.integer("crc32c", minimum=0, maximum=2**32 - 1),
        added_seq=f.integer("added_seq", minimum=0), cleaned=f.flag("cleaned"),
        offset_delta=f.integer("offset_delta", minimum=0) if f.has("offset_delta") else 0,
    )
    f.finish()
    return s


def _removed_from(obj: object, i: int) -> RemovedObject:
    f = Fields(obj, f"removed[{i}]")
    r = RemovedObject(key=f.text("key", allow_empty=False), removed_at_ms=f.integer("removed_at_ms"),
                      removed_seq=f.integer("removed_seq", minimum=0))
    f.finish()
    return r


class ManifestDocCodec:
    """The ``DocCodec`` of one partition's manifests; decode also checks they belong to it."""

    def __init__(self, topic_id: str, partition: int) -> None:
        self._topic_id = topic_id
        self._partition = partition

    def encode(self, doc: Manifest) -> bytes:
        return encode_manifest(doc)

    def decode(self, data: bytes, *, source: str) -> Manifest:
        m = decode_manifest(data, source=source)
        if (m.topic_id, m.partition) != (self._topic_id, self._partition):
            raise CorruptData(f"manifest of {m.topic_id}/{m.partition} stored under "
                              f"{self._topic_id}/{self._partition}", source=source)
        return m

    def seq(self, doc: Manifest) -> int:
        return doc.seq

    def commit_id(self, doc: Manifest) -> str:
        return doc.commit_id

    def stamp(self, doc: Manifest, *, seq: int, parent_seq: int | None, commit_id: str,
              now_ms: int) -> Manifest:
        return dataclasses.replace(doc, format=MANIFEST_FORMAT, seq=seq, parent_seq=parent_seq,
                                   commit_id=commit_id, committed_at_ms=now_ms)

    def validate(self, doc: Manifest) -> None:
        if (doc.topic_id, doc.partition) != (self._topic_id, self._partition):
            raise InternalError(f"refusing to commit a manifest of {doc.topic_id}/{doc.partition} "
                                f"under {self._topic_id}/{self._partition}")
        try:
            check_invariants(doc)
        except CorruptData as exc:
            raise InternalError(f"refusing to commit an invalid manifest: {exc}") from exc
