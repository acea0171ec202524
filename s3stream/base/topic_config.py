"""Topic configs and topic names: Kafka's names, Kafka's defaults, Kafka's validation, in one table.

Vocabulary:

* **override**: a config a topic sets explicitly. Topic documents store only the overrides, as
  canonical strings, so a later change of a default reaches every topic that did not pin it.
* **effective config**: every key of :data:`TOPIC_CONFIGS`, defaults filled in.
* **canonical form**: Kafka's string for a value (``"604800000"``, ``"compact,delete"``,
  ``"0.5"``, ``"true"``). Values may be given as ``str``, ``int``, ``float`` or ``bool``; each key
  accepts what Kafka's ConfigDef accepts for its type (a ``bool`` is never a number here).
* **honoured** keys change behaviour; the others are accepted for client compatibility only
  (documented as such, so a Kafka tool that sets them keeps working).

Invariants:

* No config literal lives outside :data:`TOPIC_CONFIGS`; other modules read a typed
  :class:`TopicConfig`, never parse strings.
* Everything returned is validated and canonical; a failure raises :class:`InvalidConfig` with
  Kafka's message shape ``Invalid value X for configuration K: rule`` and ``key=K``.
* Cross-field rules (``max.compaction.lag.ms >= min.compaction.lag.ms``) are checked on the
  *effective* config, so an override cannot break them through a default.

Rule ids (RET-7, ROLL-3, CLEAN-TOMB-2, ...) cite docs/design/kafka-rules.md.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal, cast

from s3stream.base.errors import InvalidConfig, InvalidTopic

__all__ = [
    "LONG_MAX",
    "MAX_TOPIC_NAME_LENGTH",
    "TOPIC_CONFIGS",
    "ConfigDef",
    "ConfigType",
    "TimestampType",
    "TopicConfig",
    "alter_topic_config",
    "effective_topic_config",
    "normalize_topic_config",
    "topic_collision_name",
    "validate_topic_name",
]

ConfigType = Literal["long", "int", "double", "string", "list", "boolean"]
TimestampType = Literal["CreateTime", "LogAppendTime"]

LONG_MAX = 2**63 - 1
_LONG_MIN = -(2**63)
_INT_MAX = 2**31 - 1
_INT_MIN = -(2**31)
MAX_TOPIC_NAME_LENGTH = 249

_INTEGER_RE = re.compile(r"[+-]?[0-9]+", re.ASCII)
_DECIMAL_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_TOPIC_RE = re.compile(r"[a-zA-Z0-9._-]+", re.ASCII)
_TYPE_NAMES: dict[str, str] = {
    "long": "a 64-bit integer (long)", "int": "a 32-bit integer (int)", "double": "a finite number (double)",
    "string": "a string", "list": "a comma-separated list", "boolean": "either true or false",
}


class _Rejected(Exception):
    """Internal: a value broke ``rule``; :meth:`ConfigDef.validate` turns it into InvalidConfig."""

    def __init__(self, rule: str) -> None:
        super().__init__(rule)
        self.rule = rule


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One topic config: its Kafka name, type, default (canonical), what it does, how it is checked.

    ``minimum``/``maximum`` bound numbers (inclusive); ``valid_values`` restricts strings and list
    items; ``honoured`` is False for keys accepted for compatibility only; ``rules`` cites the
    docs/design/kafka-rules.md rules the key drives; ``broker_synonym`` is Kafka's broker-level name.
    """

    name: str
    type: ConfigType
    default: str
    doc: str
    minimum: int | float | None = None
    maximum: int | float | None = None
    valid_values: tuple[str, ...] = ()
    honoured: bool = True
    rules: str = ""
    broker_synonym: str | None = None

    def validate(self, raw: object) -> str:
        """Return the canonical string for ``raw``.

        Raises:
            InvalidConfig: ``Invalid value {raw!r} for configuration {name}: {rule}``, ``key=name``.
        """
        try:
            return _CANONICALIZERS[self.type](self, raw)
        except _Rejected as exc:
            raise InvalidConfig(f"Invalid value {raw!r} for configuration {self.name}: {exc.rule}",
                                key=self.name) from None

    @property
    def validation(self) -> str:
        """The validation rule in words (for docs and ``describe`` output)."""
        parts = [f"type {self.type}"]
        lo, hi = self.minimum, self.maximum
        if lo is not None and hi is not None:
            parts.append(f"in [{_bound(self, lo)}, {_bound(self, hi)}]")
        elif lo is not None:
            parts.append(f">= {_bound(self, lo)}")
        if self.valid_values:
            quantifier = "each of" if self.type == "list" else "one of"
            parts.append(f"{quantifier} {', '.join(self.valid_values)}")
        if self.type == "list":
            parts.append("case-insensitive; empty allowed")
        if self.type in ("long", "int") and lo is None and hi is None:
            parts.append("any value")
        return "; ".join(parts)


def _bound(cdef: ConfigDef, value: int | float) -> str:
    return _java_double(float(value)) if cdef.type == "double" else str(int(value))


def _check_range(cdef: ConfigDef, value: int | float) -> None:
    if cdef.minimum is not None and value < cdef.minimum:
        raise _Rejected(f"Value must be at least {_bound(cdef, cdef.minimum)}")
    if cdef.maximum is not None and value > cdef.maximum:
        raise _Rejected(f"Value must be no more than {_bound(cdef, cdef.maximum)}")


def _integer(cdef: ConfigDef, raw: object) -> str:
    """long/int: an int, an integral float, or a decimal string (no '_', no exponent, like Java)."""
    lo, hi = (_INT_MIN, _INT_MAX) if cdef.type == "int" else (_LONG_MIN, LONG_MAX)
    expected = f"Expected value to be {_TYPE_NAMES[cdef.type]}"
    value: int
    if isinstance(raw, bool):
        raise _Rejected(expected)
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, float) and math.isfinite(raw) and raw.is_integer():
        value = int(raw)
    elif isinstance(raw, str) and _INTEGER_RE.fullmatch(raw.strip()):
        value = int(raw.strip())
    else:
        raise _Rejected(expected)
    if not lo <= value <= hi:
        raise _Rejected(expected)
    _check_range(cdef, value)
    return str(value)


def _double(cdef: ConfigDef, raw: object) -> str:
    """double: an int, a finite float, or a decimal string; canonical is Java's Double.toString."""
    expected = f"Expected value to be {_TYPE_NAMES['double']}"
    if isinstance(raw, bool):
        raise _Rejected(expected)
    if isinstance(raw, int | float):
        value = float(raw)
    elif isinstance(raw, str) and _DECIMAL_RE.fullmatch(raw.strip()):
        value = float(raw.strip())
    else:
        raise _Rejected(expected)
    if not math.isfinite(value):
        raise _Rejected(expected)
    _check_range(cdef, value)
    return _java_double(value)


def _java_double(value: float) -> str:
    """Java's Double.toString: plain decimal in [1e-3, 1e7), else ``d.dddE±n``; always a '.'."""
    if value == 0:
        return "0.0"
    sign = "-" if value < 0 else ""
    dec = Decimal(repr(abs(value))).normalize()
    _, digit_tuple, exponent = dec.as_tuple()
    digits = "".join(map(str, digit_tuple))
    point = len(digits) + int(exponent)  # the decimal point sits after `point` digits
    if 1e-3 <= abs(value) < 1e7:
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        if point >= len(digits):
            return f"{sign}{digits}{'0' * (point - len(digits))}.0"
        return f"{sign}{digits[:point]}.{digits[point:]}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{point - 1}"


def _string(cdef: ConfigDef, raw: object) -> str:
    """string: trimmed like Kafka; matched case-sensitively against ``valid_values`` (ValidString)."""
    if not isinstance(raw, str):
        raise _Rejected(f"Expected value to be {_TYPE_NAMES['string']}")
    value = raw.strip()
    if cdef.valid_values and value not in cdef.valid_values:
        raise _Rejected(f"String must be one of: {', '.join(cdef.valid_values)}")
    return value


def _list(cdef: ConfigDef, raw: object) -> str:
    """list: ``"a,b"`` or a list/tuple of str; items trimmed and lower-cased, order kept, repeats
    dropped; ``""`` is the empty list (cleanup.policy: infinite retention, KAFKA-19112)."""
    if isinstance(raw, str):
        items = [] if not raw.strip() else [item.strip() for item in raw.split(",")]
    elif isinstance(raw, list | tuple) and all(isinstance(item, str) for item in raw):
        items = [item.strip() for item in raw]
    else:
        raise _Rejected(f"Expected value to be {_TYPE_NAMES['list']}")
    canonical: list[str] = []
    for item in map(str.lower, items):
        if cdef.valid_values and item not in cdef.valid_values:
            raise _Rejected(f"List items must each be one of: {', '.join(cdef.valid_values)}")
        if item not in canonical:
            canonical.append(item)
    return ",".join(canonical)


def _boolean(cdef: ConfigDef, raw: object) -> str:
    """boolean: a bool or "true"/"false" in any case (Kafka's parse; 0/1 are not booleans)."""
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
        return raw.strip().lower()
    raise _Rejected(f"Expected value to be {_TYPE_NAMES['boolean']}")


_CANONICALIZERS = {"long": _integer, "int": _integer, "double": _double, "string": _string,
                   "list": _list, "boolean": _boolean}

_COMPAT = "Accepted for compatibility; no effect in s3stream"


def _defs(*defs: ConfigDef) -> Mapping[str, ConfigDef]:
    return {d.name: d for d in defs}


#: Every topic config this store knows, with Kafka's name and Kafka's (3.x) default.
TOPIC_CONFIGS: Mapping[str, ConfigDef] = _defs(
    ConfigDef("cleanup.policy", "list", "delete",
              "delete: time/size retention drops whole sealed segments; compact: key compaction by the "
              "cleaner; both: both. Empty: neither (infinite retention, KAFKA-19112). Every policy "
              "honours log-start-offset deletion.",
              valid_values=("compact", "delete"), rules="RET-1, RET-2, CLEAN-SEL-2",
              broker_synonym="log.cleanup.policy"),
    ConfigDef("retention.ms", "long", "604800000",
              "Drop the oldest sealed segments whose max record timestamp is more than this old "
              "(strict >); -1 = no time limit.",
              minimum=-1, rules="RET-3, RET-7", broker_synonym="log.retention.ms"),
    ConfigDef("retention.bytes", "long", "-1",
              "Per partition: drop the oldest segments while the rest still holds at least this many "
              "bytes (a lower bound); negative = no size limit.",
              rules="RET-3, RET-6", broker_synonym="log.retention.bytes"),
    ConfigDef("segment.bytes", "int", "1073741824",
              "Seal the active segment when the next append would take it past this size; also the "
              "cleaner's group size cap. Minimum 14 as in Kafka 3.x so Kafka's small-segment tests port.",
              minimum=14, rules="ROLL-1(a), CLEAN-GRP-1", broker_synonym="log.segment.bytes"),
    ConfigDef("segment.ms", "long", "604800000",
              "Seal the active segment once the records' timestamps span more than this (record time "
              "when present, else the clock), checked on append.",
              minimum=1, rules="ROLL-1(b), ROLL-2, ROLL-3", broker_synonym="log.roll.ms"),
    ConfigDef("segment.jitter.ms", "long", "0",
              "Per-segment random reduction in [0, min(jitter, segment.ms)) of the time-roll deadline, "
              "drawn from the injected IdSource.",
              minimum=0, rules="ROLL-1(b)", broker_synonym="log.roll.jitter.ms"),
    ConfigDef("min.cleanable.dirty.ratio", "double", "0.5",
              "A compacted partition is eligible when dirty/total bytes is strictly greater than this.",
              minimum=0, maximum=1, rules="CLEAN-SEL-3, CLEAN-SEL-5", broker_synonym="log.cleaner.min.cleanable.ratio"),
    ConfigDef("min.compaction.lag.ms", "long", "0",
              "Records younger than this (by segment max timestamp) are never compacted.",
              minimum=0, rules="CLEAN-RANGE-2, CLEAN-GUAR-1", broker_synonym="log.cleaner.min.compaction.lag.ms"),
    ConfigDef("max.compaction.lag.ms", "long", str(LONG_MAX),
              "A compacted partition whose oldest dirty sealed record is older than this becomes eligible "
              "regardless of ratio, and the active segment rolls by this deadline (KIP-354). Must be >= "
              "min.compaction.lag.ms.",
              minimum=1, rules="ROLL-3, CLEAN-SEL-3, CLEAN-SEL-4", broker_synonym="log.cleaner.max.compaction.lag.ms"),
    ConfigDef("delete.retention.ms", "long", "86400000",
              "How long a retained tombstone stays readable after the cleaning round that first kept it "
              "(its delete horizon, KIP-534).",
              minimum=0, rules="CLEAN-TOMB-1, CLEAN-TOMB-2, CLEAN-GUAR-4",
              broker_synonym="log.cleaner.delete.retention.ms"),
    ConfigDef("file.delete.delay.ms", "long", "60000",
              "Grace period before GC physically deletes an object removed from the manifest, so slow "
              "readers finish (not observable through the API).",
              minimum=0, rules="CFG-3", broker_synonym="log.segment.delete.delay.ms"),
    ConfigDef("max.message.bytes", "int", "1048588",
              "Largest record batch an append accepts; larger raises RecordTooLarge.",
              minimum=0, rules="CFG-1", broker_synonym="message.max.bytes"),
    ConfigDef("message.timestamp.type", "string", "CreateTime",
              "CreateTime keeps the producer's timestamps; LogAppendTime stamps records with the store "
              "clock at append. Roll and retention read these timestamps.",
              valid_values=("CreateTime", "LogAppendTime"), rules="ROLL-2, RET-7",
              broker_synonym="log.message.timestamp.type"),
    ConfigDef("message.timestamp.before.max.ms", "long", str(LONG_MAX),
              "CreateTime only: reject an append whose timestamp is more than this before the clock.",
              minimum=0, rules="CFG-1", broker_synonym="log.message.timestamp.before.max.ms"),
    ConfigDef("message.timestamp.after.max.ms", "long", str(LONG_MAX),
              "CreateTime only: reject an append whose timestamp is more than this after the clock "
              "(the 3.x default accepts far-future timestamps).",
              minimum=0, rules="CFG-1", broker_synonym="log.message.timestamp.after.max.ms"),
    ConfigDef("segment.index.bytes", "int", "10485760",
              f"{_COMPAT}: segment indexes come from Parquet row-group statistics.",
              minimum=4, honoured=False, broker_synonym="log.index.size.max.bytes"),
    ConfigDef("index.interval.bytes", "int", "4096",
              f"{_COMPAT}: the index granularity is the segment row group.",
              minimum=0, honoured=False, broker_synonym="log.index.interval.bytes"),
    ConfigDef("compression.type", "string", "producer",
              f"{_COMPAT}: segment objects use s3stream's own Parquet compression.",
              valid_values=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"), honoured=False,
              broker_synonym="compression.type"),
    ConfigDef("min.insync.replicas", "int", "1",
              f"{_COMPAT}: durability comes from the WAL and the object store, not replicas.",
              minimum=1, honoured=False, broker_synonym="min.insync.replicas"),
    ConfigDef("flush.ms", "long", str(LONG_MAX),
              f"{_COMPAT}: fsync is governed by the store settings (wal_fsync, ack).",
              minimum=0, honoured=False, broker_synonym="log.flush.interval.ms"),
    ConfigDef("flush.messages", "long", str(LONG_MAX),
              f"{_COMPAT}: fsync is governed by the store settings (wal_fsync, ack).",
              minimum=1, honoured=False, broker_synonym="log.flush.interval.messages"),
    ConfigDef("preallocate", "boolean", "false",
              f"{_COMPAT}: segments are immutable objects.", honoured=False,
              broker_synonym="log.preallocate"),
    ConfigDef("unclean.leader.election.enable", "boolean", "false",
              f"{_COMPAT}: there are no replicas to elect.", honoured=False,
              broker_synonym="unclean.leader.election.enable"),
    ConfigDef("s3stream.tombstone.cleanup.on.idle", "boolean", "false",
              "Beyond Kafka: also select a compacted partition when tombstone horizons passed, so an "
              "idle partition drops expired tombstones (Kafka waits for new dirty data).",
              rules="CLEAN-TOMB-2 (extension)"),
)


def _check_key(key: object) -> ConfigDef:
    """The definition of ``key``; unknown keys are named (never their values) with a suggestion."""
    if not isinstance(key, str):
        raise InvalidConfig(f"Topic configuration names must be strings, got {type(key).__name__}")
    cdef = TOPIC_CONFIGS.get(key)
    if cdef is None:
        close = difflib.get_close_matches(key, list(TOPIC_CONFIGS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise InvalidConfig(f"Unknown topic configuration {key!r}{hint}", key=key)
    return cdef


def _check_cross_fields(overrides: Mapping[str, str]) -> None:
    """Kafka's LogConfig.validateValues on the effective config."""
    min_lag = int(overrides.get("min.compaction.lag.ms", TOPIC_CONFIGS["min.compaction.lag.ms"].default))
    max_lag = int(overrides.get("max.compaction.lag.ms", TOPIC_CONFIGS["max.compaction.lag.ms"].default))
    if max_lag < min_lag:
        raise InvalidConfig(
            f"Invalid configuration: max.compaction.lag.ms ({max_lag}) must be greater than or equal to "
            f"min.compaction.lag.ms ({min_lag})", key="max.compaction.lag.ms")


def normalize_topic_config(config: Mapping[str, object] | None) -> dict[str, str]:
    """Validate explicit topic configs; return them canonical (only the keys given).

    Raises:
        InvalidConfig: an unknown key, a bad value, or a broken cross-field rule.
    """
    overrides = {key: _check_key(key).validate(raw) for key, raw in (config or {}).items()}
    _check_cross_fields(overrides)
    return overrides


def alter_topic_config(current: Mapping[str, str], updates: Mapping[str, object | None]) -> dict[str, str]:
    """The new overrides after ``updates``; a ``None`` value removes the override (back to default).

    Raises:
        InvalidConfig: as :func:`normalize_topic_config`, on the result.
    """
    merged: dict[str, object] = dict(current)
    for key, raw in updates.items():
        _check_key(key)
        if raw is None:
            merged.pop(key, None)
        else:
            merged[key] = raw
    return normalize_topic_config(merged)


def effective_topic_config(overrides: Mapping[str, str]) -> dict[str, str]:
    """Every key of :data:`TOPIC_CONFIGS`: the override if set, else Kafka's default."""
    checked = normalize_topic_config(overrides)
    return {name: checked.get(name, cdef.default) for name, cdef in TOPIC_CONFIGS.items()}


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """The typed view of a topic's effective config that the engine reads (honoured keys only)."""

    cleanup_policy: frozenset[str]
    retention_ms: int
    retention_bytes: int
    segment_bytes: int
    segment_ms: int
    segment_jitter_ms: int
    min_cleanable_dirty_ratio: float
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    delete_retention_ms: int
    file_delete_delay_ms: int
    max_message_bytes: int
    message_timestamp_type: TimestampType
    message_timestamp_before_max_ms: int
    message_timestamp_after_max_ms: int
    tombstone_cleanup_on_idle: bool

    @property
    def compact(self) -> bool:
        """``cleanup.policy`` contains ``compact``: the cleaner owns this topic's partitions."""
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """``cleanup.policy`` contains ``delete``: time/size retention applies (RET-1)."""
        return "delete" in self.cleanup_policy

    @property
    def max_segment_ms(self) -> int:
        """Rule ROLL-3: compacted topics roll by ``max.compaction.lag.ms`` too, so old data becomes cleanable."""
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    @classmethod
    def from_overrides(cls, overrides: Mapping[str, str]) -> TopicConfig:
        """Validate ``overrides`` (they may come from a stored topic document) and type them.

        Raises:
            InvalidConfig: an unknown key or a bad value.
        """
        eff = effective_topic_config(overrides)
        policy = eff["cleanup.policy"]
        return cls(
            cleanup_policy=frozenset(policy.split(",")) if policy else frozenset(),
            retention_ms=int(eff["retention.ms"]),
            retention_bytes=int(eff["retention.bytes"]),
            segment_bytes=int(eff["segment.bytes"]),
            segment_ms=int(eff["segment.ms"]),
            segment_jitter_ms=int(eff["segment.jitter.ms"]),
            min_cleanable_dirty_ratio=float(eff["min.cleanable.dirty.ratio"]),
            min_compaction_lag_ms=int(eff["min.compaction.lag.ms"]),
            max_compaction_lag_ms=int(eff["max.compaction.lag.ms"]),
            delete_retention_ms=int(eff["delete.retention.ms"]),
            file_delete_delay_ms=int(eff["file.delete.delay.ms"]),
            max_message_bytes=int(eff["max.message.bytes"]),
            message_timestamp_type=cast(TimestampType, eff["message.timestamp.type"]),
            message_timestamp_before_max_ms=int(eff["message.timestamp.before.max.ms"]),
            message_timestamp_after_max_ms=int(eff["message.timestamp.after.max.ms"]),
            tombstone_cleanup_on_idle=eff["s3stream.tombstone.cleanup.on.idle"] == "true",
        )


def validate_topic_name(name: str) -> str:
    """Return ``name`` if it follows Kafka's rules (``Topic.validate``), with Kafka's messages.

    Raises:
        InvalidTopic: empty, ``.`` or ``..``, longer than 249 characters, or a character outside
            ASCII letters, digits, ``.``, ``_`` and ``-``.
    """
    if not isinstance(name, str):
        raise InvalidTopic(f"Topic name must be a string, got {type(name).__name__}")
    if not name:
        raise InvalidTopic("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopic('Topic name cannot be "." or ".."')
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopic(f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} "
                           f"characters, Topic name: {name}")
    if not _TOPIC_RE.fullmatch(name):
        raise InvalidTopic(f'Topic name "{name}" is illegal, it contains a character other than '
                           "ASCII alphanumerics, '.', '_' and '-'")
    return name


def topic_collision_name(name: str) -> str:
    """Kafka's collision key: ``a.b`` and ``a_b`` collide (metric names cannot tell them apart)."""
    return name.replace(".", "_")
