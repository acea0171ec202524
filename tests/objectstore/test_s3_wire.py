"""What actually goes over the wire: a tiny HTTP server that fails every request and counts them.

The stubbed-client tests cannot see botocore's own retry layer (Stubber answers before it); this
can. Conditional PUTs must reach the server exactly once per outcome-unknown failure.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from s3stream.base.errors import TransientError
from s3stream.base.ids import IdSource
from s3stream.objectstore.s3 import S3ObjectStore

from .support import SleepLog

_ERROR_500 = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code>'
              b"<Message>boom</Message></Error>")


class _Failing(BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def _fail(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        type(self).hits.append(self.command)
        self.send_response(500)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(_ERROR_500)))
        self.end_headers()
        self.wfile.write(_ERROR_500)

    do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = _fail

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def failing_endpoint() -> Iterator[str]:
    _Failing.hits = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def store(failing_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3ObjectStore]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "a")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "b")
    s = S3ObjectStore("bkt", endpoint_url=failing_endpoint, clock=SleepLog(), ids=IdSource(0), max_attempts=3)
    yield s
    s.close()


def test_conditional_put_reaches_the_server_once(store: S3ObjectStore) -> None:
    with pytest.raises(TransientError):
        store.put("m/00000000000000000001.json", b"{}", if_none_match=True)
    assert _Failing.hits == ["PUT"]  # botocore did not retry behind our back


def test_idempotent_calls_are_retried_by_us_only(store: S3ObjectStore) -> None:
    with pytest.raises(TransientError):
        store.get("k")
    assert _Failing.hits == ["GET"] * 3  # our max_attempts, not botocore's
