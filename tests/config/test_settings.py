"""StoreSettings: defaults, validation, from_options (both spellings, coercion, broker synonyms,
error messages), topic defaults, and the default WAL directory."""

from __future__ import annotations

import dataclasses
import hashlib
import pickle
import re
from pathlib import Path
from typing import Any

import pytest

from s3stream.base.errors import InvalidConfig
from s3stream.base.settings import BROKER_SYNONYMS, StoreSettings, default_wal_dir, setting_name
from s3stream.base.topic_config import LONG_MAX

MiB = 1024 * 1024

# (setting, smallest valid value): one below is rejected.
INT_MINIMUMS = {
    "flush_interval_ms": 1, "flush_bytes": 1, "wal_file_bytes": 1, "buffer_bytes": 1, "cache_bytes": 0,
    "read_ahead_bytes": 0, "upload_concurrency": 1, "seal_concurrency": 1, "segment_row_group_bytes": 1,
    "segment_upload_part_bytes": 5 * MiB, "commit_timeout_ms": 1,
    "orphan_min_age_ms": 0, "manifest_min_age_ms": 0, "log_retention_check_interval_ms": 1,
    "log_cleaner_threads": 1, "log_cleaner_dedupe_buffer_size": 1, "log_cleaner_backoff_ms": 0,
    "max_block_ms": 0, "upload_retry_backoff_ms": 1, "upload_retry_backoff_max_ms": 1,
}


def test_defaults() -> None:
    s = StoreSettings()
    assert s.ack == "wal" and s.flush_interval_ms == 250 and s.flush_bytes == 8 * MiB
    assert s.wal_dir is None and s.wal_fsync is True and s.wal_file_bytes == 64 * MiB
    assert s.buffer_bytes == 64 * MiB and s.cache_bytes == 128 * MiB and s.read_ahead_bytes == 2 * MiB
    assert s.upload_concurrency == 4 and s.seal_concurrency == 2 and s.segment_row_group_bytes == 1 * MiB
    assert s.segment_upload_part_bytes == 128 * MiB
    assert s.commit_timeout_ms == 60000
    assert s.orphan_min_age_ms == 3_600_000 and s.manifest_min_age_ms == 3_600_000
    assert s.log_retention_check_interval_ms == 300000
    assert s.log_cleaner_enable is True and s.log_cleaner_threads == 1
    assert s.log_cleaner_dedupe_buffer_size == 134217728 and s.log_cleaner_io_buffer_load_factor == 0.9
    assert s.log_cleaner_backoff_ms == 15000 and s.probe is True
    assert dict(s.default_topic_config) == {}


def test_frozen_hashable_picklable_replaceable() -> None:
    s = StoreSettings(flush_bytes=10, default_topic_config={"retention.ms": "5"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.flush_bytes = 11  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(s)) == s
    assert hash(s) == hash(StoreSettings(flush_bytes=10, default_topic_config={"retention.ms": "5"}))
    assert dataclasses.replace(s, flush_bytes=12).flush_bytes == 12
    with pytest.raises(InvalidConfig):
        dataclasses.replace(s, flush_bytes=0)


def test_keyword_only() -> None:
    with pytest.raises(TypeError):
        StoreSettings("s3")  # type: ignore[call-arg]


@pytest.mark.parametrize("name", sorted(INT_MINIMUMS))
def test_int_minimums(name: str) -> None:
    low = INT_MINIMUMS[name]
    kwargs: dict[str, Any] = {name: low}
    assert getattr(StoreSettings(**kwargs), name) == low
    with pytest.raises(InvalidConfig) as info:
        StoreSettings(**{**kwargs, name: low - 1})
    assert str(info.value) == f"Invalid value {low - 1} for setting {name}: Value must be at least {low}"
    assert info.value.key == name


@pytest.mark.parametrize("bad", [True, "5", 5.0, None, LONG_MAX + 1])
def test_int_settings_are_strictly_typed_in_code(bad: object) -> None:
    with pytest.raises(InvalidConfig, match="flush_interval_ms: Expected an integer"):
        StoreSettings(flush_interval_ms=bad)  # type: ignore[arg-type]


def test_every_int_setting_has_a_boundary_test() -> None:
    int_fields = {f.name for f in dataclasses.fields(StoreSettings) if f.metadata["spec"].kind == "int"}
    assert int_fields == set(INT_MINIMUMS)


def test_other_settings_validation() -> None:
    assert StoreSettings(ack="s3").ack == "s3"
    for bad_ack in ("WAL", "disk", "", None):
        with pytest.raises(InvalidConfig, match="ack"):
            StoreSettings(ack=bad_ack)  # type: ignore[arg-type]
    for bad_bool in (1, "true", None):
        with pytest.raises(InvalidConfig, match="wal_fsync: Expected true or false"):
            StoreSettings(wal_fsync=bad_bool)  # type: ignore[arg-type]
    assert StoreSettings(log_cleaner_io_buffer_load_factor=1).log_cleaner_io_buffer_load_factor == 1
    for bad_ratio in (0, 0.0, 1.01, -0.5, float("nan"), True, "0.5"):
        with pytest.raises(InvalidConfig, match=r"\(0, 1\]"):
            StoreSettings(log_cleaner_io_buffer_load_factor=bad_ratio)  # type: ignore[arg-type]
    assert StoreSettings(wal_dir="/x").wal_dir == "/x"
    for bad_dir in ("", 5):
        with pytest.raises(InvalidConfig, match="wal_dir"):
            StoreSettings(wal_dir=bad_dir)  # type: ignore[arg-type]


def test_default_topic_config_is_validated_canonical_and_immutable() -> None:
    s = StoreSettings(default_topic_config={"cleanup.policy": "COMPACT", "retention.ms": 60000})  # type: ignore[dict-item]
    assert dict(s.default_topic_config) == {"cleanup.policy": "compact", "retention.ms": "60000"}
    with pytest.raises(TypeError):
        s.default_topic_config["x"] = "y"  # type: ignore[index]
    with pytest.raises(InvalidConfig, match=re.escape("retention.ms")):
        StoreSettings(default_topic_config={"retention.ms": "-5"})
    with pytest.raises(InvalidConfig, match="Unknown topic configuration 'nope'"):
        StoreSettings(default_topic_config={"nope": "1"})
    with pytest.raises(InvalidConfig, match="mapping"):
        StoreSettings(default_topic_config="retention.ms=5")  # type: ignore[arg-type]


# -- from_options ----------------------------------------------------------------------------------

def test_from_options_python_and_dotted_names() -> None:
    py = StoreSettings.from_options({"flush_interval_ms": "100", "log_cleaner_threads": 3, "ack": "s3"})
    dotted = StoreSettings.from_options({"flush.interval.ms": "100", "log.cleaner.threads": "3", "ack": "S3"})
    dashed = StoreSettings.from_options({"flush-interval-ms": 100, "LOG.CLEANER.THREADS": " 3 ", "ack": "s3"})
    assert py == dotted == dashed
    assert py.flush_interval_ms == 100 and py.log_cleaner_threads == 3 and py.ack == "s3"


def test_from_options_covers_every_setting_in_both_spellings() -> None:
    for f in dataclasses.fields(StoreSettings):
        assert setting_name(f.name) == f.name
        assert setting_name(f.name.replace("_", ".")) == f.name
    assert setting_name("endpoint_url") is None


@pytest.mark.parametrize(("raw", "expected"), [
    ("true", True), ("FALSE", False), ("1", True), ("0", False), ("yes", True), ("off", False),
    (True, True), (False, False),
])
def test_from_options_booleans(raw: object, expected: bool) -> None:
    assert StoreSettings.from_options({"wal.fsync": raw}).wal_fsync is expected


def test_from_options_coerces_other_types() -> None:
    s = StoreSettings.from_options({
        "log.cleaner.io.buffer.load.factor": "0.75", "wal.dir": "/tmp/w", "cache.bytes": "0",
        "flush.bytes": 1024.0, "log.cleaner.enable": "false", "probe": "no",
        "default_topic_config": {"segment.bytes": 1024}})
    assert s.log_cleaner_io_buffer_load_factor == 0.75 and s.wal_dir == "/tmp/w" and s.cache_bytes == 0
    assert s.flush_bytes == 1024 and s.log_cleaner_enable is False and s.probe is False
    assert dict(s.default_topic_config) == {"segment.bytes": "1024"}


@pytest.mark.parametrize(("options", "fragment"), [
    ({"flush.interval.ms": "fast"},
     "Invalid value 'fast' for setting flush.interval.ms: Expected an integer"),
    ({"flush.interval.ms": "0"}, "Invalid value 0 for setting flush.interval.ms: Value must be at least 1"),
    ({"flush.interval.ms": "1e3"}, "Expected an integer"),
    ({"flush.interval.ms": 2.5}, "Expected an integer"),
    ({"wal.fsync": "maybe"}, "Invalid value 'maybe' for setting wal.fsync: Expected true or false"),
    ({"ack": "disk"}, "String must be one of: wal, s3"),
    ({"log.cleaner.io.buffer.load.factor": "x"}, "Expected a number"),
    ({"log.cleaner.io.buffer.load.factor": "nan"}, "(0, 1]"),
    ({"wal.dir": ""}, "Expected a non-empty path"),
    ({"default.topic.config": "retention.ms=1"}, "Expected a mapping of topic configs"),
])
def test_from_options_value_errors(options: dict[str, object], fragment: str) -> None:
    with pytest.raises(InvalidConfig) as info:
        StoreSettings.from_options(options)
    assert fragment in str(info.value)
    assert info.value.key == next(iter(options))


def test_unknown_option_names_it_suggests_and_hides_the_value() -> None:
    with pytest.raises(InvalidConfig) as info:
        StoreSettings.from_options({"flush.intervl.ms": "s3cr3t-value"})
    assert str(info.value) == "Unknown store option 'flush.intervl.ms'; did you mean 'flush.interval.ms'?"
    assert info.value.key == "flush.intervl.ms"
    with pytest.raises(InvalidConfig) as info:
        StoreSettings.from_options({"aws_secret_access_key": "AKIASECRET"})
    assert str(info.value) == "Unknown store option 'aws_secret_access_key'"
    assert "AKIASECRET" not in str(info.value)


def test_topic_config_names_are_not_store_options() -> None:
    message = "Unknown store option 'retention.ms'; did you mean 'log.retention.ms'?"
    with pytest.raises(InvalidConfig, match=f"^{re.escape(message)}$"):
        StoreSettings.from_options({"retention.ms": 5})


def test_same_setting_twice_is_an_error() -> None:
    with pytest.raises(InvalidConfig, match="given twice"):
        StoreSettings.from_options({"flush.bytes": 1, "flush_bytes": 1})


def test_non_string_option_name() -> None:
    with pytest.raises(InvalidConfig, match="must be strings"):
        StoreSettings.from_options({5: "x"})  # type: ignore[dict-item]


def test_empty_options_give_defaults() -> None:
    assert StoreSettings.from_options({}) == StoreSettings()


# -- broker synonyms -------------------------------------------------------------------------------

def test_broker_synonyms_set_topic_defaults() -> None:
    s = StoreSettings.from_options({"log.cleanup.policy": "Compact", "log.segment.bytes": "1024",
                                    "message.max.bytes": 2048, "log.cleaner.min.cleanable.ratio": "0.1",
                                    "log.roll.jitter.hours": "1"})
    assert dict(s.default_topic_config) == {"cleanup.policy": "compact", "segment.bytes": "1024",
                                            "max.message.bytes": "2048", "min.cleanable.dirty.ratio": "0.1",
                                            "segment.jitter.ms": "3600000"}


@pytest.mark.parametrize(("options", "retention_ms"), [
    ({"log.retention.hours": "168"}, "604800000"),
    ({"log.retention.minutes": 2}, "120000"),
    ({"log.retention.hours": 1, "log.retention.minutes": 2}, "120000"),
    ({"log.retention.ms": 5, "log.retention.minutes": 2, "log.retention.hours": 1}, "5"),
    ({"log.retention.hours": 1, "log.retention.ms": 5}, "5"),
    ({"log.retention.hours": -1}, "-1"),
    ({"log.retention.minutes": "-3"}, "-1"),
])
def test_retention_unit_precedence_like_kafka(options: dict[str, object], retention_ms: str) -> None:
    assert StoreSettings.from_options(options).default_topic_config["retention.ms"] == retention_ms


def test_roll_hours_and_ms() -> None:
    s = StoreSettings.from_options({"log.roll.hours": 2})
    assert s.default_topic_config["segment.ms"] == "7200000"
    s = StoreSettings.from_options({"log.roll.hours": 2, "log.roll.ms": 10})
    assert s.default_topic_config["segment.ms"] == "10"


def test_broker_synonym_errors_name_the_option() -> None:
    with pytest.raises(InvalidConfig) as info:
        StoreSettings.from_options({"log.retention.ms": -2})
    assert "retention.ms: Value must be at least -1" in str(info.value)
    assert "(given as log.retention.ms)" in str(info.value) and info.value.key == "log.retention.ms"
    with pytest.raises(InvalidConfig, match=re.escape("setting log.roll.hours: Expected an integer")):
        StoreSettings.from_options({"log.roll.hours": "two"})
    with pytest.raises(InvalidConfig, match="Value must be at least 1"):
        StoreSettings.from_options({"log.roll.hours": 0})


def test_synonym_and_explicit_topic_default_conflict() -> None:
    with pytest.raises(InvalidConfig, match=re.escape("retention.ms given twice")):
        StoreSettings.from_options({"default_topic_config": {"retention.ms": 1}, "log.retention.hours": 1})


def test_synonyms_merge_with_explicit_topic_defaults() -> None:
    s = StoreSettings.from_options({"default_topic_config": {"segment.ms": 1}, "log.retention.ms": 2})
    assert dict(s.default_topic_config) == {"segment.ms": "1", "retention.ms": "2"}


def test_cross_field_rule_applies_to_store_defaults() -> None:
    with pytest.raises(InvalidConfig, match=re.escape("max.compaction.lag.ms")):
        StoreSettings.from_options({"log.cleaner.min.compaction.lag.ms": 10,
                                    "log.cleaner.max.compaction.lag.ms": 5})


def test_synonyms_do_not_collide_with_settings() -> None:
    for option in BROKER_SYNONYMS:
        assert setting_name(option) is None, option


def test_new_topic_config_puts_store_defaults_under_explicit_config() -> None:
    s = StoreSettings(default_topic_config={"retention.ms": "1000", "cleanup.policy": "compact"})
    assert s.new_topic_config(None) == {"retention.ms": "1000", "cleanup.policy": "compact"}
    assert s.new_topic_config({"retention.ms": 5, "segment.bytes": 100}) == {
        "retention.ms": "5", "cleanup.policy": "compact", "segment.bytes": "100"}
    with pytest.raises(InvalidConfig):
        s.new_topic_config({"bogus": 1})


# -- WAL directory ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("url", "expected"), [
    ("file:///var/lib/s3stream", "/var/lib/s3stream/_wal"),
    ("file:///var/lib/s3stream/", "/var/lib/s3stream/_wal"),
    ("file://localhost/data/x", "/data/x/_wal"),
    ("file:///tmp/a%20b?flush_interval_ms=5", "/tmp/a b/_wal"),
    ("FILE:///srv", "/srv/_wal"),
])
def test_file_urls_keep_the_wal_beside_the_data(url: str, expected: str) -> None:
    assert default_wal_dir(url) == expected


@pytest.fixture
def data_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    return tmp_path / "s3stream" / "wal"


def test_other_urls_go_under_the_user_data_dir(data_home: Path) -> None:
    url = "s3://bucket/some/prefix?endpoint_url=http://127.0.0.1:8333"
    path = default_wal_dir(url)
    parent, _, leaf = path.rpartition("/")
    assert parent == str(data_home)
    slug, _, digest = leaf.rpartition("-")
    assert slug == "s3_bucket_some_prefix"
    assert len(digest) == 12 and all(c in "0123456789abcdef" for c in digest)
    identity = "s3://bucket/some/prefix?endpoint_url=http%3A%2F%2F127.0.0.1%3A8333"
    assert digest == hashlib.sha256(identity.encode()).hexdigest()[:12]
    assert default_wal_dir("memory://name").startswith(f"{data_home}/memory_name-")


def test_slug_never_shows_credentials_or_query(data_home: Path) -> None:
    path = default_wal_dir("s3://AKIAKEY:SECRET@bucket/p?aws_secret_access_key=SECRET2&endpoint_url=x")
    assert "AKIA" not in path and "SECRET" not in path and "endpoint" not in path
    assert path.rpartition("/")[2].startswith("s3_bucket_p-")


def test_wal_dir_is_stable_across_credentials_and_store_options(data_home: Path) -> None:
    base = default_wal_dir("s3://bucket/p?endpoint_url=http://h:1&region=r")
    same = [
        "s3://bucket/p?region=r&endpoint_url=http://h:1",
        "s3://KEY:SECRET@bucket/p?endpoint_url=http://h:1&region=r",
        "s3://bucket/p?endpoint_url=http://h:1&region=r&aws_access_key_id=A&aws_secret_access_key=B",
        "s3://bucket/p?endpoint_url=http://h:1&region=r&session_token=T&flush_interval_ms=5&ack=s3",
        "s3://bucket/p?endpoint_url=http://h:1&region=r&log.retention.hours=1",
    ]
    for url in same:
        assert default_wal_dir(url) == base, url
    different = ["s3://bucket/p?endpoint_url=http://h:2&region=r", "s3://bucket/q?endpoint_url=http://h:1&region=r",
                 "s3://other/p?endpoint_url=http://h:1&region=r", "gs://bucket/p?endpoint_url=http://h:1&region=r"]
    assert len({base, *map(default_wal_dir, different)}) == 1 + len(different)


def test_resolved_wal_dir(data_home: Path) -> None:
    assert StoreSettings(wal_dir="/explicit").resolved_wal_dir("s3://b") == "/explicit"
    assert StoreSettings().resolved_wal_dir("file:///d") == "/d/_wal"
    assert StoreSettings().resolved_wal_dir("s3://b") == default_wal_dir("s3://b")
