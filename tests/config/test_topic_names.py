"""Topic names follow Kafka's Topic.validate (with its messages) and its '.'/'_' collision rule."""

from __future__ import annotations

import string

import pytest

from s3stream.base.errors import InvalidRequest, InvalidTopic
from s3stream.base.topic_config import MAX_TOPIC_NAME_LENGTH, topic_collision_name, validate_topic_name


@pytest.mark.parametrize("name", [
    "orders", "a", "A-b_c.d", "__consumer_offsets", "...", ".a", "a..", "-", "_", "0",
    string.ascii_letters + string.digits + "._-", "x" * 249,
])
def test_valid_names_are_returned_unchanged(name: str) -> None:
    assert validate_topic_name(name) == name


def test_max_length_is_249() -> None:
    assert MAX_TOPIC_NAME_LENGTH == 249
    validate_topic_name("t" * 249)
    with pytest.raises(InvalidTopic) as info:
        validate_topic_name("t" * 250)
    assert str(info.value).startswith("Topic name is illegal, it can't be longer than 249 characters")


def test_empty_name() -> None:
    with pytest.raises(InvalidTopic, match=r"^Topic name is illegal, it can't be empty$"):
        validate_topic_name("")


@pytest.mark.parametrize("name", [".", ".."])
def test_dot_and_dot_dot(name: str) -> None:
    with pytest.raises(InvalidTopic) as info:
        validate_topic_name(name)
    assert str(info.value) == 'Topic name cannot be "." or ".."'


@pytest.mark.parametrize("name", [
    "with space", "a/b", "a\\b", "a:b", "a*b", "a,b", "tab\t", "new\nline", "nul\x00", "a+b", "a@b",
    "ünïcödé", "日本語", "café", "x\u200b", "１２", "a%2Fb",
])
def test_illegal_characters_including_unicode(name: str) -> None:
    with pytest.raises(InvalidTopic) as info:
        validate_topic_name(name)
    assert str(info.value) == (f'Topic name "{name}" is illegal, it contains a character other than '
                               "ASCII alphanumerics, '.', '_' and '-'")
    assert isinstance(info.value, InvalidRequest)


def test_length_is_checked_before_characters() -> None:
    with pytest.raises(InvalidTopic, match="longer than 249"):
        validate_topic_name("é" * 300)


def test_non_string_name() -> None:
    with pytest.raises(InvalidTopic, match="must be a string"):
        validate_topic_name(42)  # type: ignore[arg-type]


def test_collision_name() -> None:
    assert topic_collision_name("a.b") == topic_collision_name("a_b") == "a_b"
    assert topic_collision_name("a.b.c_d") == "a_b_c_d"
    assert topic_collision_name("plain-name") == "plain-name"
    assert topic_collision_name("a.b") != topic_collision_name("a-b")
