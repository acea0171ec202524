"""Kafka frames to kio messages and back: the request header, the body, and the response header rules.

A frame is ``int32 size`` + bytes. The request header version follows the request's own schema (v2 for
flexible versions, v1 otherwise); the response header is v1 for flexible responses and v0 otherwise,
except ApiVersions, whose response header is always v0 (kio's schemas carry that as ``__header_schema__``).
Bytes from the network are never trusted: a header or body that does not parse is :class:`MalformedFrame`
(the server closes that connection only); bytes after a parsed body are ignored, as Kafka does.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32

__all__ = ["API_VERSIONS_KEY", "MalformedFrame", "ParsedRequest", "encode_response", "peek_api", "read_request",
           "request_class", "response_class"]

API_VERSIONS_KEY = 18
_API = struct.Struct(">hh")


class MalformedFrame(Exception):
    """A frame that is not a valid Kafka request; the connection that sent it is closed."""


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any


def peek_api(frame: bytes | memoryview) -> tuple[int, int, int]:
    """``(api_key, api_version, correlation_id)`` of a frame, without parsing the rest."""
    if len(frame) < 8:
        raise MalformedFrame(f"a request of {len(frame)} bytes is shorter than a request header")
    key, version = _API.unpack_from(frame, 0)
    (correlation,) = struct.unpack_from(">i", frame, 4)
    return key, version, correlation


@cache
def request_class(api_key: int, version: int) -> type[Any] | None:
    """kio's request class for (key, version), or None when kio has no such message."""
    try:
        return load_request_schema(api_key, version)
    except KioIndexError:
        return None


@cache
def response_class(api_key: int, version: int) -> type[Any]:
    return load_response_schema(api_key, version)


_READERS: dict[type[Any], Any] = {}
_WRITERS: dict[type[Any], Any] = {}


def _reader(cls: type[Any]) -> Any:
    found = _READERS.get(cls)
    if found is None:
        found = _READERS[cls] = entity_reader(cls)
    return found


def _writer(cls: type[Any]) -> Any:
    found = _WRITERS.get(cls)
    if found is None:
        found = _WRITERS[cls] = entity_writer(cls)
    return found


def read_header_only(frame: bytes | memoryview, *, flexible: bool) -> tuple[Any, int]:
    """The request header (v2 when ``flexible``) and where the body starts; for requests kio cannot parse."""
    try:
        header, offset = _reader(RequestHeaderV2 if flexible else RequestHeaderV1)(frame, 0)
    except Exception as exc:
        raise MalformedFrame(f"unreadable request header: {exc}") from exc
    return header, int(offset)


def read_request(frame: bytes | memoryview, cls: type[Any]) -> ParsedRequest:
    """Parse the header and body of a request whose schema class is ``cls``; MalformedFrame otherwise."""
    try:
        header, offset = _reader(cls.__header_schema__)(frame, 0)
        body, _used = _reader(cls)(frame, offset)  # kio returns the bytes it consumed
    except Exception as exc:  # the native reader raises ValueError/IndexError/UnicodeError/... on bad bytes
        raise MalformedFrame(f"unreadable {cls.__name__} v{cls.__version__}: {type(exc).__name__}: {exc}") from exc
    # bytes after the body are ignored, as Kafka does: librdkafka's all-topics Metadata v9+ request carries
    # 3 stray bytes after a reserved array-count slot (its fields then read as allow_auto_topic_creation=false)
    return ParsedRequest(int(header.request_api_key), int(header.request_api_version), int(header.correlation_id),
                         header.client_id, body)


def encode_response(correlation_id: int, response: Any) -> bytes:
    """The whole response frame (size prefix included) for a kio response object."""
    header_cls = response.__header_schema__
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    _writer(header_cls)(buf, header_cls(correlation_id=i32(correlation_id)))
    _writer(type(response))(buf, response)
    data = buf.getbuffer()
    struct.pack_into(">i", data, 0, len(data) - 4)
    return bytes(data)
