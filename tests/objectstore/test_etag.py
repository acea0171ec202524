"""The ETag our own stores compute: a function of the content alone, whichever path wrote or re-read it."""

from __future__ import annotations

from pathlib import Path

from s3stream.objectstore.etag import EtagHasher, content_etag
from s3stream.objectstore.local import LocalObjectStore
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.objectstore.protocol import ObjectMeta

P = 1000  # part size of the streamed upload: several parts, each hashed as it is sent


def data_of(size: int) -> bytes:
    return (bytes(range(251)) * (size // 251 + 1))[:size]


def test_etag_is_quoted_128_bit_hex_of_the_content() -> None:
    etag = content_etag(b"abc")
    assert etag.startswith('"') and etag.endswith('"') and len(etag) == 34
    int(etag[1:-1], 16)
    assert content_etag(bytearray(b"abc")) == content_etag(memoryview(b"abc")) == etag
    assert content_etag(b"abd") != etag


def test_pieces_hash_like_the_whole() -> None:
    whole = data_of(3 * 1000 + 7)
    hasher = EtagHasher()
    for i in range(0, len(whole), 1000):
        hasher.update(memoryview(whole)[i:i + 1000])
    assert hasher.etag == content_etag(whole)


def test_put_upload_and_reread_agree_on_one_etag(tmp_path: Path) -> None:
    data = data_of(2 * P + 3)
    store = LocalObjectStore(tmp_path / "root")
    put = store.put("a/put", data)
    with store.open_upload("a/streamed", part_bytes=P) as up:
        for at in range(0, len(data), 333):
            up.write(data[at:at + 333])
        streamed: ObjectMeta = up.complete()
    assert put.etag == streamed.etag == content_etag(data)
    fresh = LocalObjectStore(tmp_path / "root")  # no cached ETag: recomputed from the file's bytes
    assert fresh.head("a/put").etag == fresh.head("a/streamed").etag == put.etag
    assert MemoryObjectStore("etag-test").put("a/put", data).etag == put.etag
