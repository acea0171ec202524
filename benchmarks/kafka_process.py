"""The Kafka benchmark's clients in a process of their own, as a real deployment runs them.

The server (a :class:`~s3stream.apps.kafka.server.KafkaServerThread`) keeps the benchmark's process to itself
while a Kafka phase runs; the clients (confluent-kafka's Python calls and librdkafka's threads) run in one
spawned child, so they do not share the server's GIL. The Python API path stays in the benchmark's process:
that is how an application uses the library. The child is started once (its imports are not timed) and
serves every Kafka phase; each call also returns the child's CPU over the call (``client_cpu``).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from benchmarks.kafka_clients import KafkaBenchError

__all__ = ["ClientProcess"]


def _ready() -> bool:
    import confluent_kafka  # noqa: F401  # imported once, before anything is timed

    return True


def _metered(fn: Callable[..., dict[str, Any]], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    from confluent_kafka import KafkaException

    from benchmarks.kafka_data import CpuMeter

    meter = CpuMeter()
    try:
        result = fn(*args, **kwargs)
    except KafkaException as exc:  # librdkafka's error objects do not cross processes: their text does
        raise KafkaBenchError(f"{type(exc).__name__}: {exc}") from None
    result["client_cpu"] = meter.stop()
    return result


class ClientProcess:
    """One spawned child that runs the Kafka clients' functions (from :mod:`benchmarks.kafka_clients`)."""

    def __init__(self) -> None:
        self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        self._pool.submit(_ready).result(120)

    def call(self, fn: Callable[..., dict[str, Any]], *args: Any, **kwargs: Any) -> dict[str, Any]:
        """``fn(*args, **kwargs)`` in the child; its result with ``client_cpu`` added."""
        return self._pool.submit(_metered, fn, args, kwargs).result()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> ClientProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
