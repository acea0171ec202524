"""The ObjectStore contract suite: one set of tests every backend and wrapper must pass.

Use it by subclassing (pytest collects the ``Test*`` subclass, never this base)::

    class TestMyStore(ObjectStoreContract):
        @pytest.fixture
        def store(self) -> Iterator[ObjectStore]:
            yield MyStore(...)          # a fresh, empty namespace for every test

Class attributes tune the suite to a backend:

* ``atomic_conditional_writes``: the backend promises that concurrent conditional PUTs of one key
  have exactly one winner (memory, local, SeaweedFS, AWS, MinIO >= 2025-09). moto does not, so its
  subclass sets False and the race tests are skipped there (moto's check-then-put is racy).
* ``pagination_keys``: how many keys the pagination test writes; S3 subclasses shrink it and pass a
  small ``list_page_size`` to the store instead, so several pages are still crossed quickly.
* ``large_object_bytes``: the size of the large-object test; S3 subclasses set a small
  ``multipart_threshold`` so this goes through the multipart path.
* ``upload_part_bytes``: the part size of the streamed-upload tests; S3 subclasses use 5 MiB (S3's
  minimum part), others a small size so several parts are crossed cheaply.
* ``offers_get_views``: whether the store offers the optional ``get_views`` verb (stores without request
  latency: local, memory, and wrappers of them that forward it); checked either way.

What is covered (the protocol's contract, :mod:`s3stream.objectstore.protocol`): put/get round trip;
byte ranges (start/end/suffix, clipping, empty ranges, empty objects); ``get_views`` (offered or not as
the backend says; when offered, what ``get_view`` reads for each range); head; list order, prefix,
start_after and pagination; not-found for get/head; idempotent delete; put-if-absent; If-Match
(match, mismatch, missing key never succeeds); concurrent put-if-absent with exactly one winner; key
validation; a large object; binary data with every byte value; keys with spaces and non-ASCII;
streamed uploads (``open_upload``): round trips of 0 bytes, less than one part, exactly one and two
parts, parts plus a tail; nothing visible before ``complete``; ``abort`` (explicit, by an exception in
the ``with`` block, or by leaving it) leaves nothing; an upload replaces an object; bad keys refused.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import ClassVar

import pytest

from s3stream.base.errors import InvalidRequest, ObjectNotFound, PreconditionFailed
from s3stream.objectstore.protocol import ByteRange, ObjectMeta, ObjectStore

__all__ = ["ObjectStoreContract"]

MiB = 1 << 20
_DIGITS = b"0123456789"
_RANGES: list[tuple[ByteRange, bytes]] = [
    (ByteRange(2, 5), b"234"),
    (ByteRange(0, 10), _DIGITS),
    (ByteRange(7), b"789"),
    (ByteRange(8, 100), b"89"),        # clipped at the end
    (ByteRange(10), b""),              # starts exactly at the end
    (ByteRange(20, 30), b""),          # entirely past the end
    (ByteRange(3, 3), b""),            # empty by construction
    (ByteRange.last(3), b"789"),
    (ByteRange.last(100), _DIGITS),    # suffix longer than the object
    (ByteRange(9, 10), b"9"),
]
_BAD_KEYS = ["", "/abs", "a/../b", "..", "a//b", "a/./b", "trailing/", "back\\slash", "ctl\x01char"]


def _pattern(size: int) -> bytes:
    """``size`` bytes with period 251 (prime): a part out of place or repeated changes the content."""
    return (bytes(range(251)) * (size // 251 + 1))[:size]


def _race(store: ObjectStore, key: str, n: int, *, etag: str | None = None) -> list[int]:
    """``n`` threads PUT distinct bodies at once (If-None-Match, or If-Match ``etag``); the winners."""
    barrier = threading.Barrier(n)

    def attempt(i: int) -> bool:
        barrier.wait(timeout=30)
        try:
            if etag is None:
                store.put(key, f"racer-{i}".encode(), if_none_match=True)
            else:
                store.put(key, f"racer-{i}".encode(), if_match=etag)
        except PreconditionFailed:
            return False
        return True

    with ThreadPoolExecutor(max_workers=n) as pool:
        won = list(pool.map(attempt, range(n)))
    return [i for i, ok in enumerate(won) if ok]


class ObjectStoreContract:
    """The contract; subclasses provide the ``store`` fixture and tune the class attributes."""

    atomic_conditional_writes: ClassVar[bool] = True
    pagination_keys: ClassVar[int] = 1100
    large_object_bytes: ClassVar[int] = 12 * MiB
    race_threads: ClassVar[int] = 16
    upload_part_bytes: ClassVar[int] = 64 * 1024
    offers_get_views: ClassVar[bool] = False

    @pytest.fixture
    def store(self) -> ObjectStore:
        """A fresh, empty store for each test: every subclass overrides this."""
        pytest.fail(f"{type(self).__name__} must define a `store` fixture")

    # -- put / get / head -------------------------------------------------------------------------

    def test_implements_the_protocol(self, store: ObjectStore) -> None:
        assert isinstance(store, ObjectStore)

    def test_put_get_round_trip(self, store: ObjectStore) -> None:
        meta = store.put("a/b/c.bin", b"hello")
        assert (meta.key, meta.size) == ("a/b/c.bin", 5)
        assert meta.etag.startswith('"')
        assert meta.etag.endswith('"')
        assert store.get("a/b/c.bin") == b"hello"

    def test_put_accepts_bytearray_and_memoryview(self, store: ObjectStore) -> None:
        store.put("ba", bytearray(b"xyz"))
        store.put("mv", memoryview(b"--uvw--")[2:5])
        assert (store.get("ba"), store.get("mv")) == (b"xyz", b"uvw")

    def test_overwrite_replaces_content(self, store: ObjectStore) -> None:
        first = store.put("k", b"one")
        second = store.put("k", b"two-two")
        assert store.get("k") == b"two-two"
        assert first.etag != second.etag
        assert store.head("k").size == 7

    def test_head_matches_put(self, store: ObjectStore) -> None:
        meta = store.put("h/obj", b"x" * 123)
        head = store.head("h/obj")
        assert (head.key, head.size, head.etag) == ("h/obj", 123, meta.etag)
        assert head.last_modified_ms > 0

    def test_get_and_head_missing_raise_not_found(self, store: ObjectStore) -> None:
        with pytest.raises(ObjectNotFound):
            store.get("nope/missing")
        with pytest.raises(ObjectNotFound):
            store.head("nope/missing")
        with pytest.raises(FileNotFoundError):  # ObjectNotFound is also the builtin
            store.get("nope/missing", ByteRange(0, 4))

    @pytest.mark.parametrize(("byte_range", "expected"), _RANGES, ids=repr)
    def test_byte_ranges(self, store: ObjectStore, byte_range: ByteRange, expected: bytes) -> None:
        store.put("r/digits", _DIGITS)
        assert store.get("r/digits", byte_range) == expected

    @pytest.mark.parametrize(("byte_range", "expected"), [(None, _DIGITS), *_RANGES], ids=repr)
    def test_get_view_reads_what_get_reads(self, store: ObjectStore, byte_range: ByteRange | None,
                                           expected: bytes) -> None:
        store.put("r/digits", _DIGITS)
        view = store.get_view("r/digits", byte_range)
        assert isinstance(view, memoryview)
        assert (view.readonly, view.nbytes, view.tobytes()) == (True, len(expected), expected)

    def test_get_view_of_a_replaced_object_keeps_its_bytes(self, store: ObjectStore) -> None:
        data = bytes(range(256)) * 4096  # 1 MiB, every byte value
        store.put("v/obj", data)
        view = store.get_view("v/obj", ByteRange(100, len(data) - 100))
        store.put("v/obj", b"replaced")
        assert view.tobytes() == data[100:-100]
        assert store.get_view("v/obj").tobytes() == b"replaced"

    def test_get_view_of_a_missing_key_raises_not_found(self, store: ObjectStore) -> None:
        with pytest.raises(ObjectNotFound):
            store.get_view("nope/missing")
        with pytest.raises(ObjectNotFound):
            store.get_view("nope/missing", ByteRange(0, 4))

    def test_get_views_reads_what_get_view_reads_for_each_range(self, store: ObjectStore) -> None:
        get_views = getattr(store, "get_views", None)
        assert (get_views is not None) == self.offers_get_views
        if get_views is None:
            return
        store.put("r/digits", _DIGITS)
        views = get_views("r/digits", [r for r, _ in _RANGES])
        assert [(v.readonly, v.tobytes()) for v in views] == [(True, expected) for _, expected in _RANGES]
        assert get_views("r/digits", []) == []
        with pytest.raises(ObjectNotFound):
            get_views("nope/missing", [ByteRange(0, 4)])
        with pytest.raises(InvalidRequest):
            get_views("a/../b", [ByteRange(0, 4)])

    def test_ranges_of_an_empty_object(self, store: ObjectStore) -> None:
        store.put("empty", b"")
        assert store.get("empty") == b""
        assert store.head("empty").size == 0
        for byte_range in (ByteRange(0), ByteRange(0, 5), ByteRange(3, 9), ByteRange.last(4)):
            assert store.get("empty", byte_range) == b""
            assert store.get_view("empty", byte_range).nbytes == 0

    def test_binary_data_with_every_byte_value(self, store: ObjectStore) -> None:
        data = bytes(range(256)) * 64 + b"\x00\r\n\xff"
        store.put("bin/all", data)
        assert store.get("bin/all") == data
        assert store.get("bin/all", ByteRange(250, 262)) == data[250:262]

    def test_keys_with_spaces_and_unicode(self, store: ObjectStore) -> None:
        keys = ["sp/a b=1+2", "sp/ü-ñ-漢字", "sp/%20literal", "sp/x?y#z"]
        for key in keys:
            store.put(key, key.encode())
        assert [store.get(k) for k in keys] == [k.encode() for k in keys]
        assert [e.key for e in store.list("sp/")] == sorted(keys)

    def test_large_object(self, store: ObjectStore) -> None:
        n = self.large_object_bytes
        data = bytes(range(251)) * (n // 251) + b"tail"
        meta = store.put("big/object", data)
        assert meta.size == len(data) == store.head("big/object").size
        assert store.get("big/object") == data
        mid = 5 * MiB
        assert store.get("big/object", ByteRange(mid - 10, mid + 10)) == data[mid - 10:mid + 10]
        assert store.get("big/object", ByteRange.last(7)) == data[-7:]

    # -- list -------------------------------------------------------------------------------------

    _LIST_KEYS: ClassVar[list[str]] = ["a/1", "a/2", "a/10", "a-b", "b/x", "a/sub/z", "ab"]

    def _put_list_keys(self, store: ObjectStore) -> None:
        for i, key in enumerate(self._LIST_KEYS):
            store.put(key, b"v" * (i + 1))

    def test_list_everything_in_order(self, store: ObjectStore) -> None:
        self._put_list_keys(store)
        assert [e.key for e in store.list("")] == sorted(self._LIST_KEYS)

    def test_list_prefix(self, store: ObjectStore) -> None:
        self._put_list_keys(store)
        assert [e.key for e in store.list("a/")] == ["a/1", "a/10", "a/2", "a/sub/z"]
        assert [e.key for e in store.list("a")] == ["a-b", "a/1", "a/10", "a/2", "a/sub/z", "ab"]
        assert [e.key for e in store.list("a/s")] == ["a/sub/z"]
        assert [e.key for e in store.list("a/1")] == ["a/1", "a/10"]
        assert list(store.list("zzz/")) == []
        assert list(store.list("a/sub/z/")) == []

    def test_list_start_after(self, store: ObjectStore) -> None:
        self._put_list_keys(store)
        assert [e.key for e in store.list("a/", start_after="a/10")] == ["a/2", "a/sub/z"]
        assert [e.key for e in store.list("a/", start_after="a/15")] == ["a/2", "a/sub/z"]
        assert [e.key for e in store.list("", start_after="a/sub/z")] == ["ab", "b/x"]
        assert [e.key for e in store.list("a/", start_after="a/sub/z")] == []
        assert [e.key for e in store.list("b/", start_after="a")] == ["b/x"]

    def test_list_reports_size_and_mtime(self, store: ObjectStore) -> None:
        self._put_list_keys(store)
        entries = {e.key: e for e in store.list("")}
        for i, key in enumerate(self._LIST_KEYS):
            assert entries[key].size == i + 1
            assert abs(entries[key].last_modified_ms - store.head(key).last_modified_ms) < 1000

    def test_list_pagination(self, store: ObjectStore) -> None:
        keys = [f"p/{i:05d}" for i in range(self.pagination_keys)]
        with ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(lambda k: store.put(k, b"x"), keys))
        assert [e.key for e in store.list("p/")] == keys
        middle = len(keys) // 2
        assert [e.key for e in store.list("p/", start_after=keys[middle])] == keys[middle + 1:]

    # -- delete -----------------------------------------------------------------------------------

    def test_delete_is_idempotent(self, store: ObjectStore) -> None:
        store.put("d/x", b"1")
        store.put("d/y", b"2")
        store.delete("d/x")
        with pytest.raises(ObjectNotFound):
            store.get("d/x")
        store.delete("d/x")
        store.delete("never/existed")
        assert [e.key for e in store.list("d/")] == ["d/y"]

    def test_create_after_delete(self, store: ObjectStore) -> None:
        store.put("c/x", b"1", if_none_match=True)
        store.delete("c/x")
        store.put("c/x", b"2", if_none_match=True)
        assert store.get("c/x") == b"2"

    # -- conditional writes -----------------------------------------------------------------------

    def test_if_none_match_creates_once(self, store: ObjectStore) -> None:
        meta = store.put("m/00000000000000000001.json", b"first", if_none_match=True)
        with pytest.raises(PreconditionFailed):
            store.put("m/00000000000000000001.json", b"second", if_none_match=True)
        assert store.get("m/00000000000000000001.json") == b"first"
        assert store.head("m/00000000000000000001.json").etag == meta.etag

    def test_if_match_with_current_etag_replaces(self, store: ObjectStore) -> None:
        first = store.put("gc/boundary", b"10", if_none_match=True)
        second = store.put("gc/boundary", b"20", if_match=first.etag)
        assert store.get("gc/boundary") == b"20"
        assert store.head("gc/boundary").etag == second.etag != first.etag

    def test_if_match_mismatch_fails_and_keeps_content(self, store: ObjectStore) -> None:
        store.put("gc/boundary", b"10")
        with pytest.raises(PreconditionFailed):
            store.put("gc/boundary", b"30", if_match='"0123456789abcdef0123456789abcdef"')
        assert store.get("gc/boundary") == b"10"

    def test_if_match_on_missing_key_never_succeeds(self, store: ObjectStore) -> None:
        with pytest.raises((PreconditionFailed, ObjectNotFound)):
            store.put("gc/missing", b"1", if_match='"0123456789abcdef0123456789abcdef"')
        with pytest.raises(ObjectNotFound):
            store.get("gc/missing")

    def test_concurrent_if_none_match_has_one_winner(self, store: ObjectStore) -> None:
        if not self.atomic_conditional_writes:
            pytest.skip("this backend does not promise atomic conditional writes (e.g. moto)")
        for round_ in range(3):
            key = f"race/{round_:020d}.json"
            winners = _race(store, key, self.race_threads)
            assert len(winners) == 1, f"{len(winners)} winners of put-if-absent"
            assert store.get(key) == f"racer-{winners[0]}".encode()

    def test_concurrent_if_match_has_one_winner(self, store: ObjectStore) -> None:
        if not self.atomic_conditional_writes:
            pytest.skip("this backend does not promise atomic conditional writes (e.g. moto)")
        etag = store.put("race/boundary", b"base").etag
        winners = _race(store, "race/boundary", self.race_threads, etag=etag)
        assert len(winners) == 1, f"{len(winners)} winners of If-Match"
        assert store.get("race/boundary") == f"racer-{winners[0]}".encode()

    # -- keys -------------------------------------------------------------------------------------

    @pytest.mark.parametrize("key", _BAD_KEYS, ids=repr)
    def test_invalid_keys_are_refused(self, store: ObjectStore, key: str) -> None:
        with pytest.raises(InvalidRequest):
            store.put(key, b"x")
        with pytest.raises(InvalidRequest):
            store.get(key)
        with pytest.raises(InvalidRequest):
            store.delete(key)

    def test_url_is_a_display_string(self, store: ObjectStore) -> None:
        assert isinstance(store.url, str)
        assert "@" not in store.url.split("?", 1)[0]

    # -- streamed uploads -------------------------------------------------------------------------

    def _upload(self, store: ObjectStore, key: str, data: bytes) -> ObjectMeta:
        """Upload ``data`` in uneven writes (part boundaries fall inside writes)."""
        step = self.upload_part_bytes // 3 + 7
        with store.open_upload(key, part_bytes=self.upload_part_bytes) as upload:
            for at in range(0, len(data), step):
                upload.write(data[at:at + step])
            return upload.complete()

    @pytest.mark.parametrize("parts", [0.0, 0.4, 1.0, 2.0, 2.3])
    def test_upload_round_trip(self, store: ObjectStore, parts: float) -> None:
        size = int(parts * self.upload_part_bytes)
        data = _pattern(size)
        meta = self._upload(store, "up/obj", data)
        assert (meta.key, meta.size) == ("up/obj", size)
        head = store.head("up/obj")
        assert (head.size, head.etag) == (size, meta.etag)
        assert store.get("up/obj") == data
        assert [(e.key, e.size) for e in store.list("up/")] == [("up/obj", size)]

    def test_upload_in_one_write_and_empty_writes(self, store: ObjectStore) -> None:
        data = _pattern(2 * self.upload_part_bytes + 99)
        with store.open_upload("up/one", part_bytes=self.upload_part_bytes) as upload:
            upload.write(b"")
            upload.write(memoryview(data))
            upload.write(bytearray())
            meta = upload.complete()
        assert meta.size == len(data)
        assert store.get("up/one") == data

    def test_upload_is_invisible_until_complete(self, store: ObjectStore) -> None:
        data = _pattern(self.upload_part_bytes * 3 // 2)
        with store.open_upload("up/late", part_bytes=self.upload_part_bytes) as upload:
            upload.write(data)
            with pytest.raises(ObjectNotFound):
                store.head("up/late")
            assert list(store.list("up/")) == []
            upload.complete()
        assert store.get("up/late") == data

    def test_upload_abort_leaves_nothing(self, store: ObjectStore) -> None:
        upload = store.open_upload("up/gone", part_bytes=self.upload_part_bytes)
        upload.write(_pattern(self.upload_part_bytes * 5 // 2))
        upload.abort()
        upload.abort()  # idempotent
        with pytest.raises(InvalidRequest):
            upload.write(b"more")
        with pytest.raises(InvalidRequest):
            upload.complete()
        with pytest.raises(RuntimeError, match="encoder"):
            self._fail_inside_upload(store, "up/raised")
        with store.open_upload("up/left", part_bytes=self.upload_part_bytes) as up:
            up.write(_pattern(self.upload_part_bytes * 3 // 2))  # leaving without complete() aborts
        for key in ("up/gone", "up/raised", "up/left"):
            with pytest.raises(ObjectNotFound):
                store.get(key)
        assert list(store.list("up/")) == []

    def _fail_inside_upload(self, store: ObjectStore, key: str) -> None:
        with store.open_upload(key, part_bytes=self.upload_part_bytes) as upload:
            upload.write(_pattern(self.upload_part_bytes + 1))
            raise RuntimeError("the encoder failed")

    def test_upload_replaces_an_object_and_completes_once(self, store: ObjectStore) -> None:
        store.put("up/k", b"old")
        data = _pattern(self.upload_part_bytes * 3 // 2)
        with store.open_upload("up/k", part_bytes=self.upload_part_bytes) as upload:
            upload.write(data)
            meta = upload.complete()
            with pytest.raises(InvalidRequest):
                upload.complete()
            upload.abort()  # after complete: nothing to undo
        assert store.get("up/k") == data
        assert store.head("up/k").etag == meta.etag

    @pytest.mark.parametrize("key", ["", "a/../b", "trailing/"], ids=repr)
    def test_upload_refuses_invalid_keys(self, store: ObjectStore, key: str) -> None:
        with pytest.raises(InvalidRequest):
            store.open_upload(key, part_bytes=self.upload_part_bytes)
