"""The Kafka APIs the server implements, one module per family; :func:`all_apis` is the advertised table.

Each module exports ``APIS`` (its :class:`~s3stream.apps.kafka.api.ApiSpec` list) and may export ``STARTUP``:
component classes the server builds and starts before it accepts connections (the group coordinator
reloads committed offsets).
"""

from __future__ import annotations

from functools import cache
from types import ModuleType
from typing import Any

from s3stream.apps.kafka.api import ApiSpec

__all__ = ["all_apis", "startup_components"]


def _modules() -> tuple[ModuleType, ...]:
    from s3stream.apps.kafka.handlers import (
        admin,
        api_versions,
        configs,
        fetch,
        groups,
        list_offsets,
        metadata,
        produce,
        producer_ids,
        sasl,
    )

    return (api_versions, sasl, metadata, produce, fetch, list_offsets, admin, configs, groups, producer_ids)


@cache
def all_apis() -> tuple[ApiSpec, ...]:
    """Every implemented API, sorted by key (ApiVersions advertises exactly these)."""
    specs = [spec for module in _modules() for spec in module.APIS]
    keys = [s.api_key for s in specs]
    if len(keys) != len(set(keys)):
        raise RuntimeError(f"an API key is implemented twice: {sorted(keys)}")
    return tuple(sorted(specs, key=lambda s: s.api_key))


def startup_components() -> list[type[Any]]:
    return [cls for module in _modules() for cls in getattr(module, "STARTUP", ())]
