"""Topic names follow Kafka's rules at every entry point, not only at creation: a name that is a path, ``.`` or
``..``, holds a character outside ``[a-zA-Z0-9._-]``, is longer than 249 characters or is no string is refused
with InvalidTopic by every Store method that takes one and by the CLI (one error line), before any object
key is built from it. (The rules themselves: ``tests/config/test_topic_names.py``.)"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

import s3stream
from s3stream.apps.cli import app
from s3stream.base import layout
from s3stream.base.errors import InvalidTopic, UnknownTopic
from s3stream.base.topic_config import validate_topic_name
from s3stream.objectstore.memory import MemoryObjectStore
from tests.fuzz.kit import fuzz

_NS = "security-topic-names"
INVALID: list[Any] = ["", ".", "..", "../x", "a/../b", "/abs", "a/b", "a\\b", "a b", "a:b", "é", "t\x00", "\ud800",
                      "x" * 250, ".." + "x" * 248 + "/", 42, None, b"t", 1.5]
UNHASHABLE: list[Any] = [["t"], {"t": 1}]
VALID_MISSING = ["...", "x" * 249, "a.b_c-D9", "-", "_"]

ENTRY_POINTS: dict[str, Callable[[s3stream.Store, Any], object]] = {
    "create_topic": lambda s, n: s.create_topic(n),
    "delete_topic": lambda s, n: s.delete_topic(n),
    "add_partitions": lambda s, n: s.add_partitions(n, 2),
    "alter_topic_config": lambda s, n: s.alter_topic_config(n, {"retention.ms": "1"}),
    "topic_config": lambda s, n: s.topic_config(n),
    "topic_overrides": lambda s, n: s.topic_overrides(n),
    "partitions": lambda s, n: s.partitions(n),
    "topic_id": lambda s, n: s.topic_id(n),
    "partition": lambda s, n: s.partition(n, 0),
    "describe_topic": lambda s, n: s.describe_topic(n),
}


@pytest.fixture(scope="module")
def store() -> Iterator[s3stream.Store]:
    MemoryObjectStore.drop_namespace(_NS)
    with tempfile.TemporaryDirectory() as wal, s3stream.open_store(f"memory://{_NS}", wal_dir=wal,
                                                                     probe=False) as opened:
        opened.create_topic("t")
        yield opened
    MemoryObjectStore.drop_namespace(_NS)


def _outcome(store: s3stream.Store, call: Callable[[s3stream.Store, Any], object], name: Any) -> str:
    try:
        call(store, name)
    except Exception as exc:  # noqa: BLE001 - the test reports what each call raised
        return type(exc).__name__
    return "ok"


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_invalid_names_are_invalid_topic_everywhere(store: s3stream.Store, entry: str) -> None:
    got = {repr(name)[:20]: _outcome(store, ENTRY_POINTS[entry], name) for name in INVALID}
    assert {name: kind for name, kind in got.items() if kind != "InvalidTopic"} == {}
    assert store.list_topics() == ["t"]


def test_unhashable_names_are_invalid_topic_everywhere(store: s3stream.Store) -> None:
    """A list or dict as the name reached the topic catalog's caches: TypeError (unhashable type)."""
    got = {(entry, repr(name)): _outcome(store, call, name) for entry, call in sorted(ENTRY_POINTS.items())
           for name in UNHASHABLE}
    assert {key: kind for key, kind in got.items() if kind != "InvalidTopic"} == {}


@pytest.mark.parametrize("entry", sorted(set(ENTRY_POINTS) - {"create_topic"}))
def test_valid_names_of_missing_topics_are_unknown(store: s3stream.Store, entry: str) -> None:
    for name in VALID_MISSING:
        with pytest.raises(UnknownTopic):
            ENTRY_POINTS[entry](store, name)


def test_the_longest_and_oddest_valid_names_work(tmp_path: Any) -> None:
    with s3stream.open_store("memory://security-valid-names", wal_dir=str(tmp_path), probe=False) as store:
        for name in VALID_MISSING:
            store.create_topic(name)
            store.partition(name, 0).append([s3stream.Record(b"k", name.encode())])
            assert [r.value for r in store.partition(name, 0).read(0)] == [name.encode()]
        assert sorted(store.list_topics()) == sorted(VALID_MISSING)
    MemoryObjectStore.drop_namespace("security-valid-names")


@fuzz(200)
@given(st.one_of(st.text(max_size=260), st.text(st.sampled_from("aZ09._-/\\ \x00é"), max_size=260)))
def test_a_key_is_built_only_from_a_valid_name(name: str) -> None:
    """Kafka's rule, checked where a name becomes an object key: valid names pass through unchanged."""
    valid = (0 < len(name) <= 249 and name not in (".", "..")
             and all(c.isascii() and (c.isalnum() or c in "._-") for c in name))
    if valid:
        assert validate_topic_name(name) == name
        assert layout.topic_meta_key(name, 3) == f"topics/{name}/meta/00000000000000000003.json"
    else:
        with pytest.raises(InvalidTopic):
            layout.topic_meta_prefix(name)


@pytest.mark.parametrize("command", [["topic", "create"], ["topic", "describe"], ["topic", "delete"],
                                     ["topic", "alter", "-c", "retention.ms=1"], ["produce"], ["consume"],
                                     ["manifest", "show", "{name}", "0"], ["delete-records", "{name}", "0", "0"]])
@pytest.mark.parametrize("name", ["../x", "a/b", ".", "x" * 250, "a b"])
def test_the_cli_refuses_invalid_names_in_one_line(tmp_path: Any, command: list[str], name: str) -> None:
    argv = [name if part == "{name}" else part for part in command]
    if "{name}" not in command:
        argv.insert(2 if command[0] == "topic" else 1, name)
    result = CliRunner().invoke(app, [*argv, "--url", (tmp_path / "s").as_uri(), "-o", "probe=false"], input="v\n")
    assert result.exit_code == 1, (argv, result.stdout, result.stderr, result.exception)
    assert "Traceback" not in result.stdout + result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "Topic name" in last, (argv, result.stderr)
