"""Store-level (Kafka: broker-level) settings: frozen, validated data, built in code or from options.

Vocabulary:

* **setting**: one field of :class:`StoreSettings` (python name ``flush_interval_ms``; option
  spellings ``flush.interval.ms`` and ``flush-interval-ms`` are the same setting).
* **option**: a ``name -> value`` pair from a URL query string, CLI flag or config file; values
  may be strings and are coerced (``"250"`` -> 250, ``"false"`` -> False).
* **broker synonym**: Kafka's broker-level name of a topic config (``log.retention.ms``,
  ``log.retention.hours``, ``message.max.bytes`` ...). As options they set
  :attr:`StoreSettings.default_topic_config`, the defaults for topics created by this store.

Invariants:

* A :class:`StoreSettings` value is always valid: ``__post_init__`` checks every field's type and
  range (raising :class:`InvalidConfig` naming the setting and the rule), and stores
  ``default_topic_config`` canonical and immutable.
* Settings hold data only; components (clock, ids, object store, metrics) are injected separately.
* Topic defaults are applied once, when a topic is created (:meth:`StoreSettings.new_topic_config`):
  the topic document then holds them, so every process reading the bucket agrees on the config.
"""

from __future__ import annotations

import difflib
import hashlib
import math
import re
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import platformdirs

from s3stream.base.errors import InvalidConfig
from s3stream.base.topic_config import LONG_MAX, TOPIC_CONFIGS, normalize_topic_config

__all__ = ["BROKER_SYNONYMS", "StoreSettings", "default_wal_dir", "setting_name"]

_MiB = 1024 * 1024
_INTEGER_RE = re.compile(r"[+-]?[0-9]+", re.ASCII)
_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})
_SECRET_RE = re.compile(r"secret|passw|token|credential|signature|access_?key|key_?id|session", re.I)

SettingKind = Literal["int", "bool", "ratio", "choice", "path", "topic_config"]


@dataclass(frozen=True, slots=True)
class _Spec:
    """How one setting is checked and documented; ``minimum`` applies to ``int`` settings, ``choices`` to
    ``choice`` settings (lower-case words)."""

    kind: SettingKind
    doc: str
    minimum: int = 0
    choices: tuple[str, ...] = ()


def _spec(kind: SettingKind, doc: str, minimum: int = 0, choices: tuple[str, ...] = ()) -> dict[str, _Spec]:
    return {"spec": _Spec(kind, doc, minimum, choices)}


class _FrozenConfig(Mapping[str, str]):
    """An immutable, hashable, picklable ``dict[str, str]`` (settings travel to Spark executors)."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, str]) -> None:
        self._items = dict(items)

    def __getitem__(self, key: str) -> str:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(frozenset(self._items.items()))

    def __repr__(self) -> str:
        return repr(self._items)


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreSettings:
    """Every store-level setting, with its default; see docs/configuration.md for the full table."""

    ack: Literal["wal", "s3"] = field(default="wal", metadata=_spec(
        "choice", "When an append is acknowledged: wal = after the local WAL fsync (group commit); "
                  "s3 = after the WAL object holding it is committed in the bucket.", choices=("wal", "s3")))
    flush_interval_ms: int = field(default=250, metadata=_spec(
        "int", "Upload buffered WAL data as one multi-partition WAL object at least this often.", 1))
    flush_bytes: int = field(default=8 * _MiB, metadata=_spec(
        "int", "Also upload as soon as this many bytes are buffered.", 1))
    wal_dir: str | None = field(default=None, metadata=_spec(
        "path", "Local WAL directory; default: file:// stores use DIR/_wal, others a per-store "
                "directory under the user data dir (see default_wal_dir)."))
    node_id: str | None = field(default=None, metadata=_spec(
        "path", "Name of this process's node (its local WAL directory and WAL namespace); default: reuse a "
                "directory an earlier process left, else a new n-<ulid>."))
    wal_fsync: bool = field(default=True, metadata=_spec(
        "bool", "fsync WAL writes before acknowledging (false trades durability for latency)."))
    wal_file_bytes: int = field(default=64 * _MiB, metadata=_spec(
        "int", "Size at which the local WAL starts a new file (trimmed files are deleted, but for one spare "
               "with wal.recycle).", 1))
    wal_recycle: bool = field(default=True, metadata=_spec(
        "bool", "Reuse a trimmed WAL file's space for the next one, so an fsync flushes data without a filesystem "
                "journal commit (a shorter ack latency tail on a disk other writers share; keeps one spare file)."))
    buffer_bytes: int = field(default=64 * _MiB, metadata=_spec(
        "int", "Max unflushed bytes in memory; appends wait beyond it (backpressure).", 1))
    cache_bytes: int = field(default=128 * _MiB, metadata=_spec(
        "int", "Tail cache serving tailing readers and sealing without S3 reads; decoded WAL-object chunks read "
               "back from the bucket are cached in what it leaves (0 disables both).", 0))
    read_ahead_bytes: int = field(default=2 * _MiB, metadata=_spec(
        "int", "Bytes fetched ahead by sequential readers of sealed segments (0 disables).", 0))
    upload_concurrency: int = field(default=4, metadata=_spec(
        "int", "Parallel object uploads (WAL objects, segments).", 1))
    max_block_ms: int = field(default=60000, metadata=_spec(
        "int", "How long an append may wait for room in buffer.bytes (then BufferFull, nothing written) and, "
               "with ack=s3, for its WAL object (then StoreUnavailable: it may still land); with ack=s3, "
               "once WAL-object uploads have failed for this long, appends fail at once with "
               "StoreUnavailable until one succeeds (Kafka producer's max.block.ms). With ack=s3 it must exceed "
               "flush.interval.ms.", 0))
    upload_retry_backoff_ms: int = field(default=100, metadata=_spec(
        "int", "Pause before the first retry of a failed WAL-object upload; it doubles per failure (with "
               "jitter) up to upload.retry.backoff.max.ms. Uploads retry until they land, as the same object: "
               "only a fence stops the node.", 1))
    upload_retry_backoff_max_ms: int = field(default=5000, metadata=_spec(
        "int", "Cap of the upload retry pause: after an outage, uploads resume within about this long of the "
               "store's return (a cap below upload.retry.backoff.ms means that pause, never doubled).", 1))
    seal_concurrency: int = field(default=2, metadata=_spec(
        "int", "Segments this process seals at once (each holds up to one upload part): one seal's upload "
               "overlaps the next one's reads and encoding.", 1))
    seal_workers: Literal["auto", "process", "thread"] = field(default="auto", metadata=_spec(
        "choice", "Where seals read, encode and upload segments: process = in worker processes at a lower CPU "
                  "priority (seal_concurrency of them, started on the first seal, opening the store URL "
                  "themselves), so a seal's Python work never holds the GIL appends need; thread = in this "
                  "process; auto = process for an s3:// store s3stream opened itself, thread otherwise "
                  "(memory:// stores always seal in threads).",
        choices=("auto", "process", "thread")))
    background: Literal["threads", "manual"] = field(default="threads", metadata=_spec(
        "choice", "Who runs the store's background work (append drains, WAL-object flushes and their "
                  "publication, seals, manifest probes, read-ahead, cleaning rounds, resuming a local WAL after "
                  "a full disk, the local WAL's writes and fsyncs): threads = the store's own threads and pools; "
                  "manual = nobody, the caller drives each step in its own thread (Runtime.steps(), for "
                  "deterministic tests and simulation: no thread, pool or worker process is started, seals run "
                  "in the calling thread whatever seal.workers says, and a WAL-object PUT is one attempt per "
                  "step); blocking calls (append, flush, roll, close) then run the steps they wait for inline.",
        choices=("threads", "manual")))
    segment_row_group_bytes: int = field(default=1 * _MiB, metadata=_spec(
        "int", "Target Parquet row-group size in segment objects: the unit of a ranged read.", 1))
    segment_upload_part_bytes: int = field(default=128 * _MiB, metadata=_spec(
        "int", "Part size of a segment's streamed upload: a seal holds one part, not the segment; a segment "
               "of up to one part is one PUT, a larger one a multipart upload (parts + 2 requests), so "
               "smaller parts trade PUT requests for memory; at least S3's 5 MiB minimum part. A local "
               "directory takes at most 8 MiB at a time whatever this says (no per-request cost).", 5 * _MiB))
    commit_timeout_ms: int = field(default=60000, metadata=_spec(
        "int", "Deadline of one manifest commit under contention, then CommitTimeout.", 1))
    orphan_min_age_ms: int = field(default=3_600_000, metadata=_spec(
        "int", "GC deletes a never-committed object only when older than this.", 0))
    manifest_min_age_ms: int = field(default=3_600_000, metadata=_spec(
        "int", "GC deletes a superseded manifest version only when older than this.", 0))
    log_retention_check_interval_ms: int = field(default=300000, metadata=_spec(
        "int", "How often retention runs for non-compacted topics (RET-2).", 1))
    log_cleaner_enable: bool = field(default=True, metadata=_spec(
        "bool", "Run the cleaner; if false, no compaction and no retention for compacted topics (CFG-2)."))
    log_cleaner_threads: int = field(default=1, metadata=_spec(
        "int", "Partitions cleaned concurrently.", 1))
    log_cleaner_dedupe_buffer_size: int = field(default=134217728, metadata=_spec(
        "int", "Memory for the cleaner's offset maps, shared by all threads (CLEAN-MAP-2).", 1))
    log_cleaner_io_buffer_load_factor: float = field(default=0.9, metadata=_spec(
        "ratio", "Offset-map load factor in (0, 1], despite the Kafka name (CLEAN-MAP-2)."))
    log_cleaner_backoff_ms: int = field(default=15000, metadata=_spec(
        "int", "Cleaner sleep when no partition is cleanable (CLEAN-SEL-1).", 0))
    probe: bool = field(default=True, metadata=_spec(
        "bool", "Run the conditional-write capability probe when the store opens."))
    default_topic_config: Mapping[str, str] = field(default_factory=dict, metadata=_spec(
        "topic_config", "Topic config defaults for topics this store creates (validated, canonical); "
                        "also set through broker synonyms such as log.retention.hours."))

    def __post_init__(self) -> None:
        for f in fields(self):
            _check(f.metadata["spec"], f.name, getattr(self, f.name))
        if self.ack == "s3" and self.max_block_ms <= self.flush_interval_ms:
            raise InvalidConfig(f"Invalid configuration: with ack=s3, max_block_ms ({self.max_block_ms}) must be "
                                f"greater than flush_interval_ms ({self.flush_interval_ms}): an append waits for "
                                "its WAL object at most max_block_ms", key="max_block_ms")
        canonical = _FrozenConfig(normalize_topic_config(self.default_topic_config))
        object.__setattr__(self, "default_topic_config", canonical)

    @classmethod
    def from_options(cls, options: Mapping[str, object]) -> StoreSettings:
        """Build settings from options (URL query, CLI flags): python or dotted names, string values.

        Broker synonyms of topic configs (``log.retention.ms``, ``log.retention.hours`` ...) go to
        ``default_topic_config`` with Kafka's precedence (ms over minutes over hours).

        Raises:
            InvalidConfig: an unknown option (named, its value never echoed), a setting given twice,
                or a value that cannot be coerced or breaks its rule.
        """
        values: dict[str, Any] = {}
        synonyms: dict[str, tuple[int, str, str]] = {}  # topic key -> (unit ms, canonical value, option)
        for option, raw in options.items():
            if not isinstance(option, str):
                raise InvalidConfig(f"Option names must be strings, got {type(option).__name__}")
            name = setting_name(option)
            if name is not None:
                if name in values:
                    raise InvalidConfig(f"Setting {name} given twice (as {option!r})", key=option)
                values[name] = _coerce(_SPECS[name], option, raw)
            elif option.strip().lower() in BROKER_SYNONYMS:
                _add_synonym(synonyms, option.strip().lower(), raw)
            else:
                raise InvalidConfig(_unknown_option_message(option), key=option)
        if synonyms:
            topic_defaults = dict(values.get("default_topic_config", {}))
            for key, (_, value, option) in synonyms.items():
                if key in topic_defaults:
                    raise InvalidConfig(f"Topic default {key} given twice: in default_topic_config and "
                                        f"as {option}", key=option)
                topic_defaults[key] = value
            values["default_topic_config"] = topic_defaults
        return cls(**values)

    def resolved_wal_dir(self, url: str) -> str:
        """The WAL directory for the store at ``url``: ``wal_dir`` if set, else :func:`default_wal_dir`."""
        return self.wal_dir if self.wal_dir is not None else default_wal_dir(url)

    def new_topic_config(self, config: Mapping[str, object] | None) -> dict[str, str]:
        """The overrides to store for a new topic: ``default_topic_config`` under the explicit ``config``.

        Raises:
            InvalidConfig: as :func:`s3stream.base.topic_config.normalize_topic_config`.
        """
        return normalize_topic_config({**self.default_topic_config, **(config or {})})


_SPECS: Mapping[str, _Spec] = {f.name: f.metadata["spec"] for f in fields(StoreSettings)}

#: Kafka broker-level names of topic configs -> (topic config, milliseconds per unit).
BROKER_SYNONYMS: Mapping[str, tuple[str, int]] = {
    **{d.broker_synonym: (d.name, 1) for d in TOPIC_CONFIGS.values() if d.broker_synonym},
    "log.retention.minutes": ("retention.ms", 60_000),
    "log.retention.hours": ("retention.ms", 3_600_000),
    "log.roll.hours": ("segment.ms", 3_600_000),
    "log.roll.jitter.hours": ("segment.jitter.ms", 3_600_000),
}


def setting_name(option: str) -> str | None:
    """The :class:`StoreSettings` field an option names (``flush.interval.ms`` -> ``flush_interval_ms``)."""
    name = option.strip().lower().replace(".", "_").replace("-", "_")
    return name if name in _SPECS else None


def _unknown_option_message(option: str) -> str:
    known = [*(n.replace("_", ".") for n in _SPECS), *BROKER_SYNONYMS]
    close = difflib.get_close_matches(option.strip().lower().replace("_", "."), known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"Unknown store option {option!r}{hint}"


def _add_synonym(found: dict[str, tuple[int, str, str]], option: str, raw: object) -> None:
    """Record a broker synonym's topic default; the finer unit wins, as in Kafka (ms > min > h)."""
    key, unit_ms = BROKER_SYNONYMS[option]
    if unit_ms != 1:
        millis = _coerce(_Spec("int", "", -LONG_MAX), option, raw) * unit_ms
        raw = -1 if key == "retention.ms" and millis < 0 else millis  # Kafka: negative retention = -1
    try:
        value = TOPIC_CONFIGS[key].validate(raw)
    except InvalidConfig as exc:
        raise InvalidConfig(f"{exc} (given as {option})", key=option) from None
    previous = found.get(key)
    if previous is not None and previous[0] == unit_ms:
        raise InvalidConfig(f"Option {option} given twice", key=option)
    if previous is None or unit_ms < previous[0]:
        found[key] = (unit_ms, value, option)


def _invalid(name: str, raw: object, rule: str) -> InvalidConfig:
    return InvalidConfig(f"Invalid value {raw!r} for setting {name}: {rule}", key=name)


def _coerce(spec: _Spec, name: str, raw: object) -> Any:
    """Turn an option value (often a string) into the setting's type; :func:`_check` does ranges."""
    if spec.kind == "int" and isinstance(raw, str):
        if not _INTEGER_RE.fullmatch(raw.strip()):
            raise _invalid(name, raw, "Expected an integer")
        raw = int(raw.strip())
    elif spec.kind == "int" and isinstance(raw, float) and math.isfinite(raw) and raw.is_integer():
        raw = int(raw)
    elif spec.kind == "bool" and isinstance(raw, str):
        word = raw.strip().lower()
        if word not in _TRUE | _FALSE:
            raise _invalid(name, raw, "Expected true or false")
        raw = word in _TRUE
    elif spec.kind == "ratio" and isinstance(raw, str):
        try:
            raw = float(raw.strip())
        except ValueError:
            raise _invalid(name, raw, "Expected a number") from None
    elif spec.kind == "choice" and isinstance(raw, str):
        raw = raw.strip().lower()
    _check(spec, name, raw)
    return raw


def _check(spec: _Spec, name: str, value: object) -> None:
    """Type and range of one setting value (strict: no coercion here)."""
    if spec.kind == "int":
        if isinstance(value, bool) or not isinstance(value, int) or value > LONG_MAX:
            raise _invalid(name, value, "Expected an integer")
        if value < spec.minimum:
            raise _invalid(name, value, f"Value must be at least {spec.minimum}")
    elif spec.kind == "bool" and not isinstance(value, bool):
        raise _invalid(name, value, "Expected true or false")
    elif spec.kind == "ratio":
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
            raise _invalid(name, value, "Value must be a number in (0, 1]")
    elif spec.kind == "choice" and value not in spec.choices:
        raise _invalid(name, value, f"String must be one of: {', '.join(spec.choices)}")
    elif spec.kind == "path" and value is not None and (not isinstance(value, str) or not value):
        raise _invalid(name, value, "Expected a non-empty path")
    elif spec.kind == "topic_config" and not isinstance(value, Mapping):
        raise _invalid(name, value, "Expected a mapping of topic configs (or use broker synonyms such "
                                    "as log.retention.ms)")


def default_wal_dir(url: str) -> str:
    """The default local WAL directory of the store at ``url``.

    ``file:///ABS/DIR`` -> ``/ABS/DIR/_wal`` (the WAL lives beside the data). Anything else ->
    ``user_data_dir("s3stream")/wal/{slug}-{hash}``: the slug (scheme, host, path; no credentials,
    no query) is for humans, the short sha256 tells apart stores whose slugs collide. The hash covers
    the store's identity, not the whole URL: credentials, secret-looking query parameters and store
    options are left out, so rotating a key or tuning ``flush_interval_ms`` never strands an acked WAL.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() == "file" and parts.netloc in ("", "localhost") and parts.path.startswith("/"):
        return f"{urllib.parse.unquote(parts.path).rstrip('/')}/_wal"
    host = parts.netloc.rpartition("@")[2]
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{parts.scheme}_{host}{parts.path}").strip("._-")[:64]
    query = sorted((k, v) for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
                   if not _SECRET_RE.search(k) and setting_name(k) is None
                   and k.strip().lower() not in BROKER_SYNONYMS)
    identity = f"{parts.scheme.lower()}://{host}{parts.path}?{urllib.parse.urlencode(query)}"
    digest = hashlib.sha256(identity.encode()).hexdigest()[:12]
    return f"{platformdirs.user_data_dir('s3stream')}/wal/{slug or 'store'}-{digest}"
