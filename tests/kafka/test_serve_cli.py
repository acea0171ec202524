"""``s3stream serve`` runs the Kafka listener beside maintenance and metrics: flags, TLS + SASL, /metrics,
a clean stop on SIGTERM, and one-line errors for every bad listener setting."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import confluent_kafka.admin
import pytest
from typer.testing import CliRunner, Result

from s3stream.apps.cli import app
from s3stream.apps.cli.runners import _broker_config

from .tlsfiles import Certs

pytestmark = pytest.mark.timeout(120)

PASSWORD = "serve-cli-secret-4Kp"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return Certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def users_file(tmp_path: Path) -> Path:
    path = tmp_path / "users"
    path.write_text(f"carol:{PASSWORD}\n")
    path.chmod(0o600)
    return path


def _serve_command(url: str, *args: str) -> list[str]:
    return [sys.executable, "-c", "from s3stream.apps.cli import main; main()", "serve", "--url", url,
            "-o", "probe=false", "--metrics-port", "0", *args]


def _wait_for(path: Path, pattern: str, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> re.Match[str]:
    for _ in range(int(timeout_s / 0.1)):
        found = re.search(pattern, path.read_text())
        if found or proc.poll() is not None:
            break
        threading.Event().wait(0.1)
    found = re.search(pattern, path.read_text())
    assert found, (proc.poll(), path.read_text())
    return found


@pytest.fixture
def running(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:  # a failed test must not leak its server
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_listens_with_tls_and_sasl_shows_kafka_metrics_and_stops_on_sigterm(
        tmp_path: Path, certs: Certs, users_file: Path, running: list[subprocess.Popen[bytes]]) -> None:
    stderr = tmp_path / "stderr"
    cmd = _serve_command((tmp_path / "store").as_uri(), "--listen", "127.0.0.1:0", "--ssl-certfile",
                         certs.server_cert, "--ssl-keyfile", certs.server_key, "--sasl-users", str(users_file),
                         "--sasl-mechanisms", "SCRAM-SHA-256,PLAIN", "--kafka-option", "num.partitions=3",
                         "-k", "kafka.acks.all=wal")
    with stderr.open("wb") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
    running.append(proc)
    listener = _wait_for(stderr, r"Kafka listener on 127\.0\.0\.1:(\d+), SASL_SSL \(SCRAM-SHA-256, PLAIN\); "
                                 r"bootstrap\.servers=(127\.0\.0\.1:\d+)", proc)
    bootstrap = listener.group(2)
    assert listener.group(1) == bootstrap.split(":")[1] != "0"
    metrics_port = _wait_for(stderr, r"metrics on http://127\.0\.0\.1:(\d+)/metrics", proc).group(1)

    errors: list[confluent_kafka.KafkaError] = []
    admin = confluent_kafka.admin.AdminClient({
        "bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": certs.ca,
        "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "carol", "sasl.password": PASSWORD,
        "error_cb": errors.append, "log_level": 0})
    metadata = admin.list_topics("auto-created", timeout=10)  # num.partitions=3 applies to auto-creation
    assert not errors and len(metadata.topics["auto-created"].partitions) == 3, (errors, metadata.topics)

    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
        body = response.read().decode()
    samples = dict(re.findall(r'^(s3stream_kafka_requests_total\{api="\w+",version="\d+"\}) (\S+)$', body, re.M))
    assert any(k.startswith('s3stream_kafka_requests_total{api="SaslAuthenticate"') for k in samples), body
    assert any(k.startswith('s3stream_kafka_requests_total{api="Metadata"') and float(v) >= 1
               for k, v in samples.items()), samples
    assert re.search(r"^s3stream_kafka_connections_accepted_total [1-9]", body, re.M)
    assert re.search(r"^s3stream_kafka_connections \d", body, re.M)
    assert re.search(r"^s3stream_kafka_bytes_in_total [1-9]", body, re.M)

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, stderr.read_text()
    text = stderr.read_text()
    assert "stopped after" in text and "store closed" in text
    assert PASSWORD not in text
    with pytest.raises(OSError):  # the listener is gone
        socket.create_connection(("127.0.0.1", int(bootstrap.split(":")[1])), timeout=2).close()


def test_serve_no_kafka_runs_maintenance_only(tmp_path: Path, running: list[subprocess.Popen[bytes]]) -> None:
    stderr = tmp_path / "stderr"
    with stderr.open("wb") as err:
        proc = subprocess.Popen(_serve_command((tmp_path / "store").as_uri(), "--no-kafka"),
                                stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
    running.append(proc)
    _wait_for(stderr, r"serving; press Ctrl-C", proc)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 0, stderr.read_text()
    assert "Kafka listener" not in stderr.read_text()


def _cli(*args: str, url: str) -> Result:
    return CliRunner().invoke(app, ["serve", "--url", url, "-o", "probe=false", "--no-metrics", *args])


def _one_error_line(result: Result) -> str:
    assert result.exit_code == 1, (result.exit_code, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def test_serve_rejects_bad_listener_settings_in_one_line(tmp_path: Path, certs: Certs, users_file: Path) -> None:
    url = (tmp_path / "store").as_uri()
    cases = {
        ("--listen", "localhost"): "--listen 'localhost' must be HOST:PORT",
        ("--advertised-listener", "a:b"): "--advertised-listener 'a:b' must be HOST:PORT",
        ("--kafka-option", "no.such.option=1"): "unknown Kafka server option 'no.such.option'",
        ("-k", "kafka.acks.all=disk"): "kafka.acks.all must be 's3' or 'wal'",
        ("-k", "auto.create.topics.enable=maybe"): "auto.create.topics.enable must be true or false",
        ("--ssl-keyfile", certs.server_key): "--ssl-keyfile and --ssl-cafile need --ssl-certfile",
        ("--ssl-certfile", str(tmp_path / "nope.pem")): "cannot use the TLS certificate/key",
        ("--sasl-mechanisms", "PLAIN"): "--sasl-mechanisms needs --sasl-users FILE",
        ("--sasl-users", str(users_file), "--sasl-mechanisms", "GSSAPI"): "SASL mechanism 'GSSAPI' is not supported",
        ("--sasl-users", str(tmp_path / "missing")): "cannot read the SASL users file",
    }
    for args, message in cases.items():
        line = _one_error_line(_cli("--listen", "127.0.0.1:0", *args, url=url))
        assert message in line, (args, line)
    assert not (tmp_path / "store").exists()  # every flag is checked before the store opens


def test_serve_reports_a_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        line = _one_error_line(_cli("--listen", f"127.0.0.1:{port}", url=(tmp_path / "store").as_uri()))
    assert f"cannot listen on 127.0.0.1:{port}" in line and "--listen" in line


def test_listener_flags_make_the_broker_config(certs: Certs, users_file: Path) -> None:
    config = _broker_config("127.0.0.1:9092", None, None, (None, None, None), None, None)
    assert (config.host, config.port, config.advertised) == ("127.0.0.1", 9092, ("127.0.0.1", 9092))
    assert config.ssl_context is None and config.sasl_enabled_mechanisms == ()
    config = _broker_config("0.0.0.0:19092", None, ["kafka.acks.all=wal", "num.partitions=2"],
                            (Path(certs.server_cert), Path(certs.server_key), Path(certs.ca)), users_file, None)
    assert config.advertised == (socket.getfqdn(), 19092)  # a wildcard bind advertises this host's name
    assert config.acks_all == "wal" and config.num_partitions == 2 and config.ssl_context is not None
    assert config.sasl_enabled_mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    assert config.sasl_users_file == str(users_file)
    config = _broker_config("[::]:9093", "kafka.example.com:443", None, (None, None, None), users_file,
                            "scram-sha-512")
    assert config.host == "::" and config.advertised == ("kafka.example.com", 443)
    assert config.sasl_enabled_mechanisms == ("SCRAM-SHA-512",)
