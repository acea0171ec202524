"""No credential leaks: secrets planted in the environment (the AWS secret key and session token) and in an
endpoint URL (``user:password@``) never appear in logs captured at DEBUG (s3stream's and its libraries'),
in error messages and their whole tracebacks, in the Prometheus registry, in ``describe``/``repr`` output,
or in anything the CLI prints (``dump`` included), on S3 (moto) and on the file backend."""

from __future__ import annotations

import itertools
import logging
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from typer.testing import CliRunner

import s3stream
from s3stream import ManualClock, Record
from s3stream.apps.cli import app
from s3stream.apps.servers import free_ports
from s3stream.base.errors import S3StreamError
from s3stream.objectstore.s3 import S3ObjectStore

T0 = 1_700_000_000_000
KEY_ID = "AKIAPLANTEDKEY7F3A9C"
SECRET = "planted-SECRET-never-print-7f3a9c"
TOKEN = "planted-TOKEN-never-print-c0ffee"
PASSWORD = "planted-PASSWORD-never-print-1234"
_PREFIXES = itertools.count()
#: what must never be printed, by what planted it
CREDENTIALS = {"AWS_SECRET_ACCESS_KEY": SECRET, "AWS_SESSION_TOKEN": TOKEN, "endpoint password": PASSWORD}


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch, moto_endpoint: str) -> Iterator[str]:
    """Credentials with recognisable values (moto accepts any) and a bucket; yields the bucket's store URL."""
    for name in ("AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_SESSION_TOKEN", TOKEN)
    admin = S3ObjectStore("planted-credentials", endpoint_url=moto_endpoint, region="us-east-1")
    admin.ensure_bucket()
    admin.close()
    yield f"s3://planted-credentials/p{next(_PREFIXES)}?endpoint_url={moto_endpoint}&region=us-east-1"


def _leaks(text: str) -> list[str]:
    return [name for name, value in CREDENTIALS.items() if value in text]


def _log_text(caplog: pytest.LogCaptureFixture) -> str:
    """Every captured record as a handler would print it: the message with its args, and any exception."""
    parts = []
    for record in caplog.records:
        parts.append(record.getMessage())
        if record.exc_info:
            parts.extend(traceback.format_exception(*record.exc_info))
    return "\n".join(parts) + caplog.text


def _leaking_loggers(caplog: pytest.LogCaptureFixture, value: str) -> list[str]:
    """The loggers whose records (as printed) hold ``value``."""
    return sorted({r.name for r in caplog.records if value in r.getMessage()
                   or (r.exc_info and value in "".join(traceback.format_exception(*r.exc_info)))})


def _error_text(exc: BaseException) -> str:
    """An exception as any handler could show it: its message, repr, and the whole chained traceback."""
    return "\n".join([str(exc), repr(exc), *traceback.format_exception(exc)])


def _work(url: str, wal: Path) -> str:
    """A store's whole life on ``url``: everything it printed or exposed (logs are captured separately)."""
    shown: list[str] = []
    with s3stream.open_store(url, wal_dir=str(wal), clock=ManualClock(T0), probe=True, seal_workers="thread",
                             flush_interval_ms=20, orphan_min_age_ms=0) as store:
        store.create_topic("t", config={"cleanup.policy": "compact,delete"})
        log = store.partition("t", 0)
        log.append([Record(b"k%d" % (i % 3), b"v%d" % i, T0 + i, [("h", b"x")]) for i in range(20)])
        log.roll()
        log.append([Record(b"k", b"tail", T0 + 30)])
        store.flush()
        shown += [repr(r) for r in log.read(0)]
        store.clock.advance(86_400_000)  # type: ignore[attr-defined]
        shown += [repr(store.run_retention()), repr(store.run_cleaner()), repr(store.collect_garbage())]
        shown += [repr(store), store.url, repr(store.settings), repr(store.describe_topic("t")),
                  repr(store.object_store), str(store.object_store.url)]
        shown.append(generate_latest(store.metrics_registry).decode())
    return "\n".join(shown)


@pytest.mark.s3
@pytest.mark.parametrize("credential", ["AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"])
def test_a_store_on_s3_prints_no_credential(planted: str, tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                            credential: str) -> None:
    """Logs at DEBUG include botocore's: its request dumps (``botocore.endpoint``) and canonical requests
    (``botocore.auth``) carried the session token (the X-Amz-Security-Token header) in every request."""
    caplog.set_level(logging.DEBUG)
    shown = _work(planted, tmp_path / "wal")
    assert shown and caplog.records
    assert credential not in _leaks(shown)
    assert _leaking_loggers(caplog, CREDENTIALS[credential]) == []
    assert credential not in _leaks(caplog.text)


@pytest.mark.s3
def test_errors_carry_no_credential(planted: str, moto_endpoint: str, tmp_path: Path,
                                    caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    host = moto_endpoint.removeprefix("http://")
    (closed_port,) = free_ports(1)
    attempts = [
        f"s3://planted-credentials/p?endpoint_url=http://admin:{PASSWORD}@{host}&region=us-east-1",
        f"s3://planted-credentials/p?endpoint_url=http://{PASSWORD}@{host}",
        f"s3://admin:{PASSWORD}@planted-credentials/p?endpoint_url={moto_endpoint}",
        f"s3://no-such-bucket-here/p?endpoint_url={moto_endpoint}&region=us-east-1",
        f"s3://planted-credentials/p?endpoint_url=http://127.0.0.1:{closed_port}&region=us-east-1",
        f"s3://planted-credentials/p?endpoint_url={moto_endpoint}&secret_key={PASSWORD}",
    ]
    errors: list[str] = []
    for url in attempts:
        with pytest.raises(S3StreamError) as info:
            s3stream.open_store(url, wal_dir=str(tmp_path / "wal"), probe=False)
        errors.append(_error_text(info.value))
    with pytest.raises(S3StreamError) as info:
        s3stream.open_store(planted, wal_dir=str(tmp_path / "wal"), probe=False, secret_access_key=PASSWORD)
    errors.append(_error_text(info.value))
    with s3stream.open_store(planted, wal_dir=str(tmp_path / "wal"), probe=False) as store:
        for call in (lambda: store.partition("missing", 0), lambda: store.create_topic("t", config={"x": PASSWORD}),
                     lambda: store.object_store.get("no/such/key")):
            with pytest.raises(S3StreamError) as info:
                call()
            errors.append(_error_text(info.value))
    text = "\n".join(errors)
    assert "must not carry credentials" in text
    assert _leaks(text) == []
    # (the session token in botocore's request dumps is test_a_store_on_s3_prints_no_credential's)
    assert not {"AWS_SECRET_ACCESS_KEY", "endpoint password"} & set(_leaks(_log_text(caplog)))


def _cli(url: str, *args: str, input: str | None = None) -> str:
    result = CliRunner().invoke(app, [*args, "--url", url], input=input)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.stdout + result.stderr


@pytest.mark.s3
def test_the_cli_prints_no_credential(planted: str, moto_endpoint: str, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    out = [_cli(planted, "topic", "create", "t", "-o", "probe=false", "-o", "seal.workers=thread"),
           _cli(planted, "produce", "t", "-o", "probe=false", "-o", "seal.workers=thread", input="a\nb\n"),
           _cli(planted, "consume", "t", "-o", "probe=false"),
           _cli(planted, "topic", "describe", "t", "-o", "probe=false"),
           _cli(planted, "topic", "list", "-o", "probe=false"),
           _cli(planted, "manifest", "show", "t", "0", "-o", "probe=false"),
           _cli(planted, "gc", "run", "-o", "probe=false"),
           _cli(planted, "serve", "--once", "--no-metrics", "-o", "probe=false", "-o", "seal.workers=thread")]
    with s3stream.open_store(planted, wal_dir=str(tmp_path / "w"), probe=False) as store:
        keys = [e.key for e in store.object_store.list("wal/")]
    assert keys
    out += [_cli(planted, "dump", keys[0]), _cli(planted, "dump", keys[0], "--json", "--records")]
    host = moto_endpoint.removeprefix("http://")
    out += [_cli(f"s3://planted-credentials/p?endpoint_url=http://admin:{PASSWORD}@{host}", "topic", "list"),
            _cli(f"s3://planted-credentials/p?endpoint_url=http://admin:{PASSWORD}@{host}", "dump", "x.wal"),
            _cli(planted, "topic", "list", "-o", f"aws_secret_access_key={PASSWORD}"),
            _cli(planted, "topic", "list", "-o", f"secret={PASSWORD}")]
    text = "\n".join(out)
    assert "t" in text and "must not carry credentials" in text
    assert _leaks(text) == []


def test_a_file_store_prints_no_credential(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials in the environment are nobody's business on the file backend either."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_SESSION_TOKEN", TOKEN)
    caplog.set_level(logging.DEBUG)
    with tempfile.TemporaryDirectory() as wal:
        shown = _work((tmp_path / "data").as_uri(), Path(wal))
    assert _leaks(shown) == [] and _leaks(_log_text(caplog)) == []
