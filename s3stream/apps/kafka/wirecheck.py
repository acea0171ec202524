"""Bounds-checking a request body before kio's native reader parses it.

kio's reader (Rust) reserves room for an array from the count it reads, before reading any element: a
forged count (five bytes of a frame) asks for hundreds of gigabytes, and a failed allocation aborts the
whole process, which no ``except`` catches. One malformed frame, even before SASL authentication, would
kill the server. So the body is first walked here along its schema: every count and length is checked
against the bytes left (each element takes at least one byte), and a frame that fails is
:class:`~s3stream.apps.kafka.wire.MalformedFrame` before kio sees it. Found by
``tests/fuzz/test_fuzz_kafka_request.py``.

The walk is the Kafka encoding: int16/int32 lengths and counts (-1 for null) in classic versions; unsigned
varints holding length + 1 (0 for null) and a tagged-field section after every struct in flexible versions.
Plans are built once per schema class.
"""

from __future__ import annotations

import dataclasses
import struct
import types
from collections.abc import Callable
from typing import Any, Union, get_args, get_origin

__all__ = ["WireError", "check_body"]

#: walks one field: (frame, position, end) -> the position after it
_Step = Callable[[memoryview, int, int], int]

_FIXED = {"bool": 1, "int8": 1, "int16": 2, "error_code": 2, "uint16": 2, "int32": 4, "timedelta_i32": 4,
          "int64": 8, "timedelta_i64": 8, "datetime_i64": 8, "float64": 8, "uuid": 16}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PLANS: dict[type[Any], _Step] = {}


class WireError(ValueError):
    """A count or length that does not fit the frame (the caller reports it as a malformed frame)."""


def check_body(frame: bytes | memoryview, offset: int, cls: type[Any]) -> None:
    """Check the body of schema ``cls`` starting at ``offset`` of ``frame``; WireError if it cannot fit."""
    view = memoryview(frame)
    _entity(cls)(view, offset, len(view))


def _need(pos: int, size: int, end: int, what: str) -> int:
    if size < 0 or pos + size > end:
        raise WireError(f"{what} of {size} bytes at byte {pos} runs past the end of the frame ({end} bytes)")
    return pos + size


def _uvarint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    if pos < end and buf[pos] < 0x80:  # one byte: nearly every count and length
        return buf[pos], pos + 1
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise WireError(f"unterminated varint at byte {pos}")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _length(buf: memoryview, pos: int, end: int, *, flexible: bool, wide: bool) -> tuple[int, int]:
    """A length or count: -1 for null."""
    if flexible:
        value, pos = _uvarint(buf, pos, end)
        return value - 1, pos
    fmt = _I32 if wide else _I16
    _need(pos, fmt.size, end, "a length")
    (value,) = fmt.unpack_from(buf, pos)
    if value < -1:
        raise WireError(f"negative length {value} at byte {pos}")
    return value, pos + fmt.size


def _primitive(kind: str, flexible: bool) -> _Step:
    size = _FIXED.get(kind)
    if size is not None:
        return lambda buf, pos, end: _need(pos, size, end, kind)
    if kind not in ("string", "bytes", "records"):
        raise TypeError(f"kio type {kind!r} is unknown to the wire check")
    wide = kind != "string"

    def sized(buf: memoryview, pos: int, end: int) -> int:
        n, pos = _length(buf, pos, end, flexible=flexible, wide=wide)
        return pos if n < 0 else _need(pos, n, end, kind)

    return sized


def _array(element: _Step, fixed: int | None, flexible: bool) -> _Step:
    def walk(buf: memoryview, pos: int, end: int) -> int:
        count, pos = _length(buf, pos, end, flexible=flexible, wide=True)
        if count <= 0:
            return pos
        if pos + count * (fixed or 1) > end:  # every element takes a byte at least
            raise WireError(f"an array of {count} at byte {pos} runs past the end of the frame ({end} bytes)")
        if fixed is not None:
            return pos + count * fixed
        for _ in range(count):
            pos = element(buf, pos, end)
        return pos

    return walk


def _inner(tp: Any) -> tuple[Any, bool]:
    """The element type of ``tp`` (None removed) and whether it is an array."""
    if get_origin(tp) in (types.UnionType, Union):
        tp = next(a for a in get_args(tp) if a is not type(None))
    if get_origin(tp) is tuple:
        inner = get_args(tp)[0]
        if get_origin(inner) in (types.UnionType, Union):
            inner = next(a for a in get_args(inner) if a is not type(None))
        return inner, True
    return tp, False


def _field_step(field: dataclasses.Field[Any], flexible: bool) -> _Step:
    tp, is_array = _inner(field.type)
    if dataclasses.is_dataclass(tp):
        step = _entity(tp)  # type: ignore[arg-type]
        return _array(step, None, flexible) if is_array else step
    kind = str(field.metadata["kafka_type"])
    step = _primitive(kind, flexible)
    return _array(step, _FIXED.get(kind), flexible) if is_array else step


def _entity(cls: type[Any]) -> _Step:
    """The walk of one struct (built once per class)."""
    found = _PLANS.get(cls)
    if found is None:
        found = _PLANS[cls] = _plan(cls)
    return found


def _plan(cls: type[Any]) -> _Step:
    flexible = bool(getattr(cls, "__flexible__", False))
    steps: list[_Step] = []
    tagged: dict[int, _Step] = {}
    for field in dataclasses.fields(cls):
        tag = field.metadata.get("tag")
        if tag is not None:
            tagged[int(tag)] = _field_step(field, flexible)
        else:
            steps.append(_field_step(field, flexible))

    def walk(buf: memoryview, pos: int, end: int) -> int:
        for step in steps:
            pos = step(buf, pos, end)
        if not flexible:
            return pos
        count, pos = _uvarint(buf, pos, end)
        if not count:
            return pos
        _need(pos, count, end, "the tagged fields")
        for _ in range(count):
            tag, pos = _uvarint(buf, pos, end)
            size, pos = _uvarint(buf, pos, end)
            stop = _need(pos, size, end, "a tagged field")
            known = tagged.get(tag)
            if known is not None:
                known(buf, pos, stop)
            pos = stop
        return pos

    return walk
