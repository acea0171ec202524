"""TLS and SASL on the Kafka listener, checked with real clients (librdkafka via confluent-kafka and kcat,
kafka-python) and with RFC 7677's published SCRAM-SHA-256 exchange; credentials never reach the logs."""

from __future__ import annotations

import asyncio
import base64
import datetime
import io
import json
import logging
import socket
import ssl
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiokafka
import aiokafka.errors
import confluent_kafka
import confluent_kafka.admin
import kafka
import kafka.admin
import pytest
from cryptography.hazmat.primitives import serialization
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from s3stream.apps.kafka import security
from s3stream.apps.kafka.config import BrokerConfig
from s3stream.apps.kafka.security import (
    AuthenticationFailed,
    ScramExchange,
    Users,
    check_plain,
    load_users,
    parse_mechanisms,
    parse_users,
    scram_credential,
    server_ssl_context,
)
from s3stream.apps.kafka.server import KafkaServerThread
from s3stream.apps.kafka.wire import request_class, response_class
from s3stream.base.errors import InvalidConfig
from s3stream.store import open_store

from .tlsfiles import Certs

pytestmark = pytest.mark.timeout(120)

ALICE, ALICE_PW = "alice", "alice-secret-7Hq"
BOB, BOB_PW = "bob", "b:o=b,pw 2"  # ':' '=' ',' and a space: passwords may hold any of them
SECRETS = (ALICE_PW, BOB_PW, "wrong-password-9Zx")
USERS_TEXT = f"# test users\n\n{ALICE}:{ALICE_PW}\n{BOB}:{BOB_PW}\n"
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


# ------------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return Certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def users_file(tmp_path: Path) -> Path:
    path = tmp_path / "users.txt"
    path.write_text(USERS_TEXT)
    path.chmod(0o600)
    return path


@pytest.fixture
def kafka_options(request: pytest.FixtureRequest, users_file: Path, certs: Certs) -> dict[str, Any]:
    """Indirect parameter: ``"sasl"``, ``"ssl"``, ``"sasl_ssl"``, ``"mtls"`` or ``"scram512"`` (one mechanism)."""
    kind = getattr(request, "param", "sasl")
    options: dict[str, Any] = {}
    if kind in ("sasl", "sasl_ssl", "scram512"):
        options["sasl_users_file"] = str(users_file)
        options["sasl_enabled_mechanisms"] = "SCRAM-SHA-512" if kind == "scram512" else ",".join(MECHANISMS)
    if kind in ("ssl", "sasl_ssl", "mtls"):
        options["ssl_context"] = server_ssl_context(certs.server_cert, certs.server_key,
                                                    certs.ca if kind == "mtls" else None)
    return options


# ------------------------------------------------------------------------------------------------ clients


def _librdkafka_metadata(bootstrap: str, timeout: float = 10, **config: Any) -> tuple[Any, list[Any]]:
    """``(metadata or None, errors reported)`` of one confluent-kafka AdminClient."""
    errors: list[Any] = []
    client = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap, "log_level": 0,
                                                "error_cb": errors.append, **config})
    try:
        return client.list_topics(timeout=timeout), errors
    except confluent_kafka.KafkaException:
        client.poll(0)  # serves error_cb
        return None, errors


def _librdkafka_first_error(bootstrap: str, *, want: int | None = None, **config: Any) -> Any:
    """The first error (of code ``want``, when given) a confluent-kafka producer reports while it connects
    (10 s at most; on a loaded machine a generic transport error may come before the specific one)."""
    errors: list[Any] = []
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "log_level": 0, "error_cb": errors.append,
                                         **config})
    for _ in range(100):
        producer.poll(0.1)
        found = [e for e in errors if want is None or e.code() == want]
        if found:
            return found[0]
    return errors[0] if errors else None


def _sasl(mechanism: str, user: str, password: str, protocol: str = "SASL_PLAINTEXT") -> dict[str, str]:
    return {"security.protocol": protocol, "sasl.mechanism": mechanism, "sasl.username": user,
            "sasl.password": password}


def _sample(running: Any, name: str, **labels: str) -> float:
    """The sum of the samples of metric ``name`` whose labels include ``labels``."""
    return sum(sample.value for metric in running.store.metrics_registry.collect() for sample in metric.samples
               if sample.name == name and labels.items() <= sample.labels.items())


def _assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text
        assert base64.b64encode(secret.encode()).decode() not in text


@pytest.fixture
def server_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every s3stream log record (DEBUG included) of the test, to check no credential is in any."""
    caplog.set_level(logging.DEBUG, logger="s3stream")
    yield caplog
    _assert_no_secret(caplog.text)
    for record in caplog.records:
        _assert_no_secret(repr(record.args))


# ------------------------------------------------------------------------------------------------ SASL, clients


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_librdkafka_logs_in_with_each_mechanism_and_is_refused_a_wrong_password(
        kafka_server: Any, server_log: pytest.LogCaptureFixture, mechanism: str) -> None:
    for user, password in ((ALICE, ALICE_PW), (BOB, BOB_PW)):
        metadata, errors = _librdkafka_metadata(kafka_server.bootstrap, **_sasl(mechanism, user, password))
        assert metadata is not None and not errors, errors
        assert metadata.cluster_id == kafka_server.server.broker.cluster_id
    for user in (ALICE, "mallory"):  # a wrong password and an unknown user look the same
        error = _librdkafka_first_error(kafka_server.bootstrap, want=confluent_kafka.KafkaError._AUTHENTICATION,
                                        **_sasl(mechanism, user, "wrong-password-9Zx"))
        assert error is not None and error.code() == confluent_kafka.KafkaError._AUTHENTICATION, error
        assert f"invalid credentials with SASL mechanism {mechanism}" in error.str()
    assert _sample(kafka_server, "s3stream_kafka_connections_rejected_total", reason="authentication") >= 2


def test_kafka_python_logs_in_with_scram_and_plain(kafka_server: Any, server_log: pytest.LogCaptureFixture,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    kafka_server.store.create_topic("visible", partitions=1)
    for mechanism, user, password in (("SCRAM-SHA-256", BOB, BOB_PW), ("SCRAM-SHA-512", ALICE, ALICE_PW),
                                      ("PLAIN", ALICE, ALICE_PW)):
        admin = kafka.admin.KafkaAdminClient(
            bootstrap_servers=kafka_server.bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
            sasl_plain_username=user, sasl_plain_password=password, request_timeout_ms=5000)
        try:
            assert "visible" in admin.list_topics()
        finally:
            admin.close()
    caplog.set_level(logging.ERROR, logger="kafka")
    with pytest.raises(kafka.errors.KafkaError):
        kafka.admin.KafkaAdminClient(
            bootstrap_servers=kafka_server.bootstrap, security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=ALICE, sasl_plain_password="wrong-password-9Zx",
            bootstrap_timeout_ms=1000, reconnect_backoff_ms=300)
    failures = [r.getMessage() for r in caplog.records if r.name.startswith("kafka.")]
    assert any("SaslAuthenticationFailedError" in m and "SCRAM-SHA-256" in m for m in failures), failures


def test_aiokafka_logs_in_and_is_refused(kafka_server: Any, server_log: pytest.LogCaptureFixture) -> None:
    async def start(mechanism: str, password: str) -> None:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=kafka_server.bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
            sasl_plain_username=ALICE, sasl_plain_password=password, request_timeout_ms=5000)
        try:
            await producer.start()
        finally:
            await producer.stop()

    asyncio.run(start("SCRAM-SHA-512", ALICE_PW))
    asyncio.run(start("PLAIN", ALICE_PW))
    with pytest.raises(aiokafka.errors.KafkaConnectionError):
        asyncio.run(start("SCRAM-SHA-256", "wrong-password-9Zx"))
    assert "SASL SCRAM-SHA-256 authentication from" in server_log.text


def test_kcat_lists_metadata_over_scram(kafka_server: Any, server_log: pytest.LogCaptureFixture) -> None:
    kafka_server.store.create_topic("kcat-visible", partitions=2)
    base = ["kcat", "-b", kafka_server.bootstrap, "-X", "security.protocol=SASL_PLAINTEXT",
            "-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", f"sasl.username={ALICE}", "-L", "-J", "-m", "5"]
    out = subprocess.run([*base, "-X", f"sasl.password={ALICE_PW}"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    topics = {t["topic"]: len(t["partitions"]) for t in json.loads(out.stdout)["topics"]}
    assert topics["kcat-visible"] == 2
    out = subprocess.run([*base, "-X", "sasl.password=wrong-password-9Zx", "-m", "2"], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode != 0 and "Authentication failed" in out.stderr, out.stderr


@pytest.mark.parametrize("kafka_options", ["scram512"], indirect=True)
def test_a_mechanism_not_enabled_is_refused_with_the_enabled_list(kafka_server: Any,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    metadata, _ = _librdkafka_metadata(kafka_server.bootstrap, **_sasl("SCRAM-SHA-512", ALICE, ALICE_PW))
    assert metadata is not None
    caplog.set_level(logging.ERROR, logger="kafka")
    with pytest.raises(kafka.errors.KafkaError):
        kafka.admin.KafkaAdminClient(
            bootstrap_servers=kafka_server.bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
            sasl_plain_username=ALICE, sasl_plain_password=ALICE_PW, bootstrap_timeout_ms=1000)
    assert any("UnsupportedSaslMechanismError" in r.getMessage() for r in caplog.records), caplog.text


def test_requests_before_authentication_close_the_connection(kafka_server: Any,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """A client that skips SASL gets ApiVersions, then its Metadata request closes the connection."""
    error = _librdkafka_first_error(kafka_server.bootstrap)  # PLAINTEXT: no SASL
    assert error is not None, "the client was not refused"
    assert "Metadata before SASL authentication" in caplog.text
    assert _sample(kafka_server, "s3stream_kafka_connections_rejected_total", reason="malformed") >= 1
    assert _sample(kafka_server, "s3stream_kafka_requests_total", api="ApiVersions") >= 1
    assert _sample(kafka_server, "s3stream_kafka_requests_total", api="Metadata") == 0


class RawConnection:
    """Kafka requests by hand (kio messages over a socket), for the orders no real client sends."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.correlation = 0

    def call(self, key: int, version: int, **fields: Any) -> Any:
        cls = request_class(key, version)
        assert cls is not None
        header_cls = cls.__header_schema__
        self.correlation += 1
        buf = io.BytesIO()
        entity_writer(header_cls)(buf, header_cls(request_api_key=i16(key), request_api_version=i16(version),
                                                  correlation_id=i32(self.correlation), client_id="raw-test"))
        entity_writer(cls)(buf, cls(**fields))
        self.sock.sendall(struct.pack(">i", len(buf.getvalue())) + buf.getvalue())
        (size,) = struct.unpack(">i", self._read(4))
        frame = self._read(size)
        response_cls = response_class(key, version)
        header, offset = entity_reader(response_cls.__header_schema__)(frame, 0)
        assert header.correlation_id == self.correlation
        return entity_reader(response_cls)(frame, offset)[0]

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed by the server")
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()


def test_sasl_request_order_and_session_lifetime(kafka_server: Any, server_log: pytest.LogCaptureFixture) -> None:
    conn = RawConnection(kafka_server.bootstrap)
    try:  # SaslAuthenticate before a handshake: ILLEGAL_SASL_STATE, then the session is spent
        reply = conn.call(36, 1, auth_bytes=f"\0{ALICE}\0{ALICE_PW}".encode())
        assert reply.error_code == ErrorCode.illegal_sasl_state and reply.error_message
        with pytest.raises(ConnectionError):
            conn.call(17, 1, mechanism="PLAIN")
    finally:
        conn.close()
    conn = RawConnection(kafka_server.bootstrap)
    try:  # a v0 handshake (raw tokens would follow) is refused, listing the mechanisms
        reply = conn.call(17, 0, mechanism="PLAIN")
        assert reply.error_code == ErrorCode.unsupported_version and set(reply.mechanisms) == set(MECHANISMS)
    finally:
        conn.close()
    for version in (0, 1, 2):
        conn = RawConnection(kafka_server.bootstrap)
        try:
            reply = conn.call(17, 1, mechanism="GSSAPI")
            assert reply.error_code == ErrorCode.unsupported_sasl_mechanism
            with pytest.raises(ConnectionError):  # the session is spent
                conn.call(17, 1, mechanism="PLAIN")
        finally:
            conn.close()
        conn = RawConnection(kafka_server.bootstrap)
        try:
            assert conn.call(17, 1, mechanism="PLAIN").error_code == ErrorCode.none
            reply = conn.call(36, version, auth_bytes=f"\0{ALICE}\0{ALICE_PW}".encode())
            assert reply.error_code == ErrorCode.none and reply.auth_bytes == b""
            if version >= 1:
                assert reply.session_lifetime == datetime.timedelta(0)  # no re-authentication (KIP-368)
            # authenticated: other APIs are served; another login on this connection is refused
            assert conn.call(3, 4, topics=(), allow_auto_topic_creation=False).brokers
            reply = conn.call(17, 1, mechanism="PLAIN")
            assert reply.error_code == ErrorCode.illegal_sasl_state
        finally:
            conn.close()
    conn = RawConnection(kafka_server.bootstrap)
    try:  # a wrong password: SASL_AUTHENTICATION_FAILED; a retry on the same connection closes it
        assert conn.call(17, 1, mechanism="SCRAM-SHA-256").error_code == ErrorCode.none
        first = conn.call(36, 2, auth_bytes=b"n,,n=alice,r=clientnonce")
        assert first.error_code == ErrorCode.none and first.auth_bytes.startswith(b"r=clientnonce")
        nonce = first.auth_bytes.split(b",")[0][2:]
        reply = conn.call(36, 2, auth_bytes=b"c=biws,r=" + nonce + b",p=" + base64.b64encode(bytes(32)))
        assert reply.error_code == ErrorCode.sasl_authentication_failed
        assert "invalid credentials" in reply.error_message
        with pytest.raises(ConnectionError):
            conn.call(36, 2, auth_bytes=b"n,,n=alice,r=again")
    finally:
        conn.close()


# ------------------------------------------------------------------------------------------------ TLS


@pytest.mark.parametrize("kafka_options", ["ssl"], indirect=True)
def test_tls_listener_with_librdkafka_and_kafka_python(kafka_server: Any, certs: Certs) -> None:
    kafka_server.store.create_topic("over-tls", partitions=1)
    metadata, errors = _librdkafka_metadata(kafka_server.bootstrap, **{"security.protocol": "SSL",
                                                                       "ssl.ca.location": certs.ca})
    assert metadata is not None and not errors, errors
    assert "over-tls" in metadata.topics
    admin = kafka.admin.KafkaAdminClient(bootstrap_servers=kafka_server.bootstrap, security_protocol="SSL",
                                         ssl_cafile=certs.ca, request_timeout_ms=5000)
    try:
        assert "over-tls" in admin.list_topics()
    finally:
        admin.close()
    # a client that does not trust the server's CA is refused by its own TLS check
    error = _librdkafka_first_error(kafka_server.bootstrap, want=confluent_kafka.KafkaError._SSL,
                                    **{"security.protocol": "SSL"})
    assert error is not None and error.code() == confluent_kafka.KafkaError._SSL, error


@pytest.mark.parametrize("kafka_options", ["sasl_ssl"], indirect=True)
def test_sasl_over_tls(kafka_server: Any, certs: Certs, server_log: pytest.LogCaptureFixture) -> None:
    for mechanism in ("PLAIN", "SCRAM-SHA-256"):
        metadata, errors = _librdkafka_metadata(kafka_server.bootstrap, **_sasl(mechanism, ALICE, ALICE_PW, "SASL_SSL"),
                                                **{"ssl.ca.location": certs.ca})
        assert metadata is not None and not errors, errors
    admin = kafka.admin.KafkaAdminClient(
        bootstrap_servers=kafka_server.bootstrap, security_protocol="SASL_SSL", ssl_cafile=certs.ca,
        sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=BOB, sasl_plain_password=BOB_PW, request_timeout_ms=5000)
    admin.close()
    # records go through an authenticated TLS connection and come back
    secure = {"bootstrap.servers": kafka_server.bootstrap, "ssl.ca.location": certs.ca, "log_level": 0,
              **_sasl("SCRAM-SHA-256", ALICE, ALICE_PW, "SASL_SSL")}
    kafka_server.store.create_topic("secure", partitions=1)
    producer = confluent_kafka.Producer({**secure, "linger.ms": 1})
    for i in range(3):
        producer.produce("secure", key=b"k%d" % i, value=b"v%d" % i)
    assert producer.flush(10) == 0
    consumer = confluent_kafka.Consumer({**secure, "group.id": "secure-reader", "enable.auto.commit": False})
    try:
        consumer.assign([confluent_kafka.TopicPartition("secure", 0, 0)])
        got: list[Any] = []
        for _ in range(20):
            got += [(m.key(), m.value()) for m in consumer.consume(3 - len(got), timeout=0.5) if m.error() is None]
            if len(got) == 3:
                break
    finally:
        consumer.close()
    assert got == [(b"k%d" % i, b"v%d" % i) for i in range(3)]
    assert [r.value for r in kafka_server.store.partition("secure", 0).read(0)] == [b"v0", b"v1", b"v2"]


@pytest.mark.parametrize("kafka_options", ["mtls"], indirect=True)
def test_client_certificates_are_required_with_a_ca_file(kafka_server: Any, certs: Certs) -> None:
    tls = {"security.protocol": "SSL", "ssl.ca.location": certs.ca}
    metadata, errors = _librdkafka_metadata(kafka_server.bootstrap, **tls, **{
        "ssl.certificate.location": certs.client_cert, "ssl.key.location": certs.client_key})
    assert metadata is not None and not errors, errors
    metadata, errors = _librdkafka_metadata(kafka_server.bootstrap, timeout=1, **tls)  # no client certificate
    assert metadata is None and errors


def test_tls_files_that_cannot_be_used_are_invalid_config(certs: Certs, tmp_path: Path) -> None:
    with pytest.raises(InvalidConfig, match=r"cannot use the TLS certificate/key .*missing\.pem"):
        server_ssl_context(tmp_path / "missing.pem")
    with pytest.raises(InvalidConfig, match="cannot use the TLS certificate/key"):
        server_ssl_context(certs.server_cert, certs.client_key)  # the key of another certificate
    encrypted = tmp_path / "encrypted.key"
    key = serialization.load_pem_private_key(Path(certs.server_key).read_bytes(), None)
    encrypted.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.BestAvailableEncryption(b"key-password")))
    with pytest.raises(InvalidConfig, match="cannot use the TLS certificate/key"):
        server_ssl_context(certs.server_cert, encrypted)  # fails at once, never prompts
    with pytest.raises(InvalidConfig, match="CA file"):
        server_ssl_context(certs.server_cert, certs.server_key, tmp_path / "no-ca.pem")
    context = server_ssl_context(certs.server_cert, certs.server_key, certs.ca)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.minimum_version == ssl.TLSVersion.TLSv1_2


# ------------------------------------------------------------------------------------------------ SCRAM, RFC


def test_scram_sha_256_matches_rfc_7677(monkeypatch: pytest.MonkeyPatch) -> None:
    """RFC 7677 section 3: user "user", password "pencil"; every byte of both server messages."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    users = Users({"user": {"SCRAM-SHA-256": scram_credential(b"pencil", "SCRAM-SHA-256", salt=salt)}})
    monkeypatch.setattr(security.secrets, "token_urlsafe", lambda n: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    exchange = ScramExchange(users, "SCRAM-SHA-256")
    server_first = exchange.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert server_first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    user, server_final = exchange.final(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                                        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert (user, server_final) == ("user", b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    with pytest.raises(AuthenticationFailed, match="before client-first"):  # one attempt per exchange
        exchange.final(b"c=biws,r=x,p=AAAA")


def test_scram_refuses_malformed_and_tampered_messages() -> None:
    users = parse_users([f"{ALICE}:{ALICE_PW}"])

    def first(message: bytes, mechanism: str = "SCRAM-SHA-256") -> tuple[ScramExchange, str]:
        exchange = ScramExchange(users, mechanism)
        return exchange, exchange.first(message).decode()

    bad_first = (b"p=tls-unique,,n=alice,r=abc", b"n,,r=abc", b"n,,n=alice", b"n,,n=alice,r=", b"x,,n=alice,r=abc",
                 b"n,a=bob,n=alice,r=abc", b"n,,n=al=ice,r=abc", b"n,,n=alice,r=abc,tokenauth=true", b"\xff\xfe",
                 b"n,,n=alice,r=" + b"a" * 20_000, b"")
    for message in bad_first:
        with pytest.raises(AuthenticationFailed):
            ScramExchange(users, "SCRAM-SHA-256").first(message)
    exchange, server_first = first(b"n,a=alice,n=alice,r=abc")  # an authzid equal to the user is fine
    nonce = server_first.split(",")[0][2:]
    assert nonce.startswith("abc") and len(nonce) > 20
    proof = base64.b64encode(bytes(32)).decode()  # the right length, the wrong proof
    tampered = ("c=biws,r=NONCE,p=AAAA", f"c=biws,r=NONCEx,p={proof}", f"c=biws,r=abc,p={proof}",
                f"c=biws,r=NONCE,p={proof}",  # the gs2 header had an authzid: c= must carry it
                f"c=bixx,r=NONCE,p={proof}", "c=biws,r=NONCE,p=!!!", "c=biws,r=NONCE", f"r=NONCE,c=biws,p={proof}")
    for message in tampered:
        exchange, server_first = first(b"n,a=alice,n=alice,r=abc")
        nonce = server_first.split(",")[0][2:]
        with pytest.raises(AuthenticationFailed) as failure:
            exchange.final(message.replace("NONCE", nonce).encode())
        _assert_no_secret(str(failure.value))
    exchange, server_first = first(b"n,,n=alice,r=abc")
    with pytest.raises(AuthenticationFailed, match="invalid credentials with SASL mechanism SCRAM-SHA-256"):
        exchange.final(f"c=biws,{server_first.split(',')[0]},p={proof}".encode())
    # an unknown user gets a well-formed challenge, the same salt each time, and fails at the proof
    _, one = first(b"n,,n=nobody,r=abc", "SCRAM-SHA-512")
    _, two = first(b"n,,n=nobody,r=xyz", "SCRAM-SHA-512")
    assert one.split(",")[1:] == two.split(",")[1:] and one.split(",")[2] == "i=4096"
    assert "ScramExchange(SCRAM-SHA-256" in repr(ScramExchange(users, "SCRAM-SHA-256"))


def test_plain_checks_against_the_derived_credential_only() -> None:
    users = parse_users(USERS_TEXT.splitlines())
    assert check_plain(users, f"\0{ALICE}\0{ALICE_PW}".encode()) == ALICE
    assert check_plain(users, f"{BOB}\0{BOB}\0{BOB_PW}".encode()) == BOB
    for message in (f"\0{ALICE}\0{BOB_PW}", f"\0mallory\0{ALICE_PW}", f"{BOB}\0{ALICE}\0{ALICE_PW}",
                    f"\0{ALICE}", f"\0\0{ALICE_PW}", f"\0{ALICE}\0{ALICE_PW}\0x", f"\0{ALICE}\0"):
        with pytest.raises(AuthenticationFailed) as failure:
            check_plain(users, message.encode())
        _assert_no_secret(str(failure.value))


# ------------------------------------------------------------------------------------------------ users file


def test_users_file_format_and_errors(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    users = parse_users(USERS_TEXT.splitlines())
    assert len(users) == 2 and ALICE in users and BOB in users and "mallory" not in users
    cred, known = users.credential(BOB, "SCRAM-SHA-512")
    assert known and cred.iterations >= 4096 and len(cred.salt) == 16
    assert cred.stored_key == scram_credential(BOB_PW.encode(), "SCRAM-SHA-512", salt=cred.salt).stored_key
    for shown in (repr(users), repr(cred)):
        _assert_no_secret(shown)
        assert repr(cred.stored_key) not in shown and repr(cred.server_key) not in shown
    cases = {f"{ALICE}:{ALICE_PW}\n{ALICE}:other-pw-111": "line 2: user 'alice' is listed twice",
             f"# only a comment\n{ALICE}": "line 2: expected user:password", f":{ALICE_PW}": "line 1",
             f"{ALICE}:": "line 1", "\n# nobody\n": "lists no users"}
    for text, message in cases.items():
        with pytest.raises(InvalidConfig, match=message) as failure:
            parse_users(text.splitlines())
        _assert_no_secret(str(failure.value))
        assert "other-pw-111" not in str(failure.value)
    with pytest.raises(InvalidConfig, match="cannot read the SASL users file"):
        load_users(tmp_path / "missing.txt")
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"alice:\xff\xfe")
    with pytest.raises(InvalidConfig, match="not UTF-8"):
        load_users(binary)
    shared = tmp_path / "shared.txt"
    shared.write_text(USERS_TEXT)
    shared.chmod(0o644)
    caplog.set_level(logging.WARNING, logger="s3stream")
    assert len(load_users(shared)) == 2
    assert "can be read by other users" in caplog.text
    _assert_no_secret(caplog.text)


def test_mechanism_names() -> None:
    assert parse_mechanisms("scram-sha-512, PLAIN,,PLAIN") == ("SCRAM-SHA-512", "PLAIN")
    with pytest.raises(InvalidConfig, match="'GSSAPI' is not supported"):
        parse_mechanisms("PLAIN,GSSAPI")


def test_the_server_does_not_start_with_half_configured_sasl(tmp_path: Path, users_file: Path) -> None:
    broken = tmp_path / "broken.txt"
    broken.write_text(f"{ALICE}:{ALICE_PW}\n{ALICE}:{ALICE_PW}\n")
    broken.chmod(0o600)
    configs = {"no users file": {"sasl_enabled_mechanisms": "PLAIN"},
               "no SASL mechanism": {"sasl_users_file": str(users_file)},
               "listed twice": {"sasl_enabled_mechanisms": "PLAIN", "sasl_users_file": str(broken)},
               "not supported": {"sasl_enabled_mechanisms": "OAUTHBEARER", "sasl_users_file": str(users_file)}}
    for i, (message, options) in enumerate(configs.items()):
        with open_store(f"file://{tmp_path / f'store{i}'}", wal_dir=str(tmp_path / f"wal{i}"), probe=False) as store:
            server = KafkaServerThread(store, BrokerConfig(port=0).with_options(options))
            with pytest.raises(InvalidConfig, match=message) as failure:
                server.start()
            _assert_no_secret(str(failure.value))
            assert not server._thread.is_alive()  # a failed start leaves no listener running
