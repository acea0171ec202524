"""The options of the ``s3stream`` Spark data source, parsed and checked once (pure; no pyspark).

Names and meanings follow Spark's Kafka source, so a pipeline ports by changing the format and
``kafka.bootstrap.servers`` into ``url``. Spark hands the options over lower-cased; parsing is
case-insensitive.

Reading (batch ``spark.read`` and streaming ``spark.readStream``):

* ``url`` (required): the store URL (``file:///DIR``, ``s3://BUCKET/PREFIX?endpoint_url=...``, ``memory://``).
* which partitions, exactly one of: ``subscribe`` (comma-separated topics; ``topic`` is an alias),
  ``subscribePattern`` (a regular expression over topic names), ``assign`` (JSON ``{"t": [0, 1]}``).
* ``startingOffsets`` / ``endingOffsets``: ``earliest``, ``latest`` or JSON ``{"t": {"0": 23, "1": -2}}``
  where ``-2`` means earliest and ``-1`` latest; a partition missing from the JSON takes the default
  (earliest to start, latest to end). Defaults: batch ``earliest`` .. ``latest``; streaming ``latest``.
  ``endingOffsets`` is batch only; a batch query cannot start at ``latest`` nor end at ``earliest``.
* ``startingTimestamp`` / ``endingTimestamp`` (ms since the epoch, every partition) and
  ``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp`` (JSON ``{"t": {"0": ms}}``): the first
  offset whose timestamp is ``>=`` the value. Precedence: timestamp, then by-timestamp, then offsets.
  When no record qualifies, ``startingOffsetsByTimestampStrategy`` decides: ``error`` (default) or
  ``latest``; an ending timestamp without a match means latest.
* ``maxOffsetsPerTrigger`` (streaming): at most this many offsets per micro-batch, split over the
  partitions in proportion to their backlog.
* ``failOnDataLoss`` (default ``true``): when retention or compaction removed offsets a query still needed,
  fail; ``false`` skips to the log start with a warning.
* ``includeHeaders`` (default ``false``, as Kafka's): whether the ``headers`` column exists.
* ``pushFilters`` (default ``true``): push filters down where the session allows it
  (``spark.sql.python.filterPushdown.enabled=true``, which the session factory sets; elsewhere Spark
  applies every filter itself); ``false`` never pushes.

Writing (``df.write`` / ``df.writeStream``): ``url``, ``topic`` (else a ``topic`` column names it per
row), and ``writerId``: the identity under which a streaming query's committed batch ids are kept
(default: derived from the query's ``checkpointLocation``), so a replayed micro-batch is not appended twice.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from s3stream.base.errors import InvalidConfig

__all__ = [
    "EARLIEST",
    "LATEST",
    "OffsetSpec",
    "ReadOptions",
    "WriteOptions",
    "parse_read_options",
    "parse_write_options",
]

#: Kafka's sentinels inside a JSON offsets document.
EARLIEST = -2
LATEST = -1

PartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where to start or end: every partition at earliest/latest, or per partition (JSON)."""

    default: int  # EARLIEST or LATEST
    per_partition: Mapping[PartitionKey, int] = field(default_factory=dict)

    def for_partition(self, topic: str, partition: int) -> int:
        """The offset (or sentinel) this spec gives ``topic``/``partition``."""
        return self.per_partition.get((topic, partition), self.default)


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """Parsed read options (see the module docstring for each one's meaning)."""

    url: str
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assign: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    starting: OffsetSpec = OffsetSpec(EARLIEST)
    ending: OffsetSpec = OffsetSpec(LATEST)
    starting_timestamps: Mapping[PartitionKey, int] | int | None = None
    ending_timestamps: Mapping[PartitionKey, int] | int | None = None
    timestamp_strategy: Literal["error", "latest"] = "error"
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    push_filters: bool = True


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """Parsed write options."""

    url: str
    topic: str | None = None
    writer_id: str | None = None


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _url(opts: Mapping[str, str]) -> str:
    url = opts.get("url", "").strip()
    if not url:
        raise InvalidConfig("the s3stream data source needs option 'url' (the store URL, e.g. file:///DIR or "
                            "s3://BUCKET/PREFIX?endpoint_url=...)", key="url")
    return url


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise InvalidConfig(f"option {name} must be true or false, got {raw!r}", key=name)
    return value == "true"


def _int(raw: str, name: str, *, minimum: int) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise InvalidConfig(f"option {name} must be an integer, got {raw!r}", key=name) from None
    if value < minimum:
        raise InvalidConfig(f"option {name} must be >= {minimum}, got {value}", key=name)
    return value


def _json_object(raw: str, name: str) -> dict[str, object]:
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise InvalidConfig(f"option {name} is not valid JSON: {exc}", key=name) from None
    if not isinstance(doc, dict):
        raise InvalidConfig(f"option {name} must be a JSON object keyed by topic", key=name)
    return doc


def _per_partition(raw: str, name: str, *, minimum: int) -> dict[PartitionKey, int]:
    """``{"topic": {"0": n, ...}}`` -> ``{(topic, 0): n}`` (values checked against ``minimum``)."""
    out: dict[PartitionKey, int] = {}
    for topic, parts in _json_object(raw, name).items():
        if not isinstance(parts, dict):
            raise InvalidConfig(f"option {name}: topic {topic!r} must map partition numbers to values", key=name)
        for part, value in parts.items():
            if not str(part).isdigit() or type(value) is not int or value < minimum:
                raise InvalidConfig(f"option {name}: {topic}/{part} -> {value!r} is not a partition number "
                                    f"mapped to an integer >= {minimum}", key=name)
            out[(topic, int(part))] = value
    return out


def _offset_spec(opts: Mapping[str, str], name: str, default: int) -> OffsetSpec:
    raw = opts.get(name.lower())
    if raw is None:
        return OffsetSpec(default)
    word = raw.strip().lower()
    if word in ("earliest", "latest"):
        return OffsetSpec(EARLIEST if word == "earliest" else LATEST)
    return OffsetSpec(default, _per_partition(raw, name, minimum=EARLIEST))


def _timestamps(opts: Mapping[str, str], prefix: str) -> Mapping[PartitionKey, int] | int | None:
    every = opts.get(f"{prefix}timestamp")
    if every is not None:
        return _int(every, f"{prefix}Timestamp", minimum=0)
    by = opts.get(f"{prefix}offsetsbytimestamp")
    return None if by is None else _per_partition(by, f"{prefix}OffsetsByTimestamp", minimum=0)


def _subscription(opts: Mapping[str, str]) -> tuple[tuple[str, ...], str | None, dict[str, tuple[int, ...]]]:
    given = [k for k in ("subscribe", "topic", "subscribepattern", "assign") if k in opts]
    if len(given) != 1:
        raise InvalidConfig("give exactly one of the options subscribe (or topic), subscribePattern, assign; "
                            f"got {given or 'none'}", key="subscribe")
    kind, raw = given[0], opts[given[0]]
    if kind in ("subscribe", "topic"):
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise InvalidConfig(f"option {kind} names no topic", key=kind)
        return topics, None, {}
    if kind == "subscribepattern":
        try:
            re.compile(raw)
        except re.error as exc:
            raise InvalidConfig(f"option subscribePattern is not a regular expression: {exc}",
                                key="subscribePattern") from None
        return (), raw, {}
    assign: dict[str, tuple[int, ...]] = {}
    for topic, parts in _json_object(raw, "assign").items():
        if not isinstance(parts, list) or not all(type(p) is int and p >= 0 for p in parts):
            raise InvalidConfig(f"option assign: topic {topic!r} must map to a list of partition numbers",
                                key="assign")
        assign[topic] = tuple(sorted(set(parts)))
    return (), None, assign


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Parse and check the read options of a batch (``streaming=False``) or streaming query.

    Raises:
        InvalidConfig: a missing, malformed or conflicting option (the message names it).
    """
    opts = _lower(options)
    topics, pattern, assign = _subscription(opts)
    starting = _offset_spec(opts, "startingOffsets", LATEST if streaming else EARLIEST)
    ending = _offset_spec(opts, "endingOffsets", LATEST)
    if streaming and "endingoffsets" in opts:
        raise InvalidConfig("option endingOffsets is for batch queries only", key="endingOffsets")
    if not streaming and (starting.default == LATEST or LATEST in starting.per_partition.values()):
        raise InvalidConfig("a batch query cannot start at latest (startingOffsets)", key="startingOffsets")
    if not streaming and (ending.default == EARLIEST or EARLIEST in ending.per_partition.values()):
        raise InvalidConfig("a batch query cannot end at earliest (endingOffsets)", key="endingOffsets")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise InvalidConfig("option startingOffsetsByTimestampStrategy must be error or latest",
                            key="startingOffsetsByTimestampStrategy")
    max_offsets = opts.get("maxoffsetspertrigger")
    return ReadOptions(
        url=_url(opts), topics=topics, pattern=pattern, assign=assign, starting=starting, ending=ending,
        starting_timestamps=_timestamps(opts, "starting"),
        ending_timestamps=None if streaming else _timestamps(opts, "ending"),
        timestamp_strategy="latest" if strategy == "latest" else "error",
        max_offsets_per_trigger=None if max_offsets is None else _int(max_offsets, "maxOffsetsPerTrigger", minimum=1),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        include_headers=_bool(opts, "includeHeaders", False),
        push_filters=_bool(opts, "pushFilters", True),
    )


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Parse the write options (``url``, optional ``topic`` and ``writerId``)."""
    opts = _lower(options)
    topic = opts.get("topic", "").strip() or None
    writer_id = opts.get("writerid", "").strip() or None
    checkpoint = opts.get("checkpointlocation", "").strip()
    if writer_id is None and checkpoint:
        writer_id = "checkpoint-" + hashlib.sha256(checkpoint.encode()).hexdigest()[:24]
    return WriteOptions(url=_url(opts), topic=topic, writer_id=writer_id)
