"""DescribeConfigs (32), AlterConfigs (33) and IncrementalAlterConfigs (44) for topics and this broker.

Topic configs are the store's (Kafka's names, defaults and validation: :mod:`s3stream.base.topic_config`).
An override removed by an alter falls back to the store's topic default (its broker-level synonym, e.g.
``log.retention.ms``) when one is set, else to Kafka's default. Broker configs are the server's and the
store's settings under Kafka's names; they are read-only here (set them as server options and restart).
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from s3stream.apps.kafka.api import ApiSpec
from s3stream.apps.kafka.broker import Broker
from s3stream.apps.kafka.config import BrokerConfig
from s3stream.apps.kafka.errors import error_code
from s3stream.apps.kafka.messages import blocking, build, nested
from s3stream.apps.kafka.wire import response_class
from s3stream.base.errors import InvalidConfig, InvalidRequest, S3StreamError
from s3stream.base.topic_config import TOPIC_CONFIGS, alter_topic_config

__all__ = ["APIS", "broker_configs"]

TOPIC = 2
BROKER = 4

# ConfigSource
_DYNAMIC_TOPIC_CONFIG = 1
_STATIC_BROKER_CONFIG = 4
_DEFAULT_CONFIG = 5
# ConfigType (DescribeConfigs v3+)
_CONFIG_TYPES = {"boolean": 1, "string": 2, "int": 3, "long": 5, "double": 6, "list": 7}
# IncrementalAlterConfigs operations
_SET, _DELETE, _APPEND, _SUBTRACT = 0, 1, 2, 3

_NO_TIME = datetime.timedelta(0)


@dataclass(frozen=True, slots=True)
class _Entry:
    """One described config: value, ConfigSource, ConfigType, and its synonyms (most specific first)."""

    name: str
    value: str | None
    source: int
    type: int
    synonyms: tuple[tuple[str, str | None, int], ...]


# -- what there is to describe -----------------------------------------------------------------------------


def _topic_entries(broker: Broker, name: str) -> list[_Entry]:
    store = broker.store
    effective = store.topic_config(name)
    overrides = store.topic_overrides(name)
    defaults = store.settings.default_topic_config
    out = []
    for key, value in effective.items():
        cdef = TOPIC_CONFIGS[key]
        synonyms: list[tuple[str, str | None, int]] = []
        if key in overrides:
            synonyms.append((key, overrides[key], _DYNAMIC_TOPIC_CONFIG))
        if cdef.broker_synonym is not None:
            if key in defaults:
                synonyms.append((cdef.broker_synonym, defaults[key], _STATIC_BROKER_CONFIG))
            synonyms.append((cdef.broker_synonym, cdef.default, _DEFAULT_CONFIG))
        source = _DYNAMIC_TOPIC_CONFIG if key in overrides else _DEFAULT_CONFIG
        out.append(_Entry(key, value, source, _CONFIG_TYPES.get(cdef.type, 0), tuple(synonyms)))
    return out


#: BrokerConfig fields are reported under their option names (``num.partitions``: what the server accepts),
#: plus Kafka's own name where it differs
_KAFKA_ALIASES = {"node_id": "broker.id", "io_threads": "num.io.threads"}
_SKIPPED = {"ssl_context", "sasl_users_file", "host", "port", "advertised_host", "advertised_port"}


def _text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def _type_of(field: str, value: object) -> int:
    if isinstance(value, bool):
        return _CONFIG_TYPES["boolean"]
    if isinstance(value, int):
        return _CONFIG_TYPES["long" if field.endswith("_ms") else "int"]
    return _CONFIG_TYPES["list"] if isinstance(value, tuple) else _CONFIG_TYPES["string"]


def broker_configs(broker: Broker) -> dict[str, tuple[str | None, int, int]]:
    """This broker's configs: Kafka name -> (value, ConfigSource, ConfigType)."""
    cfg = broker.config
    out: dict[str, tuple[str | None, int, int]] = {}
    default = BrokerConfig()
    for f in dataclass_fields(cfg):
        if f.name in _SKIPPED:
            continue
        value = getattr(cfg, f.name)
        source = _DEFAULT_CONFIG if value == getattr(default, f.name) else _STATIC_BROKER_CONFIG
        entry = (_text(value), source, _type_of(f.name, value))
        out[f.name.replace("_", ".")] = entry
        if f.name in _KAFKA_ALIASES:
            out[_KAFKA_ALIASES[f.name]] = entry
    host, port = cfg.advertised
    string = _CONFIG_TYPES["string"]
    out["listeners"] = (f"PLAINTEXT://{cfg.host}:{cfg.port or port}", _STATIC_BROKER_CONFIG, string)
    out["advertised.listeners"] = (f"PLAINTEXT://{host}:{port}", _STATIC_BROKER_CONFIG, string)
    out["default.replication.factor"] = ("1", _DEFAULT_CONFIG, _CONFIG_TYPES["int"])
    out["delete.topic.enable"] = ("true", _DEFAULT_CONFIG, _CONFIG_TYPES["boolean"])
    defaults = broker.store.settings.default_topic_config
    for key, cdef in TOPIC_CONFIGS.items():
        if cdef.broker_synonym is not None and cdef.broker_synonym not in out:
            source = _STATIC_BROKER_CONFIG if key in defaults else _DEFAULT_CONFIG
            out[cdef.broker_synonym] = (defaults.get(key, cdef.default), source, _CONFIG_TYPES.get(cdef.type, 0))
    return dict(sorted(out.items()))


def _broker_entries(broker: Broker, name: str) -> list[_Entry]:
    if name == "":  # the cluster-wide dynamic defaults: none can be set on s3stream
        return []
    if name != str(broker.config.node_id):
        raise InvalidRequest(f"broker {name!r} is not this server (node.id {broker.config.node_id}); describe "
                             "each broker's configs on that broker")
    return [_Entry(key, value, source, type_, ((key, value, source),))
            for key, (value, source, type_) in broker_configs(broker).items()]


# -- DescribeConfigs (32) --------------------------------------------------------------------------------


def _describe_configs(broker: Broker, version: int, request: Any) -> Any:
    cls = response_class(32, version)
    result_cls = nested(cls, "DescribeConfigsResult")
    entry_cls = nested(cls, "DescribeConfigsResourceResult")
    synonym_cls = nested(cls, "DescribeConfigsSynonym")
    results = []
    for resource in request.resources:
        error, message, entries = ErrorCode.none, None, []
        try:
            entries = _entries(broker, int(resource.resource_type), resource.resource_name)
        except S3StreamError as exc:
            error, message = error_code(exc), str(exc)
        keys = None if resource.configuration_keys is None else set(resource.configuration_keys)
        configs = tuple(
            build(entry_cls, name=e.name, value=e.value, read_only=int(resource.resource_type) == BROKER,
                  config_source=i8(e.source), is_sensitive=False, config_type=i8(e.type), documentation=None,
                  synonyms=tuple(synonym_cls(name=n, value=v, source=i8(s)) for n, v, s in e.synonyms)
                  if request.include_synonyms else ())
            for e in entries if keys is None or e.name in keys)
        results.append(result_cls(error_code=error, error_message=message, resource_type=resource.resource_type,
                                  resource_name=resource.resource_name, configs=configs))
    return cls(throttle_time=_NO_TIME, results=tuple(results))


def _entries(broker: Broker, resource_type: int, name: str) -> list[_Entry]:
    if resource_type == TOPIC:
        return _topic_entries(broker, name)
    if resource_type == BROKER:
        return _broker_entries(broker, name)
    raise InvalidRequest(f"unsupported config resource type {resource_type}: s3stream describes topics (2) and "
                         "brokers (4)")


# -- AlterConfigs (33) and IncrementalAlterConfigs (44) ---------------------------------------------------


def _fallback(broker: Broker, key: str) -> str | None:
    """What a removed override becomes: the store's topic default for ``key``, else None (Kafka's default)."""
    return broker.store.settings.default_topic_config.get(key)


def _replace_all(broker: Broker, name: str, configs: Any) -> dict[str, str | None]:
    """Legacy AlterConfigs: the given configs become the whole override set."""
    given: dict[str, str | None] = {}
    for c in configs:
        if c.value is None:
            raise InvalidConfig(f"Null value not supported for topic configs: {c.name}", key=c.name)
        given[c.name] = c.value
    current = broker.store.topic_overrides(name)
    updates = {key: _fallback(broker, key) for key in current if key not in given}
    updates.update(given)
    return updates


def _incremental(broker: Broker, name: str, configs: Any) -> dict[str, str | None]:
    """IncrementalAlterConfigs: SET, DELETE, APPEND and SUBTRACT (the last two on list configs only)."""
    repeated = [key for key, n in Counter(c.name for c in configs).items() if n > 1]
    if repeated:
        raise InvalidRequest(f"Error due to duplicate config keys: {', '.join(sorted(repeated))}")
    effective: dict[str, str] | None = None
    updates: dict[str, str | None] = {}
    for c in configs:
        op = int(c.config_operation)
        if op == _DELETE:
            updates[c.name] = _fallback(broker, c.name)
            continue
        if op not in (_SET, _APPEND, _SUBTRACT):
            raise InvalidRequest(f"unknown config operation {op} for {c.name} (SET=0, DELETE=1, APPEND=2, "
                                 "SUBTRACT=3)")
        if c.value is None:
            raise InvalidRequest(f"Null value not supported for : {c.name}")
        if op == _SET:
            updates[c.name] = c.value
            continue
        cdef = TOPIC_CONFIGS.get(c.name)
        if cdef is None or cdef.type != "list":
            verb = "append" if op == _APPEND else "subtract"
            raise InvalidConfig(f"Config value {verb} is not allowed for config key: {c.name}", key=c.name)
        if effective is None:
            effective = broker.store.topic_config(name)
        items = [v for v in effective[c.name].split(",") if v]
        given = [v.strip() for v in c.value.split(",") if v.strip()]
        if op == _APPEND:
            items += [v for v in given if v not in items]
        else:
            items = [v for v in items if v not in given]
        updates[c.name] = ",".join(items)
    return updates


def _alter(broker: Broker, resource: Any, validate_only: bool,
           plan: Callable[[Broker, str, Any], Mapping[str, str | None]]) -> None:
    rtype, name = int(resource.resource_type), resource.resource_name
    if rtype == BROKER:
        raise InvalidRequest("broker configs are read-only in s3stream: set them as server options and restart "
                             "the server")
    if rtype != TOPIC:
        raise InvalidRequest(f"unsupported config resource type {rtype}: s3stream alters topic configs (2) only")
    store = broker.store
    updates = plan(broker, name, resource.configs)
    if validate_only:
        alter_topic_config(store.topic_overrides(name), updates)  # raises InvalidConfig
    else:
        store.alter_topic_config(name, updates)


def _alter_configs(broker: Broker, version: int, request: Any, *, key: int,
                   plan: Callable[[Broker, str, Any], Mapping[str, str | None]]) -> Any:
    cls = response_class(key, version)
    result_cls = nested(cls, "AlterConfigsResourceResponse")
    duplicates = {r for r, n in Counter((int(r.resource_type), r.resource_name) for r in request.resources).items()
                  if n > 1}
    results = []
    for resource in request.resources:
        error, message = ErrorCode.none, None
        try:
            if (int(resource.resource_type), resource.resource_name) in duplicates:
                raise InvalidRequest(f"duplicate resource {resource.resource_name!r} in one request")
            _alter(broker, resource, request.validate_only, plan)
        except S3StreamError as exc:
            error, message = error_code(exc), str(exc)
        results.append(result_cls(error_code=error, error_message=message, resource_type=resource.resource_type,
                                  resource_name=resource.resource_name))
    return cls(throttle_time=_NO_TIME, responses=tuple(results))


def _legacy_alter(broker: Broker, version: int, request: Any) -> Any:
    return _alter_configs(broker, version, request, key=33, plan=_replace_all)


def _incremental_alter(broker: Broker, version: int, request: Any) -> Any:
    return _alter_configs(broker, version, request, key=44, plan=_incremental)


APIS = [
    ApiSpec(32, "DescribeConfigs", 1, 4, blocking(_describe_configs)),
    ApiSpec(33, "AlterConfigs", 0, 2, blocking(_legacy_alter)),
    ApiSpec(44, "IncrementalAlterConfigs", 0, 1, blocking(_incremental_alter)),
]
