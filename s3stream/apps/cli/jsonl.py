"""The CLI's JSON Lines record format, both directions (``consume``/``dump --records`` out, ``produce`` in).

One record per line, one JSON object::

    {"topic": "orders", "partition": 0, "offset": 42, "timestamp": 1700000000000,
     "key": "k1", "value": "v1", "headers": [["h", "x"]]}

* ``key``/``value`` are UTF-8 strings, or ``null`` (no key; a tombstone value). Bytes that are not
  valid UTF-8 are written as ``key_b64``/``value_b64`` (standard base64) *instead of* ``key``/``value``,
  so an absent field never reads as a tombstone by mistake.
* ``headers`` is a list of ``[name, value]`` pairs (order and duplicates kept). When any header value
  is not UTF-8, all of them are written as ``headers_b64`` (values base64) instead.
* On input, ``headers`` (or ``headers_b64``) may also be an object ``{"name": "value"}``; a ``null``
  header value is read as empty bytes; ``timestamp`` (int ms) and ``partition`` (int) are optional;
  ``topic`` and ``offset`` are accepted and ignored, so ``consume`` output replays through ``produce``.

Invariant: ``record_from_json(record_to_json(r))`` gives back ``r`` (key, value, headers, timestamp)
for any bytes. Every malformed input raises :class:`~s3stream.base.errors.InvalidRequest` naming the line.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from s3stream.base.errors import InvalidRequest, MalformedRecord
from s3stream.base.records import Record

__all__ = ["ParsedRecord", "record_from_json", "table_to_jsonl"]

_INPUT_FIELDS = frozenset({"key", "value", "key_b64", "value_b64", "headers", "headers_b64", "timestamp",
                           "partition", "topic", "offset"})

#: A record parsed from input, with the partition it asked for (None: let the partitioner choose).
ParsedRecord = tuple[Record, int | None]


# ----------------------------------------------------------------------------------------------- output


def _put_bytes(obj: dict[str, Any], name: str, data: bytes | None) -> None:
    if data is None:
        obj[name] = None
        return
    try:
        obj[name] = data.decode("utf-8")
    except UnicodeDecodeError:
        obj[name + "_b64"] = base64.b64encode(data).decode("ascii")


def _put_headers(obj: dict[str, Any], headers: list[dict[str, Any]] | None) -> None:
    pairs = [(h["key"], h["value"] if h["value"] is not None else b"") for h in headers or ()]
    try:
        obj["headers"] = [[k, v.decode("utf-8")] for k, v in pairs]
    except UnicodeDecodeError:
        obj["headers_b64"] = [[k, base64.b64encode(v).decode("ascii")] for k, v in pairs]


def table_to_jsonl(table: pa.Table, fixed: Mapping[str, Any]) -> str:
    """Records of ``table`` (RECORD_SCHEMA) as JSON lines, each starting with the ``fixed`` fields."""
    if table.num_rows == 0:
        return ""
    cols = table.select(["offset", "timestamp", "key", "value", "headers"]).to_pydict()
    lines: list[str] = []
    for off, ts, key, value, headers in zip(cols["offset"], cols["timestamp"], cols["key"], cols["value"],
                                            cols["headers"], strict=True):
        obj: dict[str, Any] = {**fixed, "offset": off, "timestamp": ts}
        _put_bytes(obj, "key", key)
        _put_bytes(obj, "value", value)
        _put_headers(obj, headers)
        lines.append(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ input


def _bad(where: str, message: str) -> InvalidRequest:
    return InvalidRequest(f"{where}: {message}")


def _b64(text: object, where: str, name: str) -> bytes:
    if not isinstance(text, str):
        raise _bad(where, f"{name} must be a base64 string")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _bad(where, f"{name} is not valid base64 ({exc})") from None


def _bytes_field(obj: Mapping[str, Any], name: str, where: str) -> bytes | None:
    if name in obj and name + "_b64" in obj:
        raise _bad(where, f"give either {name} or {name}_b64, not both")
    if name + "_b64" in obj:
        return None if obj[name + "_b64"] is None else _b64(obj[name + "_b64"], where, name + "_b64")
    raw = obj.get(name)
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise _bad(where, f"{name} must be a string or null (use {name}_b64 for binary)")
    return _utf8(raw, where, name)


def _utf8(text: str, where: str, what: str) -> bytes:
    """``text`` as UTF-8; a lone surrogate (a ``\\ud800`` escape JSON allows) is refused, naming the line."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise _bad(where, f"{what} is not UTF-8 text (it holds a lone surrogate escape)") from None


def _header_pairs(raw: object, where: str, name: str) -> list[tuple[object, object]]:
    if isinstance(raw, dict):
        return list(raw.items())
    if isinstance(raw, list) and all(isinstance(p, list) and len(p) == 2 for p in raw):
        return [(p[0], p[1]) for p in raw]
    raise _bad(where, f"{name} must be an object or a list of [name, value] pairs")


def _headers(obj: Mapping[str, Any], where: str) -> tuple[tuple[str, bytes], ...]:
    if "headers" in obj and "headers_b64" in obj:
        raise _bad(where, "give either headers or headers_b64, not both")
    name = "headers_b64" if "headers_b64" in obj else "headers"
    raw = obj.get(name)
    if raw is None:
        return ()
    out: list[tuple[str, bytes]] = []
    for k, v in _header_pairs(raw, where, name):
        if not isinstance(k, str):
            raise _bad(where, f"{name} names must be strings")
        _utf8(k, where, f"{name} name {k!r}")
        if v is None:
            out.append((k, b""))
        elif name == "headers_b64":
            out.append((k, _b64(v, where, f"{name} value of {k!r}")))
        elif isinstance(v, str):
            out.append((k, _utf8(v, where, f"header {k!r} value")))
        else:
            raise _bad(where, f"header {k!r} value must be a string or null")
    return tuple(out)


def _optional_int(obj: Mapping[str, Any], name: str, where: str) -> int | None:
    value = obj.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise _bad(where, f"{name} must be an integer")
    return value


def record_from_json(line: bytes | str, where: str) -> ParsedRecord:
    """Parse one JSON line (see the module docstring); ``where`` (e.g. ``stdin line 7``) names it."""
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise _bad(where, f"not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise _bad(where, "expected a JSON object")
    unknown = sorted(set(obj) - _INPUT_FIELDS)
    if unknown:
        raise _bad(where, f"unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(_INPUT_FIELDS))}")
    try:
        record = Record(key=_bytes_field(obj, "key", where), value=_bytes_field(obj, "value", where),
                        timestamp=_optional_int(obj, "timestamp", where), headers=_headers(obj, where))
    except MalformedRecord as exc:  # e.g. a timestamp past int64: name the line, as for every other field
        raise _bad(where, str(exc)) from None
    return record, _optional_int(obj, "partition", where)
