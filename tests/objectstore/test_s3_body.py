"""``S3ObjectStore.get_view`` reads bodies into Arrow's pooled memory (:mod:`s3stream.objectstore.s3body`).

A tiny HTTP/1.1 server plays S3's GET: it can cut a body short, encode it, and tells which client
connection each request came on, so these tests see what the socket-level read does to the connection.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pyarrow as pa
import pytest
from botocore.response import StreamingBody

from s3stream.base.errors import TransientError
from s3stream.base.ids import IdSource
from s3stream.objectstore.protocol import ByteRange
from s3stream.objectstore.s3 import S3ObjectStore
from s3stream.objectstore.s3body import read_body_pooled

from .support import SleepLog

_DATA = bytes(range(256)) * 4096  # 1 MiB


class _Objects(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: a connection can serve several GETs
    peers: ClassVar[list[int]] = []  # the client port of every GET, in order
    short_first: ClassVar[int] = 0  # this many GETs send half the body, then close the connection
    encoding: ClassVar[str | None] = None

    def do_GET(self) -> None:
        type(self).peers.append(self.client_address[1])
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(_DATA)))
        if type(self).encoding:
            self.send_header("Content-Encoding", str(type(self).encoding))
        self.end_headers()
        if type(self).short_first > 0:
            type(self).short_first -= 1
            self.wfile.write(_DATA[: len(_DATA) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(_DATA)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3ObjectStore]:
    _Objects.peers, _Objects.short_first, _Objects.encoding = [], 0, None
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Objects)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "a")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "b")
    s = S3ObjectStore("bkt", endpoint_url=f"http://127.0.0.1:{server.server_address[1]}", clock=SleepLog(),
                      ids=IdSource(0), max_attempts=3)
    yield s
    s.close()
    server.shutdown()
    server.server_close()
    thread.join()


def test_get_view_reads_into_pooled_memory_and_keeps_the_connection(store: S3ObjectStore) -> None:
    views = [store.get_view("k") for _ in range(4)]
    for view in views:
        assert view == _DATA
        assert view.readonly
        assert isinstance(view.obj, pa.Buffer)  # Arrow's pool, not a bytes botocore made
    assert len(_Objects.peers) == 4
    assert len(set(_Objects.peers)) == 1  # the connection went back to the pool after each body


def test_get_view_of_a_range_slices_a_whole_body(store: S3ObjectStore) -> None:
    # this server ignores Range (a 200 without Content-Range): the store slices the whole object
    assert store.get_view("k", ByteRange(1000, 5000)) == _DATA[1000:5000]


def test_a_body_cut_short_is_retried_on_a_new_connection(store: S3ObjectStore) -> None:
    _Objects.short_first = 1
    assert store.get_view("k") == _DATA
    assert len(_Objects.peers) == 2
    assert _Objects.peers[0] != _Objects.peers[1]  # the broken connection was not reused


def test_bodies_cut_short_every_time_are_a_transient_error(store: S3ObjectStore) -> None:
    _Objects.short_first = 99
    with pytest.raises(TransientError):
        store.get_view("k")
    assert len(_Objects.peers) == 3  # max_attempts


def test_an_encoded_body_is_read_as_botocore_reads_it(store: S3ObjectStore) -> None:
    _Objects.encoding = "gzip"  # not the plain shape: botocore's read(), bytes exactly as get returns them
    view = store.get_view("k")
    assert view == store.get("k")
    assert not isinstance(view.obj, pa.Buffer)


def test_a_body_of_another_shape_is_read_with_read() -> None:
    body = StreamingBody(io.BytesIO(b"abcdef"), 6)  # no urllib3 response under it
    view = read_body_pooled({"Body": body, "ContentLength": 6})
    assert view == b"abcdef"
