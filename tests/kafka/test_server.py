"""The wire server itself: framing limits, in-order pipelining, connection limits, idle timeouts, KIP-511."""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from s3stream.apps.kafka.handlers import all_apis
from s3stream.apps.kafka.wire import request_class, response_class
from tests.kafka.conftest import RunningKafka
from tests.kafka.test_produce_fetch import frame, read_response


def _connect(server: RunningKafka) -> socket.socket:
    host, port = server.bootstrap.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def _closed(sock: socket.socket, timeout: float = 5) -> bool:
    """Whether the server closed ``sock`` (EOF or reset) within ``timeout``."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _metadata(version: int = 12) -> Any:
    cls = request_class(3, version)
    return cls(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def _api_versions(version: int = 3) -> Any:
    cls = request_class(18, version)
    fields = cls.__dataclass_fields__
    kwargs = {k: v for k, v in {"client_software_name": "raw", "client_software_version": "1"}.items() if k in fields}
    return cls(**kwargs)


def test_pipelined_requests_are_answered_in_order(kafka_server: RunningKafka) -> None:
    with _connect(kafka_server) as sock:
        sock.sendall(b"".join(frame(3, 12, _metadata(), correlation=100 + i) if i % 2 else
                              frame(18, 3, _api_versions(), correlation=100 + i) for i in range(20)))
        for i in range(20):
            key = 3 if i % 2 else 18
            correlation, body = read_response(sock, key, 12 if key == 3 else 3)
            assert correlation == 100 + i
            assert body.brokers if key == 3 else body.error_code == ErrorCode.none


@pytest.mark.parametrize("kafka_options", [{"socket_request_max_bytes": 1024}])
def test_a_frame_over_the_limit_closes_that_connection_only(kafka_server: RunningKafka) -> None:
    with _connect(kafka_server) as bad, _connect(kafka_server) as good:
        bad.sendall(struct.pack(">i", 1025) + b"\0" * 64)
        assert _closed(bad)
        good.sendall(frame(18, 3, _api_versions()))
        assert read_response(good, 18, 3)[1].error_code == ErrorCode.none


@pytest.mark.parametrize("payload", [b"\x00\x03", b"\x00\x03\x00\x0c\x00\x00\x00\x07\xff\xff\xff\xff\xff",
                                     struct.pack(">hhi", 3, 99, 1) + b"\0\0",  # a version nobody advertises
                                     struct.pack(">hhi", 999, 0, 1) + b"\0\0"])  # an unknown API
def test_malformed_or_unsupported_requests_close_the_connection(kafka_server: RunningKafka, payload: bytes) -> None:
    with _connect(kafka_server) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        assert _closed(sock)
    with _connect(kafka_server) as sock:  # the server goes on
        sock.sendall(frame(3, 12, _metadata()))
        assert read_response(sock, 3, 12)[1].brokers


def test_an_unknown_api_versions_version_gets_v0_with_the_table(kafka_server: RunningKafka) -> None:
    """KIP-511: a client newer than the server sends ApiVersions v99 (header v2); the answer is v0."""
    body = struct.pack(">hhi", 18, 99, 42) + struct.pack(">h", 3) + b"raw" + b"\0" + b"\x04abc\x02x\0"
    with _connect(kafka_server) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", sock.recv(4))[0]
        data = b""
        while len(data) < size:
            data += sock.recv(size - len(data))
    assert struct.unpack(">i", data[:4])[0] == 42
    response, _ = entity_reader(response_class(18, 0))(data, 4)
    assert response.error_code == ErrorCode.unsupported_version
    advertised = {(int(k.api_key), int(k.min_version), int(k.max_version)) for k in response.api_keys}
    assert advertised == {(s.api_key, s.min_version, s.max_version) for s in all_apis()}


@pytest.mark.parametrize("kafka_options", [{"max_connections": 2}])
def test_connections_over_the_limit_are_closed(kafka_server: RunningKafka) -> None:
    first, second = _connect(kafka_server), _connect(kafka_server)
    try:
        for sock in (first, second):  # both served
            sock.sendall(frame(18, 3, _api_versions()))
            assert read_response(sock, 18, 3)[1].error_code == ErrorCode.none
        with _connect(kafka_server) as third:
            assert _closed(third)
    finally:
        first.close()
        second.close()
    deadline = time.monotonic() + 5
    while True:  # once the others are gone, a new connection is served again
        with _connect(kafka_server) as again:
            again.sendall(frame(18, 3, _api_versions()))
            try:
                assert read_response(again, 18, 3)[1].error_code == ErrorCode.none
                break
            except (AssertionError, OSError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


@pytest.mark.parametrize("kafka_options", [{"connections_max_idle_ms": 300}])
def test_idle_connections_are_closed(kafka_server: RunningKafka) -> None:
    with _connect(kafka_server) as sock:
        sock.sendall(frame(18, 3, _api_versions()))
        assert read_response(sock, 18, 3)[1].error_code == ErrorCode.none
        started = time.monotonic()
        assert _closed(sock, timeout=5)
        assert time.monotonic() - started >= 0.2


def test_request_metrics_count_apis_versions_and_bytes(kafka_server: RunningKafka) -> None:
    with _connect(kafka_server) as sock:
        sock.sendall(frame(3, 12, _metadata()))
        read_response(sock, 3, 12)
    assert kafka_server.store is not None
    registry = kafka_server.store.metrics_registry
    deadline = time.monotonic() + 5
    while True:  # the server counts a response after handing it to the socket: the client may be faster
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for m in registry.collect() for s in m.samples}
        if samples.get(("s3stream_kafka_request_seconds_count", (("api", "Metadata"),))) or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert samples[("s3stream_kafka_requests_total", (("api", "Metadata"), ("version", "12")))] == 1
    assert samples[("s3stream_kafka_bytes_in_total", ())] > 0 and samples[("s3stream_kafka_bytes_out_total", ())] > 0
    assert samples[("s3stream_kafka_request_seconds_count", (("api", "Metadata"),))] == 1

