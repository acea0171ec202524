"""Processes and the CLI (issue 24, item 8): ``serve`` with a metrics address it cannot bind prints one
error line; an endpoint carrying credentials is refused without echoing them; seal workers whose parent
dies exit quietly (their stderr is the application's)."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from s3stream.apps.servers import free_ports

from .helpers import Cli, error_line


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_serve_with_a_busy_metrics_port_prints_one_line(cli: Cli, busy_port: int) -> None:
    result = cli("serve", "--once", "--metrics-port", str(busy_port))
    assert result.exit_code == 1, (result.stdout, result.stderr, result.exception)
    line = error_line(result)  # no traceback, one line
    assert f"127.0.0.1:{busy_port}" in line and "in use" in line and "--metrics-port" in line


@pytest.mark.parametrize("host", ["no-such-host.invalid", "203.0.113.7", "a" * 300])
def test_serve_with_an_invalid_metrics_host_prints_one_line(cli: Cli, host: str) -> None:
    result = cli("serve", "--once", "--metrics-port", "0", "--metrics-host", host)
    assert result.exit_code == 1, (result.stdout, result.stderr, result.exception)
    line = error_line(result)
    assert "cannot serve metrics on" in line and "--metrics-host" in line


def test_an_endpoint_with_credentials_is_refused_unechoed(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "fake-access")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fake-secret-0123456789")
    (port,) = free_ports(1)
    url = f"s3://bkt/p?endpoint_url=http://admin:hunter2secret@127.0.0.1:{port}"
    result = cli("topic", "list", "--url", url)
    assert result.exit_code == 1
    line = error_line(result)
    assert "must not carry credentials" in line
    assert "hunter2secret" not in result.stderr + result.stdout


@pytest.mark.parametrize(("line", "match"), [
    ('{"value": "v", "timestamp": 99999999999999999999999}', "timestamp 99999999999999999999999 is out of range"),
    ('{"value": "v", "timestamp": true}', "timestamp must be an integer"),
])
def test_produce_refuses_a_bad_timestamp_naming_the_line(cli: Cli, line: str, match: str) -> None:
    cli.ok("topic", "create", "t")
    result = cli("produce", "t", "--format", "jsonl", input='{"value": "ok"}\n' + line + "\n")
    assert result.exit_code == 1
    error = error_line(result)  # a timestamp past int64 is refused by Record now: the line is still named
    assert "line 2" in error and match in error


# ------------------------------------------------------------------------------------------ seal workers

_PARENT = textwrap.dedent("""
    import os, sys, time
    import s3stream
    from s3stream import Record
    from s3stream.write import sealworker

    root = sys.argv[1]
    real_call, real_send = sealworker._Worker.call, sealworker.send_job

    def call(self, job):
        print(f"job {self.proc.pid}", flush=True)
        return real_call(self, job)

    def send(conn, job):
        real_send(conn, job)
        print("sent", flush=True)  # the whole job is in the worker's socket: it will run it

    sealworker._Worker.call, sealworker.send_job = call, send
    store = s3stream.open_store(f"file://{root}/data", wal_dir=f"{root}/wal", probe=False,
                                seal_workers="process", flush_interval_ms=3_600_000)
    store.create_topic("t", config={"segment.bytes": 1 << 30})
    log = store.partition("t", 0)
    log.append([Record(b"first", b"v")])
    log.roll()
    print("rolled", flush=True)
    sys.stdin.readline()
    blob = os.urandom(1 << 19)
    for i in range(48):  # a 24 MB segment: its seal takes the worker a good part of a second
        log.append([Record(b"k%d" % i, blob[i:])])
    log.roll()
    print("rolled again (the parent was not killed in time)", flush=True)
    time.sleep(60)
""")


def _gone(pid: int) -> bool:
    """Whether ``pid`` exited (a zombie counts: the killed parent's orphans may wait for a reaper)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def _lines(stream: object, out: queue.Queue[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        out.put(line.strip())


def _expect(lines: queue.Queue[str], prefix: str, timeout_s: float = 120.0) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        if line.startswith(prefix):
            return line


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_seal_workers_of_a_killed_parent_exit_without_a_traceback(tmp_path: Path) -> None:
    stderr_path = tmp_path / "stderr.txt"
    with stderr_path.open("wb") as stderr:
        parent = subprocess.Popen([sys.executable, "-c", _PARENT, str(tmp_path)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=stderr, text=True)
    assert parent.stdin is not None and parent.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_lines, args=(parent.stdout, lines), daemon=True).start()
    pids: set[int] = set()
    try:
        pids.add(int(_expect(lines, "job ").split()[1]))
        _expect(lines, "rolled")
        # Ctrl-C in a terminal reaches the whole process group: an idle worker must not die of it, loudly
        first = next(iter(pids))
        os.kill(first, signal.SIGINT)
        time.sleep(1.0)
        assert not _gone(first), "a seal worker died of SIGINT (its parent stops it)"
        parent.stdin.write("go\n")
        parent.stdin.flush()
        pids.add(int(_expect(lines, "job ").split()[1]))
        _expect(lines, "sent")
        parent.kill()  # SIGKILL mid-seal: the worker finishes its job, then finds nobody to answer
        parent.wait(timeout=30)
        deadline = time.monotonic() + 60
        while not all(_gone(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all(_gone(pid) for pid in pids), f"seal workers {pids} outlived their parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for pid in pids:
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
    text = stderr_path.read_text()
    assert not any(line.startswith("rolled again") for line in list(lines.queue)), "the seal ended before the kill"
    assert "Traceback" not in text and "Error" not in text, text
