"""Topic configs: Kafka defaults, every validation rule at its boundaries, canonical forms, cross-field
rules, alter, the effective config and the typed TopicConfig view."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s3stream.base.errors import InvalidConfig, InvalidRequest
from s3stream.base.topic_config import (
    LONG_MAX,
    TOPIC_CONFIGS,
    TopicConfig,
    alter_topic_config,
    effective_topic_config,
    normalize_topic_config,
)

INT_MAX = 2**31 - 1

# The contract (Kafka 3.x defaults, docs/design/kafka-rules.md CFG-1), written out independently of the table.
EXPECTED_DEFAULTS = {
    "cleanup.policy": "delete",
    "retention.ms": "604800000",
    "retention.bytes": "-1",
    "segment.bytes": "1073741824",
    "segment.ms": "604800000",
    "segment.jitter.ms": "0",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "max.compaction.lag.ms": "9223372036854775807",
    "delete.retention.ms": "86400000",
    "file.delete.delay.ms": "60000",
    "max.message.bytes": "1048588",
    "message.timestamp.type": "CreateTime",
    "message.timestamp.before.max.ms": "9223372036854775807",
    "message.timestamp.after.max.ms": "9223372036854775807",
    "segment.index.bytes": "10485760",
    "index.interval.bytes": "4096",
    "compression.type": "producer",
    "min.insync.replicas": "1",
    "s3stream.tombstone.cleanup.on.idle": "false",
}

# key -> (smallest valid value, largest valid value): the value just outside each bound is rejected.
NUMERIC_BOUNDS: dict[str, tuple[int, int]] = {
    "retention.ms": (-1, LONG_MAX),
    "segment.bytes": (14, INT_MAX),
    "segment.ms": (1, LONG_MAX),
    "segment.jitter.ms": (0, LONG_MAX),
    "min.compaction.lag.ms": (0, LONG_MAX),
    "max.compaction.lag.ms": (1, LONG_MAX),
    "delete.retention.ms": (0, LONG_MAX),
    "file.delete.delay.ms": (0, LONG_MAX),
    "max.message.bytes": (0, INT_MAX),
    "message.timestamp.before.max.ms": (0, LONG_MAX),
    "message.timestamp.after.max.ms": (0, LONG_MAX),
    "segment.index.bytes": (4, INT_MAX),
    "index.interval.bytes": (0, INT_MAX),
    "min.insync.replicas": (1, INT_MAX),
}


def _reject(key: str, raw: object) -> InvalidConfig:
    with pytest.raises(InvalidConfig) as info:
        normalize_topic_config({key: raw})
    assert info.value.key == key
    return info.value


# -- defaults and the table ------------------------------------------------------------------------

def test_defaults_are_kafkas() -> None:
    for key, default in EXPECTED_DEFAULTS.items():
        assert TOPIC_CONFIGS[key].default == default, key


def test_every_default_is_valid_and_canonical() -> None:
    for key, cdef in TOPIC_CONFIGS.items():
        assert cdef.name == key
        assert cdef.validate(cdef.default) == cdef.default


def test_effective_config_of_no_overrides_is_all_defaults() -> None:
    eff = effective_topic_config({})
    assert eff == {k: d.default for k, d in TOPIC_CONFIGS.items()}
    assert set(EXPECTED_DEFAULTS) <= set(eff)


def test_extension_keys_are_namespaced() -> None:
    kafka_prefixes = ("s3stream.",)
    extensions = [k for k, d in TOPIC_CONFIGS.items() if d.broker_synonym is None]
    assert extensions == ["s3stream.tombstone.cleanup.on.idle"]
    assert all(k.startswith(kafka_prefixes) for k in extensions)


# -- numeric validation ----------------------------------------------------------------------------

@pytest.mark.parametrize("key", sorted(NUMERIC_BOUNDS))
def test_numeric_bounds(key: str) -> None:
    low, high = NUMERIC_BOUNDS[key]
    cross = {"min.compaction.lag.ms": 0} if key == "max.compaction.lag.ms" else {}
    assert normalize_topic_config({key: low, **cross})[key] == str(low)
    assert normalize_topic_config({key: high})[key] == str(high)
    err = _reject(key, low - 1)
    assert str(err) == f"Invalid value {low - 1} for configuration {key}: Value must be at least {low}"
    assert "Expected value to be" in str(_reject(key, high + 1))


def test_retention_bytes_accepts_any_long() -> None:
    for value in (-(2**63), -5, -1, 0, 1, LONG_MAX):
        assert normalize_topic_config({"retention.bytes": value}) == {"retention.bytes": str(value)}
    _reject("retention.bytes", 2**63)
    _reject("retention.bytes", -(2**63) - 1)


def test_segment_bytes_follows_kafka_3_minimum() -> None:
    assert normalize_topic_config({"segment.bytes": "14"}) == {"segment.bytes": "14"}
    assert str(_reject("segment.bytes", 13)).endswith("Value must be at least 14")


@pytest.mark.parametrize(("raw", "canonical"), [
    (100, "100"), ("100", "100"), (" 100 ", "100"), ("+100", "100"), (100.0, "100"), ("-1", "-1"),
    ("0000042", "42"),
])
def test_integer_forms(raw: object, canonical: str) -> None:
    assert normalize_topic_config({"retention.ms": raw}) == {"retention.ms": canonical}


@pytest.mark.parametrize("raw", [
    True, False, 1.5, math.nan, math.inf, "1e3", "1_000", "10ms", "", " ", "0x10", "١٢", None, [1], b"1",
])
def test_integer_rejects(raw: object) -> None:
    err = _reject("retention.ms", raw)
    assert str(err).startswith(f"Invalid value {raw!r} for configuration retention.ms: ")


@pytest.mark.parametrize(("raw", "canonical"), [
    (0, "0.0"), (1, "1.0"), (0.5, "0.5"), ("0.5", "0.5"), (" .25 ", "0.25"), ("1.", "1.0"),
    ("5e-1", "0.5"), (0.001, "0.001"), (0.0001, "1.0E-4"), (1e-5, "1.0E-5"), ("0.10", "0.1"),
    (-0.0, "0.0"),
])
def test_double_forms(raw: object, canonical: str) -> None:
    key = "min.cleanable.dirty.ratio"
    assert normalize_topic_config({key: raw}) == {key: canonical}


def test_double_bounds() -> None:
    assert str(_reject("min.cleanable.dirty.ratio", 1.0000001)).endswith("Value must be no more than 1.0")
    assert str(_reject("min.cleanable.dirty.ratio", -0.1)).endswith("Value must be at least 0.0")
    for raw in ("NaN", "Infinity", math.nan, math.inf, True, "abc", "", "1,5"):
        _reject("min.cleanable.dirty.ratio", raw)


# -- strings, lists, booleans ----------------------------------------------------------------------

def test_timestamp_type_is_case_sensitive_like_kafka() -> None:
    assert normalize_topic_config({"message.timestamp.type": " LogAppendTime "}) == {
        "message.timestamp.type": "LogAppendTime"}
    err = _reject("message.timestamp.type", "logappendtime")
    assert str(err) == ("Invalid value 'logappendtime' for configuration message.timestamp.type: "
                        "String must be one of: CreateTime, LogAppendTime")
    _reject("message.timestamp.type", 1)


@pytest.mark.parametrize("value", ["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"])
def test_compression_types(value: str) -> None:
    assert normalize_topic_config({"compression.type": value}) == {"compression.type": value}


def test_compression_type_rejects_unknown_codec() -> None:
    _reject("compression.type", "brotli")


@pytest.mark.parametrize(("raw", "canonical"), [
    ("compact", "compact"), ("delete", "delete"), ("compact,delete", "compact,delete"),
    ("delete,compact", "delete,compact"), ("Compact, DELETE", "compact,delete"), (" COMPACT ", "compact"),
    ("", ""), ("  ", ""), ([], ""), (["compact", "Delete"], "compact,delete"), (("delete",), "delete"),
    ("compact,compact", "compact"),
])
def test_cleanup_policy_forms(raw: object, canonical: str) -> None:
    assert normalize_topic_config({"cleanup.policy": raw}) == {"cleanup.policy": canonical}


@pytest.mark.parametrize("raw", ["compact,", ",delete", "compaction", "compact;delete", 1, None, [1], True])
def test_cleanup_policy_rejects(raw: object) -> None:
    _reject("cleanup.policy", raw)


@pytest.mark.parametrize(("raw", "canonical"), [
    (True, "true"), (False, "false"), ("true", "true"), ("TRUE", "true"), (" False ", "false"),
])
def test_boolean_forms(raw: object, canonical: str) -> None:
    key = "s3stream.tombstone.cleanup.on.idle"
    assert normalize_topic_config({key: raw}) == {key: canonical}


@pytest.mark.parametrize("raw", [1, 0, "1", "yes", "", None])
def test_boolean_rejects(raw: object) -> None:
    err = _reject("s3stream.tombstone.cleanup.on.idle", raw)
    assert str(err).endswith("Expected value to be either true or false")


# -- keys and cross-field rules --------------------------------------------------------------------

def test_unknown_key_is_named_with_a_suggestion_and_no_value() -> None:
    with pytest.raises(InvalidConfig) as info:
        normalize_topic_config({"retention.msec": "hunter2-secret"})
    assert info.value.key == "retention.msec"
    assert "'retention.msec'" in str(info.value)
    assert "did you mean 'retention.ms'" in str(info.value)
    assert "hunter2" not in str(info.value)
    assert isinstance(info.value, InvalidRequest)


def test_unknown_key_without_close_match() -> None:
    with pytest.raises(InvalidConfig, match=r"^Unknown topic configuration 'zzz'$"):
        normalize_topic_config({"zzz": 1})


def test_non_string_key() -> None:
    with pytest.raises(InvalidConfig, match="must be strings"):
        normalize_topic_config({1: "x"})  # type: ignore[dict-item]


def test_none_and_empty_config() -> None:
    assert normalize_topic_config(None) == {}
    assert normalize_topic_config({}) == {}


def test_max_lag_below_min_lag_is_rejected_naming_both_keys() -> None:
    with pytest.raises(InvalidConfig) as info:
        normalize_topic_config({"min.compaction.lag.ms": 10, "max.compaction.lag.ms": 9})
    msg = str(info.value)
    assert "max.compaction.lag.ms (9)" in msg and "min.compaction.lag.ms (10)" in msg
    assert "greater than or equal" in msg
    assert info.value.key == "max.compaction.lag.ms"


def test_cross_field_rule_uses_the_effective_config() -> None:
    assert normalize_topic_config({"min.compaction.lag.ms": 10, "max.compaction.lag.ms": 10})
    # min given, max from its default (Long.MAX): fine
    assert normalize_topic_config({"min.compaction.lag.ms": LONG_MAX})
    # max given, min from its default (0): fine; then an alter raising min above it fails
    current = normalize_topic_config({"max.compaction.lag.ms": 100})
    with pytest.raises(InvalidConfig, match=re.escape("max.compaction.lag.ms")):
        alter_topic_config(current, {"min.compaction.lag.ms": 101})


# -- alter and effective ---------------------------------------------------------------------------

def test_alter_sets_replaces_and_removes() -> None:
    current = normalize_topic_config({"cleanup.policy": "compact", "retention.ms": 1000})
    new = alter_topic_config(current, {"retention.ms": "2000", "segment.bytes": 1024,
                                       "cleanup.policy": None})
    assert new == {"retention.ms": "2000", "segment.bytes": "1024"}
    assert current == {"cleanup.policy": "compact", "retention.ms": "1000"}  # not mutated
    assert effective_topic_config(new)["cleanup.policy"] == "delete"


def test_alter_removing_an_absent_override_is_a_no_op() -> None:
    assert alter_topic_config({"retention.ms": "5"}, {"segment.ms": None}) == {"retention.ms": "5"}


def test_alter_rejects_unknown_keys_even_for_removal() -> None:
    with pytest.raises(InvalidConfig, match="'nope'"):
        alter_topic_config({}, {"nope": None})


def test_alter_validates_values() -> None:
    with pytest.raises(InvalidConfig, match=re.escape("retention.ms")):
        alter_topic_config({}, {"retention.ms": -2})


def test_alter_can_remove_min_lag_to_unblock_lower_max() -> None:
    current = normalize_topic_config({"min.compaction.lag.ms": 50})
    assert alter_topic_config(current, {"min.compaction.lag.ms": None, "max.compaction.lag.ms": 10}) == {
        "max.compaction.lag.ms": "10"}


def test_effective_config_overlays_and_validates() -> None:
    eff = effective_topic_config({"retention.ms": "1"})
    assert eff["retention.ms"] == "1" and eff["segment.bytes"] == "1073741824"
    assert list(eff) == list(TOPIC_CONFIGS)
    with pytest.raises(InvalidConfig):
        effective_topic_config({"retention.ms": "garbage"})


# -- typed view ------------------------------------------------------------------------------------

def test_topic_config_defaults() -> None:
    tc = TopicConfig.from_overrides({})
    assert tc.cleanup_policy == frozenset({"delete"}) and tc.delete and not tc.compact
    assert tc.retention_ms == 604_800_000 and tc.retention_bytes == -1
    assert tc.segment_bytes == 1_073_741_824 and tc.segment_ms == 604_800_000 and tc.segment_jitter_ms == 0
    assert tc.min_cleanable_dirty_ratio == 0.5
    assert tc.min_compaction_lag_ms == 0 and tc.max_compaction_lag_ms == LONG_MAX
    assert tc.delete_retention_ms == 86_400_000 and tc.file_delete_delay_ms == 60_000
    assert tc.max_message_bytes == 1_048_588
    assert tc.message_timestamp_type == "CreateTime"
    assert tc.message_timestamp_before_max_ms == LONG_MAX == tc.message_timestamp_after_max_ms
    assert tc.tombstone_cleanup_on_idle is False
    assert tc.max_segment_ms == 604_800_000


def test_topic_config_policies() -> None:
    both = TopicConfig.from_overrides(normalize_topic_config({"cleanup.policy": "Delete,Compact"}))
    assert both.compact and both.delete and both.cleanup_policy == {"compact", "delete"}
    none = TopicConfig.from_overrides({"cleanup.policy": ""})
    assert none.cleanup_policy == frozenset() and not none.compact and not none.delete


def test_max_segment_ms_rule_s3() -> None:
    compact = {"cleanup.policy": "compact", "segment.ms": "1000"}
    assert TopicConfig.from_overrides({**compact, "max.compaction.lag.ms": "300"}).max_segment_ms == 300
    assert TopicConfig.from_overrides({**compact, "max.compaction.lag.ms": "5000"}).max_segment_ms == 1000
    # not compacted: max lag is irrelevant
    delete = {"cleanup.policy": "delete", "segment.ms": "1000", "max.compaction.lag.ms": "300"}
    assert TopicConfig.from_overrides(delete).max_segment_ms == 1000
    both = {**compact, "cleanup.policy": "compact,delete", "max.compaction.lag.ms": "1"}
    assert TopicConfig.from_overrides(both).max_segment_ms == 1


def test_topic_config_typed_values() -> None:
    tc = TopicConfig.from_overrides(normalize_topic_config({
        "message.timestamp.type": "LogAppendTime", "s3stream.tombstone.cleanup.on.idle": True,
        "min.cleanable.dirty.ratio": "0.25", "retention.bytes": -7}))
    assert tc.message_timestamp_type == "LogAppendTime"
    assert tc.tombstone_cleanup_on_idle is True
    assert tc.min_cleanable_dirty_ratio == 0.25 and tc.retention_bytes == -7


def test_topic_config_from_untrusted_overrides_is_validated() -> None:
    with pytest.raises(InvalidConfig):
        TopicConfig.from_overrides({"segment.bytes": "1"})
    with pytest.raises(InvalidConfig):
        TopicConfig.from_overrides({"made.up": "1"})
    with pytest.raises(InvalidConfig):
        TopicConfig.from_overrides({"min.compaction.lag.ms": "5", "max.compaction.lag.ms": "4"})


def test_topic_config_is_frozen() -> None:
    tc = TopicConfig.from_overrides({})
    with pytest.raises(AttributeError):
        tc.retention_ms = 5  # type: ignore[misc]
    assert tc == TopicConfig.from_overrides({}) and hash(tc) == hash(TopicConfig.from_overrides({}))


# -- properties ------------------------------------------------------------------------------------

_RAW = st.one_of(st.integers(min_value=-(2**64), max_value=2**64), st.floats(), st.booleans(),
                 st.text(max_size=12), st.sampled_from(["compact", "Delete,compact", "0.5", " 7 ", "true"]))


@settings(max_examples=300, deadline=None)
@given(key=st.sampled_from(sorted(TOPIC_CONFIGS)), raw=_RAW)
def test_canonical_form_is_a_fixed_point_and_failures_are_typed(key: str, raw: object) -> None:
    cdef = TOPIC_CONFIGS[key]
    try:
        canonical = cdef.validate(raw)
    except InvalidConfig as exc:
        assert exc.key == key and str(exc).startswith(f"Invalid value {raw!r} for configuration {key}: ")
        return
    assert cdef.validate(canonical) == canonical
    assert canonical == canonical.strip()
