"""The Kafka server's settings, under Kafka's broker config names where Kafka has one."""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from s3stream.base.errors import InvalidConfig

__all__ = ["DEFAULT_PORT", "BrokerConfig", "parse_listener"]

DEFAULT_PORT = 9092


def parse_listener(text: str, *, what: str = "listener") -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT``; an optional ``PLAINTEXT://``-style prefix is ignored) -> (host, port)."""
    rest = text.split("://", 1)[1] if "://" in text else text
    host, sep, port_s = rest.rpartition(":")
    if not sep or not port_s.isdigit() or not 0 <= int(port_s) <= 65535:
        raise InvalidConfig(f"{what} {text!r} must be HOST:PORT (e.g. 127.0.0.1:9092)", key=what)
    host = host.strip("[]")
    return host or "127.0.0.1", int(port_s)


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """What one Kafka server listens on and how it behaves; the store's own settings stay the store's.

    ``acks_all`` is where acks=all (-1) is acknowledged: ``"s3"`` (default) once the records are in a
    committed WAL object, because only the bucket survives the loss of the node; ``"wal"`` from the fsynced
    local WAL, for a disk that outlives the node. acks=1 is always acknowledged from the local WAL.
    """

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    advertised_host: str | None = None
    advertised_port: int | None = None
    node_id: int = 0
    auto_create_topics_enable: bool = True
    num_partitions: int = 1
    acks_all: str = "s3"
    socket_request_max_bytes: int = 100 * 1024 * 1024
    max_connections: int = 1000
    connections_max_idle_ms: int = 600_000
    max_inflight_requests_per_connection: int = 1000
    max_inflight_bytes_per_connection: int = 256 * 1024 * 1024
    io_threads: int = 16
    offsets_topic_num_partitions: int = 50
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3_000
    offsets_retention_minutes: int = 10_080
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4_096
    fetch_cache_bytes: int = 256 * 1024 * 1024
    ssl_context: ssl.SSLContext | None = field(default=None, compare=False, repr=False)
    sasl_enabled_mechanisms: tuple[str, ...] = ()
    sasl_users_file: str | None = None

    def __post_init__(self) -> None:
        if self.acks_all not in ("s3", "wal"):
            raise InvalidConfig(f"kafka.acks.all must be 's3' or 'wal', not {self.acks_all!r}", key="kafka.acks.all")
        for f in fields(self):
            value = getattr(self, f.name)
            if type(value) is int and f.name not in ("port", "advertised_port", "node_id") and value <= 0:
                raise InvalidConfig(f"{f.name.replace('_', '.')} must be positive, not {value}",
                                    key=f.name.replace("_", "."))

    @property
    def advertised(self) -> tuple[str, int]:
        """The address clients are told to connect to (Metadata, FindCoordinator)."""
        return self.advertised_host or self.host, self.advertised_port or self.port

    def with_options(self, options: Mapping[str, Any]) -> BrokerConfig:
        """A copy with ``options`` applied (Python names or Kafka's dotted names); InvalidConfig for unknown keys."""
        known = {f.name for f in fields(self)}
        changes: dict[str, Any] = {}
        for key, value in options.items():
            name = key.replace(".", "_").replace("-", "_")
            if name not in known and name.startswith("kafka_") and name[6:] in known:
                name = name[6:]  # kafka.acks.all: the s3stream-specific names carry a kafka. prefix
            if name not in known:
                raise InvalidConfig(f"unknown Kafka server option {key!r}", key=key)
            current = getattr(self, name)
            changes[name] = _coerce(key, value, current)
        return replace(self, **changes)


def _coerce(key: str, value: Any, current: Any) -> Any:
    if not isinstance(value, str) or isinstance(current, str) or current is None:
        return value
    if isinstance(current, bool):
        if value.lower() not in ("true", "false"):
            raise InvalidConfig(f"{key} must be true or false, not {value!r}", key=key)
        return value.lower() == "true"
    if isinstance(current, int):
        try:
            return int(value)
        except ValueError:
            raise InvalidConfig(f"{key} must be an integer, not {value!r}", key=key) from None
    if isinstance(current, tuple):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    return value


#: What each option does, for ``docs/kafka.md`` (a test keeps the two in step and requires every field here).
OPTION_DOCS: dict[str, str] = {
    "host": "Address the listener binds (`--listen`); 127.0.0.1 unless told otherwise.",
    "port": "Port the listener binds (`--listen`); 0 picks a free one.",
    "advertised_host": "Host clients are told to connect to (`--advertised-listener`); default: the bound host.",
    "advertised_port": "Port clients are told to connect to; default: the bound port.",
    "node_id": "This server's broker id in Metadata, FindCoordinator and DescribeCluster.",
    "auto_create_topics_enable": "Metadata for an unknown topic creates it (Kafka's default: on).",
    "num_partitions": "Partitions of an auto-created topic, and of CreateTopics with -1.",
    "acks_all": "Where acks=all is acknowledged: `s3` (a committed WAL object: survives losing the node) or "
                "`wal` (the fsynced local WAL: for a disk that outlives the node). acks=1 is always `wal`.",
    "socket_request_max_bytes": "Largest request accepted; a bigger frame closes the connection.",
    "max_connections": "Open connections at most; more are closed at once.",
    "connections_max_idle_ms": "A connection that sends nothing for this long is closed.",
    "max_inflight_requests_per_connection": "Requests of one connection in progress at once (pipelining: acks=all "
                                            "waits for the bucket, so a producer keeps many in flight).",
    "max_inflight_bytes_per_connection": "Bytes of the requests of one connection in progress at once.",
    "io_threads": "Threads that run blocking store calls, so one slow call never stalls the event loop.",
    "offsets_topic_num_partitions": "Partitions of `__consumer_offsets` (fixed once the topic exists).",
    "group_min_session_timeout_ms": "Smallest session timeout a consumer may ask for.",
    "group_max_session_timeout_ms": "Largest session timeout a consumer may ask for.",
    "group_initial_rebalance_delay_ms": "How long the first rebalance of an empty group waits for more members.",
    "offsets_retention_minutes": "Committed offsets of an empty group expire after this long.",
    "offsets_retention_check_interval_ms": "How often expired committed offsets are looked for.",
    "offset_metadata_max_bytes": "Largest metadata string of a committed offset.",
    "fetch_cache_bytes": "Memory for producers' batch bytes served to caught-up consumers, and encoded cold "
                         "batches.",
    "ssl_context": "TLS for the listener (`--ssl-certfile`, `--ssl-keyfile`, `--ssl-cafile`).",
    "sasl_enabled_mechanisms": "SASL mechanisms required of clients: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512.",
    "sasl_users_file": "The users SASL authenticates (`--sasl-users`).",
}
