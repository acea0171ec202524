"""Inspect one stored object (a segment ``.parquet`` or a WAL object ``.wal``) and verify every checksum.

This is the engine of ``s3stream dump`` (Kafka's ``DumpLogSegments``): it reads the object's bytes once,
decodes it with the same strict decoders the store uses, and returns an :class:`ObjectReport`: the
metadata, one row per row group (segment) or chunk (WAL object), the checks made, and the records.

Checks (each an :class:`Check`; ``ok=None`` means it could not be made):

* segment: footer CRC32C and format version; each row group's CRC32C (format 2); Parquet page CRCs and
  every row group against the footer index; the whole-object CRC32C against the partition manifest that
  references it (when the object is in a store and its manifest is readable).
* WAL object: trailer, index CRC32C and index invariants; each chunk's CRC32C and its records against
  its index entry; the key's node id and sequence against the index.

Invariant: a failed check never stops the report (the rest is still shown); :attr:`ObjectReport.failed`
says whether the caller must exit non-zero. Bytes that cannot even be framed (no footer, no index) raise
:class:`~s3stream.base.errors.CorruptData` naming the source.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import crc32c
import pyarrow as pa

from s3stream.base import layout
from s3stream.base.clock import SystemClock
from s3stream.base.errors import CorruptData, InvalidRequest, S3StreamError
from s3stream.base.ids import IdSource
from s3stream.format.segment import SegmentReader
from s3stream.format.walobject import WAL_OBJECT_VERSION, WalObjectIndex, decode_chunk, read_wal_index
from s3stream.manifest.versioned import manifest_store
from s3stream.objectstore.protocol import ObjectStore

__all__ = ["Check", "ObjectReport", "inspect_object", "object_kind"]

_SEGMENT_MAGIC = b"PAR1"
_WAL_MAGIC = b"S3WO"


@dataclass(frozen=True, slots=True)
class Check:
    """One verification: what was checked, whether it passed (None: not possible), and details."""

    name: str
    ok: bool | None
    detail: str = ""


@dataclass(slots=True)
class ObjectReport:
    """What ``dump`` prints about one object."""

    kind: str  #: "segment" or "wal"
    source: str
    metadata: dict[str, Any]
    parts_title: str
    parts: list[dict[str, Any]] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    #: ``(fixed JSON fields, records)`` per part whose records decoded.
    records: list[tuple[dict[str, Any], pa.Table]] = field(default_factory=list)

    @property
    def failed(self) -> list[Check]:
        """The checks that failed."""
        return [c for c in self.checks if c.ok is False]


def object_kind(name: str, head: bytes, tail: bytes) -> str:
    """``segment`` or ``wal`` from the name's extension, else from the magic bytes; InvalidRequest if neither."""
    if name.endswith(".parquet") or (not name.endswith(".wal") and head[:4] == _SEGMENT_MAGIC):
        return "segment"
    if name.endswith(".wal") or tail[-4:] == _WAL_MAGIC:
        return "wal"
    raise InvalidRequest(f"{name}: not a segment (.parquet) or WAL object (.wal); "
                         "for manifests use 's3stream manifest show'")


def inspect_object(data: bytes, *, source: str, key: str | None = None,
                   objstore: ObjectStore | None = None) -> ObjectReport:
    """Decode and verify ``data`` read from ``source``.

    Args:
        data: the whole object.
        source: where it came from (for messages).
        key: its key in ``objstore``, when it was read from a store (enables the manifest check).
        objstore: the store holding it.

    Raises:
        InvalidRequest: the object is neither a segment nor a WAL object.
        CorruptData: the object cannot be framed at all (no valid footer or index).
    """
    kind = object_kind(key or source, data[:4], data[-4:])
    if kind == "segment":
        return _inspect_segment(data, source, key, objstore)
    return _inspect_wal(data, source, key)


def _fetcher(data: bytes) -> Callable[[int, int], bytes]:
    return lambda start, end: data[start:end]


# ----------------------------------------------------------------------------------------------- segment


def _inspect_segment(data: bytes, source: str, key: str | None, objstore: ObjectStore | None) -> ObjectReport:
    reader = SegmentReader(_fetcher(data), len(data), source=source)
    footer = reader.footer  # footer CRC32C, version and index consistency; raises CorruptData
    object_crc = crc32c.crc32c(data)
    report = ObjectReport("segment", source, {
        "format version": footer.version, "object size": len(data), "object crc32c": object_crc,
        "base offset": footer.base_offset, "last offset": footer.last_offset,
        "record count": footer.record_count, "size bytes (logical)": footer.size_bytes,
        "min timestamp": footer.min_timestamp, "max timestamp": footer.max_timestamp,
        "first batch max timestamp": footer.first_batch_max_timestamp, "row groups": len(footer.row_groups),
    }, "row groups")
    report.checks.append(Check("footer crc32c + format version", True))
    for i, g in enumerate(footer.row_groups):
        report.parts.append({"#": i, "first offset": g.first_offset, "last offset": g.last_offset,
                             "records": g.num_rows, "bytes": f"[{g.byte_start}, {g.byte_end})",
                             "size bytes": g.size_bytes, "min ts": g.min_timestamp, "max ts": g.max_timestamp,
                             "no key": _unknown(g.unkeyed), "tombstones": _unknown(g.tombstones)})
    if footer.version >= 2:  # format 2 keeps each row group's CRC32C in the footer index
        bad = [i for i, g in enumerate(footer.row_groups)
               if crc32c.crc32c(memoryview(data)[g.byte_start:g.byte_end]) != g.crc32c]
        report.checks.append(Check("row-group crc32cs (footer index)", not bad,
                                   f"row groups {bad} differ" if bad else f"{len(footer.row_groups)} row groups"))
    try:
        table = reader.read_all()
    except CorruptData as exc:
        report.checks.append(Check("page crcs + row groups vs footer index", False, str(exc)))
    else:
        report.checks.append(Check("page crcs + row groups vs footer index", True,
                                   f"{table.num_rows} records in {len(footer.row_groups)} row groups"))
        where = _segment_location(key)
        report.records.append((_log_fields(f"{where[0]}/{where[1]}") if where else {}, table))
    report.checks.append(_manifest_check(key, objstore, object_crc, len(data)))
    return report


def _unknown(count: int | None) -> int | str:
    """A footer-index count, or "-" for a format-1 segment that did not record it."""
    return "-" if count is None else count


def _segment_location(key: str | None) -> tuple[str, int] | None:
    """``(topic_id, partition)`` of a segment key (``logs/{topic_id}/{partition}/segments/...``)."""
    parts = (key or "").split("/")
    if len(parts) == 5 and parts[0] == "logs" and parts[3] == "segments" and parts[2].isdigit():
        return parts[1], int(parts[2])
    return None


def _log_fields(log_id: str) -> dict[str, Any]:
    """The JSON fields naming a record's log: ``log`` and, when the id ends in one, ``partition``."""
    tail = log_id.rsplit("/", 1)[-1]
    return {"log": log_id, "partition": int(tail)} if tail.isdigit() else {"log": log_id}


def _manifest_check(key: str | None, objstore: ObjectStore | None, object_crc: int, object_size: int) -> Check:
    """Compare the object's CRC32C with the one its partition manifest recorded."""
    name = "object crc32c vs manifest"
    where = _segment_location(key)
    if objstore is None or where is None:
        return Check(name, None, "not read from a store: no manifest to compare with")
    mstore = manifest_store(objstore, topic="", topic_id=where[0], partition=where[1], clock=SystemClock(),
                            ids=IdSource())
    try:
        manifest = mstore.load_latest()
    except S3StreamError as exc:
        return Check(name, False, f"cannot read the partition manifest: {exc}")
    if manifest is None:
        return Check(name, None, "the partition has no manifest")
    ref = next((s for s in manifest.segments if s.key == key), None)
    if ref is None:
        removed = next((r for r in manifest.removed if r.key == key), None)
        state = (f"removed at manifest seq {removed.removed_seq}, awaiting GC" if removed
                 else "not referenced by the latest manifest (an orphan, or removed and forgotten)")
        return Check(name, None, f"{state} (manifest seq {manifest.seq})")
    if (ref.crc32c, ref.object_size) != (object_crc, object_size):
        return Check(name, False, f"manifest seq {manifest.seq} says crc32c {ref.crc32c} and {ref.object_size} "
                                  f"bytes; the object has crc32c {object_crc} and {object_size} bytes")
    return Check(name, True, f"matches manifest seq {manifest.seq}")


# ------------------------------------------------------------------------------------------------- WAL


def _inspect_wal(data: bytes, source: str, key: str | None) -> ObjectReport:
    index = read_wal_index(_fetcher(data), len(data), source=source)  # trailer + index CRC; CorruptData
    report = ObjectReport("wal", source, {
        "format version": WAL_OBJECT_VERSION, "object size": len(data), "node id": index.node_id,
        "seq": index.seq, "created ms": index.created_ms, "fence": index.fence, "chunks": len(index.chunks),
        "records": sum(c.record_count for c in index.chunks),
    }, "chunks")
    report.checks.append(Check("trailer + index crc32c + index invariants", True))
    report.checks.append(_key_check(key, index))
    bad: list[str] = []
    for c in index.chunks:
        row: dict[str, Any] = {"log": c.log_id, "base offset": c.base_offset, "last offset": c.last_offset,
                               "records": c.record_count, "size bytes": c.size_bytes,
                               "bytes": f"[{c.byte_start}, {c.byte_end})", "crc32c": c.crc32c,
                               "rolls": ",".join(map(str, c.roll_offsets)) or "-"}
        try:
            batch = decode_chunk(data[c.byte_start:c.byte_end], c, source=source)
        except CorruptData as exc:
            bad.append(f"{c.log_id}: {str(exc).removeprefix(source + ': ')}")
            row["status"] = "CORRUPT"
        else:
            row["status"] = "ok"
            report.records.append((_log_fields(c.log_id), pa.Table.from_batches([batch])))
        report.parts.append(row)
    n = len(index.chunks)
    detail = f"{n - len(bad)} of {n} chunks ok" + (f"; corrupt: {'; '.join(bad)}" if bad else "")
    report.checks.append(Check("chunk crc32c + records vs index", not bad if n else None, detail))
    return report


def _key_check(key: str | None, index: WalObjectIndex) -> Check:
    name = "key matches index (node id, seq)"
    parsed = layout.parse_wal_key(key) if key else None
    if parsed is None:
        return Check(name, None, "not a WAL object key")
    if parsed != (index.node_id, index.seq):
        return Check(name, False, f"key names {parsed[0]} seq {parsed[1]}, index says {index.node_id} seq "
                                  f"{index.seq}")
    return Check(name, True)
