"""Kafka's own binary key/value schemas for the records of ``__consumer_offsets``, so Kafka tooling reads them.

Keys start with an int16 record type (Kafka's legacy "key version"): 0 and 1 are an ``OffsetCommitKey``
(group, topic, partition), 2 a ``GroupMetadataKey`` (group). Values carry their own int16 version:
``OffsetCommitValue`` 0-4 (4 is flexible) and ``GroupMetadataValue`` 0-4 (4 is flexible). We write key 1 and
value 3 (value 1 when the commit has an explicit expiry), group key 2 and value 3, as Kafka's classic
coordinator does. A null value is a tombstone. Bytes read back are checked: a truncated field, trailing
bytes or a type/version this module cannot read is :class:`~s3stream.base.errors.CorruptData`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from s3stream.base.errors import CorruptData

__all__ = [
    "GroupMetadataRecord",
    "MemberRecord",
    "OffsetCommitRecord",
    "OffsetKey",
    "decode_group_metadata",
    "decode_key",
    "decode_offset_commit",
    "encode_group_metadata",
    "encode_group_metadata_key",
    "encode_offset_commit",
    "encode_offset_key",
]

_SOURCE = "__consumer_offsets"
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class OffsetKey:
    """A decoded key: ``topic`` is None for a group metadata key."""

    group: str
    topic: str | None = None
    partition: int = -1


@dataclass(frozen=True, slots=True)
class OffsetCommitRecord:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class MemberRecord:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataRecord:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberRecord, ...]


# -- writing ---------------------------------------------------------------------------------------


class _Writer:
    def __init__(self) -> None:
        self.buf = bytearray()

    def i16(self, v: int) -> None:
        self.buf += _I16.pack(v)

    def i32(self, v: int) -> None:
        self.buf += _I32.pack(v)

    def i64(self, v: int) -> None:
        self.buf += _I64.pack(v)

    def string(self, v: str | None) -> None:
        if v is None:
            self.i16(-1)
            return
        data = v.encode()
        if len(data) > 0x7FFF:
            raise CorruptData(f"a string of {len(data)} bytes does not fit an int16 length", source=_SOURCE)
        self.i16(len(data))
        self.buf += data

    def bytes_(self, v: bytes) -> None:
        self.i32(len(v))
        self.buf += v


def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    w = _Writer()
    w.i16(1)
    w.string(group)
    w.string(topic)
    w.i32(partition)
    return bytes(w.buf)


def encode_group_metadata_key(group: str) -> bytes:
    w = _Writer()
    w.i16(2)
    w.string(group)
    return bytes(w.buf)


def encode_offset_commit(rec: OffsetCommitRecord) -> bytes:
    """Value version 1 when the commit carries an explicit expiry (OffsetCommit v2-v4), else version 3."""
    w = _Writer()
    if rec.expire_timestamp >= 0:
        w.i16(1)
        w.i64(rec.offset)
        w.string(rec.metadata)
        w.i64(rec.commit_timestamp)
        w.i64(rec.expire_timestamp)
    else:
        w.i16(3)
        w.i64(rec.offset)
        w.i32(rec.leader_epoch)
        w.string(rec.metadata)
        w.i64(rec.commit_timestamp)
    return bytes(w.buf)


def encode_group_metadata(rec: GroupMetadataRecord) -> bytes:
    """Value version 3 (non-flexible, with group instance ids)."""
    w = _Writer()
    w.i16(3)
    w.string(rec.protocol_type)
    w.i32(rec.generation)
    w.string(rec.protocol)
    w.string(rec.leader)
    w.i64(rec.current_state_timestamp)
    w.i32(len(rec.members))
    for m in rec.members:
        w.string(m.member_id)
        w.string(m.instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        w.i32(m.rebalance_timeout_ms)
        w.i32(m.session_timeout_ms)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
    return bytes(w.buf)


# -- reading ---------------------------------------------------------------------------------------


class Reader:
    """A bounds-checked cursor over untrusted bytes; ``flexible`` selects compact strings and tagged fields."""

    def __init__(self, data: bytes, what: str, *, flexible: bool = False) -> None:
        self.data = data
        self.pos = 0
        self.what = what
        self.flexible = flexible

    def fail(self, message: str) -> CorruptData:
        return CorruptData(f"{self.what}: {message} (at byte {self.pos} of {len(self.data)})", source=_SOURCE)

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise self.fail(f"truncated: {n} bytes wanted")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def i16(self) -> int:
        return int(_I16.unpack(self.take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self.take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self.take(8))[0])

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            (byte,) = self.take(1)
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise self.fail("varint longer than 5 bytes")

    def _length(self, nullable: bool, *, wide: bool = False) -> int | None:
        n = self.uvarint() - 1 if self.flexible else (self.i32() if wide else self.i16())
        if n < 0:
            if n == -1 and nullable:
                return None
            raise self.fail(f"length {n}")
        return n

    def nullable_string(self) -> str | None:
        n = self._length(True)
        if n is None:
            return None
        try:
            return self.take(n).decode()
        except UnicodeDecodeError as exc:
            raise self.fail(f"invalid UTF-8 ({exc.reason})") from None

    def string(self) -> str:
        out = self.nullable_string()
        if out is None:
            raise self.fail("null where a string is required")
        return out

    def bytes_(self) -> bytes:
        n = self._length(False, wide=True)
        assert n is not None
        return self.take(n)

    def array_length(self) -> int:
        n = self._length(False, wide=True)
        assert n is not None
        if n > len(self.data) - self.pos:  # every element takes at least one byte
            raise self.fail(f"array of {n} elements")
        return n

    def tagged_fields(self) -> None:
        """Skip a tagged-field section (flexible versions only): this module needs none of the tags."""
        if not self.flexible:
            return
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())

    def end(self) -> None:
        if self.pos != len(self.data):
            raise self.fail(f"{len(self.data) - self.pos} trailing bytes")


def decode_key(data: bytes) -> OffsetKey:
    r = Reader(data, "record key")
    kind = r.i16()
    if kind in (0, 1):
        key = OffsetKey(r.string(), r.string(), r.i32())
    elif kind == 2:
        key = OffsetKey(r.string())
    else:
        raise r.fail(f"record type {kind} is not an offset commit (0, 1) or group metadata (2) key")
    r.end()
    return key


def decode_offset_commit(data: bytes) -> OffsetCommitRecord:
    r = Reader(data, "OffsetCommitValue")
    version = r.i16()
    if not 0 <= version <= 4:
        raise r.fail(f"unsupported version {version}")
    r.flexible = version >= 4
    offset = r.i64()
    epoch = r.i32() if version >= 3 else -1
    metadata = r.string()
    commit_ts = r.i64()
    expire_ts = r.i64() if version == 1 else -1
    r.tagged_fields()
    r.end()
    return OffsetCommitRecord(offset, epoch, metadata, commit_ts, expire_ts)


def decode_group_metadata(data: bytes) -> GroupMetadataRecord:
    r = Reader(data, "GroupMetadataValue")
    version = r.i16()
    if not 0 <= version <= 4:
        raise r.fail(f"unsupported version {version}")
    r.flexible = version >= 4
    protocol_type = r.string()
    generation = r.i32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    state_ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.array_length()):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.i32() if version >= 1 else -1
        session_timeout = r.i32()
        subscription = r.bytes_()
        assignment = r.bytes_()
        r.tagged_fields()
        members.append(MemberRecord(member_id, instance_id, client_id, client_host,
                                    rebalance_timeout if rebalance_timeout >= 0 else session_timeout,
                                    session_timeout, subscription, assignment))
    r.tagged_fields()
    r.end()
    return GroupMetadataRecord(protocol_type, generation, protocol, leader, state_ts, tuple(members))
