"""Kafka frames to kio messages and back: the request header, the body, and the response header rules.

A frame is ``int32 size`` + bytes. The request header version follows the request's own schema (v2 for
flexible versions, v1 otherwise); the response header is v1 for flexible responses and v0 otherwise,
except ApiVersions, whose response header is always v0 (kio's schemas carry that as ``__header_schema__``).
Bytes from the network are never trusted: a header or body that does not parse is :class:`MalformedFrame`
(the server closes that connection only); bytes after a parsed body are ignored, as Kafka does.

A response is written as a list of buffers (:func:`encode_response_chunks`): kio writes every field, and a
``records`` field given as :class:`SplicedRecords` contributes its record batches by reference instead of
being copied into kio's buffer (kio's writer writes a bytes field as ``len(value)`` and then
``buffer.write(value)``; the buffer here takes that object's batches as chunks of their own).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32

from s3stream.apps.kafka.wirecheck import check_body

__all__ = ["API_VERSIONS_KEY", "MalformedFrame", "ParsedRequest", "SplicedRecords", "encode_response",
           "encode_response_chunks", "peek_api", "read_request", "request_class", "response_class"]

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
        check_body(frame, offset, cls)  # a forged array count would make kio's reader abort the process
        body, _used = _reader(cls)(frame, offset)  # kio returns the bytes it consumed
    except Exception as exc:  # the native reader raises ValueError/IndexError/UnicodeError/... on bad bytes
        raise MalformedFrame(f"unreadable {cls.__name__} v{cls.__version__}: {type(exc).__name__}: {exc}") from exc
    # bytes after the body are ignored, as Kafka does: librdkafka's all-topics Metadata v9+ request carries
    # 3 stray bytes after a reserved array-count slot (its fields then read as allow_auto_topic_creation=false)
    return ParsedRequest(int(header.request_api_key), int(header.request_api_version), int(header.correlation_id),
                         header.client_id, body)


class SplicedRecords:
    """The ``records`` of a response as the record batches that make it up, written without a copy.

    Only :func:`encode_response_chunks` (and :func:`encode_response`) can write it: it has a length, as kio's
    writer asks, but no bytes of its own.
    """

    __slots__ = ("batches", "size")

    def __init__(self, batches: Sequence[bytes | bytearray | memoryview]) -> None:
        self.batches = batches
        self.size = sum(len(b) for b in batches)

    def __len__(self) -> int:
        return self.size


class _Chunks:
    """A kio ``Writable`` collecting a response: small fields in a bytearray, spliced records by reference."""

    __slots__ = ("chunks", "head", "size")

    def __init__(self) -> None:
        self.head = bytearray(4)  # the size prefix, filled in at the end
        self.chunks: list[bytes | bytearray | memoryview] = [self.head]
        self.size = 0

    def write(self, data: Any) -> int:
        if type(data) is SplicedRecords:
            self.size += data.size
            if data.size:
                self.head = bytearray()
                self.chunks.extend(data.batches)
                self.chunks.append(self.head)
            return data.size
        self.head += data
        self.size += len(data)
        return len(data)


def encode_response_chunks(correlation_id: int, response: Any) -> list[bytes | bytearray | memoryview]:
    """The whole response frame (size prefix included) for a kio response object, as buffers to send in order."""
    header_cls = response.__header_schema__
    out = _Chunks()
    _writer(header_cls)(out, header_cls(correlation_id=i32(correlation_id)))
    _writer(type(response))(out, response)
    struct.pack_into(">i", out.chunks[0], 0, out.size)
    return [c for c in out.chunks if len(c)]


def encode_response(correlation_id: int, response: Any) -> bytes:
    """The whole response frame (size prefix included) for a kio response object, as one bytes object."""
    return b"".join(encode_response_chunks(correlation_id, response))
