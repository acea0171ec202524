"""A Kafka server on an ephemeral 127.0.0.1 port over a real store, for tests with real Kafka clients.

``kafka_server`` is a factory-backed fixture: ``kafka_server.bootstrap`` is what clients connect to;
``kafka_server.restart()`` closes the server and the store and opens both again on the same data (the
WAL directory included), as a process restart would. ``kafka_store_url`` is parametrised by the tests that
want SeaweedFS too (``@pytest.mark.parametrize("kafka_store_url", ["file", "seaweedfs"], indirect=True)``).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from s3stream.apps.kafka.config import BrokerConfig
from s3stream.apps.kafka.server import KafkaServerThread
from s3stream.store import Store, open_store

#: store settings that keep tests fast: short flush and seal intervals, quick group rebalances
FAST_STORE = {"flush_interval_ms": 20}
FAST_BROKER = {"group_initial_rebalance_delay_ms": 50, "offsets_topic_num_partitions": 4,
               "group_min_session_timeout_ms": 100}


class RunningKafka:
    """A store plus a Kafka server over it; ``restart()`` reopens both on the same data."""

    def __init__(self, url: str, wal_dir: Path, store_options: dict[str, Any], broker_options: dict[str, Any]) -> None:
        self.url = url
        self.wal_dir = wal_dir
        self.store_options = {**FAST_STORE, **store_options}
        self.broker_config = BrokerConfig(port=0).with_options({**FAST_BROKER, **broker_options})
        self.store: Store | None = None
        self.thread: KafkaServerThread | None = None
        self.port = 0

    def start(self) -> RunningKafka:
        self.store = open_store(self.url, wal_dir=str(self.wal_dir), **self.store_options)
        from dataclasses import replace

        config = replace(self.broker_config, port=self.port)  # a restart keeps the port clients know
        self.thread = KafkaServerThread(self.store, config)
        self.port = self.thread.start()[1]
        return self

    @property
    def bootstrap(self) -> str:
        assert self.thread is not None
        return self.thread.bootstrap

    @property
    def server(self) -> Any:
        assert self.thread is not None
        return self.thread.server

    def stop(self) -> None:
        if self.thread is not None:
            self.thread.stop()
            self.thread = None
        if self.store is not None:
            self.store.close()
            self.store = None

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture
def kafka_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """``file://`` by default; ``seaweedfs`` (indirect parametrisation) for a fresh bucket on SeaweedFS."""
    kind = getattr(request, "param", "file")
    if kind == "file":
        return f"file://{tmp_path / 'store'}"
    endpoint = request.getfixturevalue("seaweedfs_endpoint")
    bucket = f"kafka-{secrets.token_hex(4)}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    return f"s3://{bucket}/data?endpoint_url={endpoint}&region=us-east-1"


@pytest.fixture
def kafka_options() -> dict[str, Any]:
    """Override in a test module (or parametrise) to pass BrokerConfig options."""
    return {}


@pytest.fixture
def kafka_server(kafka_store_url: str, tmp_path: Path, kafka_options: dict[str, Any]) -> Iterator[RunningKafka]:
    running = RunningKafka(kafka_store_url, tmp_path / "wal", {}, kafka_options).start()
    try:
        yield running
    finally:
        running.stop()
