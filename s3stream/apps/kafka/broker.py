"""The state one Kafka server shares between connections: the store, settings, the blocking pool, metrics.

Handler families keep their own state as *components* (the fetch caches, the group coordinator, the
producer-id allocator): ``broker.component(GroupCoordinator)`` builds one on first use with
``GroupCoordinator(broker)``, and the server starts and closes those that define ``start``/``close``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from s3stream.apps.kafka.config import BrokerConfig
from s3stream.apps.kafka.metrics import KafkaMetrics
from s3stream.base.errors import UnknownTopic
from s3stream.store import Store

__all__ = ["Broker", "topic_uuid"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
_CROCKFORD_VALUE = {c: i for i, c in enumerate(_CROCKFORD)}


def topic_uuid(topic_id: str) -> uuid.UUID:
    """The 16-byte Kafka topic id of an s3stream topic id (a 26-character ULID holds exactly 128 bits)."""
    number = 0
    for ch in topic_id.lower():
        number = number * 32 + _CROCKFORD_VALUE[ch]
    return uuid.UUID(int=number & ((1 << 128) - 1))


class Broker:
    """Shared by every connection of one server; its methods are called on the event loop."""

    def __init__(self, store: Store, config: BrokerConfig) -> None:
        self.store = store
        self.config = config
        self.clock = store.clock
        self.metrics = KafkaMetrics(store.metrics_registry)
        self.cluster_id = _cluster_id(store.url)
        self._pool = ThreadPoolExecutor(max_workers=config.io_threads, thread_name_prefix="kafka-io")
        self._components: dict[Callable[[Broker], Any], Any] = {}
        self._topic_names: dict[uuid.UUID, str] = {}

    async def run_blocking(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking store call on the bounded pool, so one slow call never stalls the loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    def component(self, cls: Callable[[Broker], T]) -> T:
        """This server's single ``cls(broker)``, built on first use."""
        found = self._components.get(cls)
        if found is None:
            found = self._components[cls] = cls(self)
        return found  # type: ignore[no-any-return,unused-ignore]

    # -- topic ids -------------------------------------------------------------------------------

    def topic_uuid(self, name: str) -> uuid.UUID:
        """The stable 16-byte id of ``name`` (blocking: may read the topic document). Raises UnknownTopic."""
        tid = topic_uuid(self.store.topic_id(name))
        self._topic_names[tid] = name
        return tid

    def topic_name(self, tid: uuid.UUID) -> str:
        """The topic whose id is ``tid`` (blocking: may list topics). Raises UnknownTopic."""
        name = self._topic_names.get(tid)
        if name is not None:
            return name
        for candidate in self.store.list_topics():
            if self.topic_uuid(candidate) == tid:
                return candidate
        raise UnknownTopic(f"unknown topic id {tid}")

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the components handler modules ask for at startup (``STARTUP`` in their module)."""
        from s3stream.apps.kafka.handlers import startup_components

        for cls in startup_components():
            component = self.component(cls)
            start = getattr(component, "start", None)
            if start is not None:
                await start()

    async def close(self) -> None:
        for component in reversed(list(self._components.values())):
            close = getattr(component, "close", None)
            if close is None:
                continue
            try:
                await close()
            except Exception:
                log.exception("closing %s failed", type(component).__name__)
        self._pool.shutdown(wait=True, cancel_futures=True)


def _cluster_id(url: str) -> str:
    """A stable cluster id for a store: every server on one bucket reports the same one."""
    import base64
    import hashlib

    digest = hashlib.sha256(url.encode()).digest()[:16]
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")
