"""Every failure of an append, a read or a store call is an S3StreamError (issue 25, item 6): wrong inputs are
typed at the API edge, and a bug inside a drain round reaches the append's future as an InternalError."""

from __future__ import annotations

from pathlib import Path

import pytest

import s3stream
from s3stream import Record
from s3stream.base.errors import InternalError, InvalidArgument, S3StreamError
from s3stream.format import walentry

from .helpers import open_mem, read_all, values


def test_wrong_store_call_arguments_are_typed(mem_url: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="URL"):
        s3stream.open_store(None)  # type: ignore[arg-type]
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t")
        with pytest.raises(InvalidArgument, match="config"):
            store.create_topic("u", 1, config=[("retention.ms", "1")])  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="updates"):
            store.alter_topic_config("t", None)  # type: ignore[arg-type]
        for call in (lambda: store.partition(None, 0), lambda: store.partitions(5),  # type: ignore[arg-type]
                     lambda: store.describe_topic(None), lambda: store.add_partitions(None, 2)):  # type: ignore[arg-type]
            with pytest.raises(S3StreamError):
                call()
        assert "u" not in store.list_topics()


def test_a_bug_in_a_drain_round_fails_the_futures_typed(mem_url: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t")
        log = store.partition("t", 0)
        log.append([Record(b"k", b"before")])

        def broken(entry: object) -> bytes:
            raise KeyError("a bug")

        monkeypatch.setattr("s3stream.partition.appends.encode_entry", broken)
        future = log.append_async([Record(b"k", b"lost")])
        with pytest.raises(InternalError, match="a bug") as info:
            future.result(timeout=30)
        assert isinstance(info.value.__cause__, KeyError)
        with pytest.raises(InternalError):
            log.append([Record(b"k", b"lost")])
        monkeypatch.setattr("s3stream.partition.appends.encode_entry", walentry.encode_entry)
        log.append([Record(b"k", b"after")])  # nothing of the failed rounds was written: offsets stay dense
        assert values(read_all(log)) == [b"before", b"after"]
