"""The API versions each real client sends, recorded and checked against what ApiVersions advertises.

Each client runs the same tour against a fresh server (admin, idempotent produce where the client has it, a
consumer group that commits, a timestamp lookup); the server's request counter says which (API, version)
pairs arrived. Every pair must be in the advertised table, and the tour must have used the core APIs. The
table in docs/kafka.md ("Versions real clients send") is this test's record: it is compared for the client
versions it names, and regenerated with ``python -m tests.kafka.test_client_versions``.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import aiokafka
import confluent_kafka
import kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from s3stream.apps.kafka.handlers import all_apis
from tests.kafka.conftest import RunningKafka

DOC = Path(__file__).resolve().parents[2] / "docs" / "kafka.md"
TOPIC = "versions"
CORE = {"ApiVersions", "Metadata", "Produce", "Fetch", "FindCoordinator", "JoinGroup", "SyncGroup", "OffsetCommit"}


def _kafka_python(bootstrap: str) -> None:
    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([kafka.admin.NewTopic(TOPIC, 2, 1)])
    admin.close()
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap)  # idempotent by default in 3.x
    for i in range(10):
        producer.send(TOPIC, key=b"k%d" % i, value=b"v", timestamp_ms=1_000 + i)
    producer.flush(10)
    producer.close()
    consumer = kafka.KafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id="g", auto_offset_reset="earliest",
                                   enable_auto_commit=False, consumer_timeout_ms=10_000)
    seen = 0
    for _ in consumer:
        seen += 1
        if seen == 10:
            break
    consumer.commit()
    consumer.offsets_for_times({kafka.TopicPartition(TOPIC, 0): 1_000})
    consumer.close()
    assert seen == 10


def _aiokafka(bootstrap: str) -> None:
    async def tour() -> int:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait(TOPIC, key=b"k%d" % i, value=b"v", timestamp_ms=1_000 + i)
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id="g",
                                             auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        try:
            seen = 0
            while seen < 10:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 15)
                seen += sum(len(v) for v in batch.values())
            await consumer.commit()
            await consumer.offsets_for_times({aiokafka.TopicPartition(TOPIC, 0): 1_000})
        finally:
            await consumer.stop()
        return seen

    assert asyncio.run(tour()) == 10


def _confluent(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: a collected client cancels its requests
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(10)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(10):
        producer.produce(TOPIC, key=b"k%d" % i, value=b"v", timestamp=1_000 + i)
    assert producer.flush(10) == 0
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "g",
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([TOPIC])
    seen, deadline = 0, time.monotonic() + 20
    while seen < 10 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen += 1
    consumer.commit(asynchronous=False)
    consumer.offsets_for_times([confluent_kafka.TopicPartition(TOPIC, 0, 1_000)], 10)
    consumer.close()
    assert seen == 10


def _kcat(bootstrap: str) -> None:
    lines = "".join(f"k{i}:v\n" for i in range(10))
    subprocess.run(["kcat", "-b", bootstrap, "-P", "-t", TOPIC, "-K:"], input=lines, text=True, check=True,
                   timeout=30)
    out = subprocess.run(["kcat", "-b", bootstrap, "-G", "g", "-o", "beginning", "-c", "10", "-e", "-q",
                          "-X", "enable.auto.commit=true", "-X", "auto.commit.interval.ms=100", TOPIC],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.count("\n") == 10, out.stderr[-2000:]


def _kcat_version() -> str:
    out = subprocess.run(["kcat", "-V"], capture_output=True, text=True, timeout=10).stdout
    found = re.search(r"^Version (\S+)", out, re.M)
    lib = re.search(r"librdkafka (\d\S*)", out)
    return f"{found.group(1) if found else '?'} (librdkafka {lib.group(1) if lib else '?'})"


CLIENTS: dict[str, tuple[Callable[[str], None], Callable[[], str]]] = {
    "kafka-python": (_kafka_python, lambda: importlib.metadata.version("kafka-python")),
    "aiokafka": (_aiokafka, lambda: importlib.metadata.version("aiokafka")),
    "confluent-kafka": (_confluent, lambda: f"{confluent_kafka.__version__} (librdkafka "
                                            f"{confluent_kafka.libversion()[0]})"),
    "kcat": (_kcat, _kcat_version),
}


def observed_versions(server: RunningKafka) -> dict[str, list[int]]:
    """API name -> the versions the server received (from its request counter)."""
    assert server.store is not None
    seen: dict[str, set[int]] = {}
    for metric in server.store.metrics_registry.collect():
        for sample in metric.samples:
            if sample.name == "s3stream_kafka_requests_total" and sample.value > 0:
                seen.setdefault(sample.labels["api"], set()).add(int(sample.labels["version"]))
    return {api: sorted(v) for api, v in sorted(seen.items())}


def render_row(client: str, version: str, seen: dict[str, list[int]]) -> str:
    used = ", ".join(f"{api} {'/'.join(map(str, vs))}" for api, vs in seen.items())
    return f"| {client} {version} | {used} |"


def documented_rows() -> dict[str, str]:
    """Client name -> its row in docs/kafka.md's versions table."""
    block = re.search(r"<!-- BEGIN RECORDED: client-versions -->\n(.*?)<!-- END RECORDED", DOC.read_text(), re.S)
    assert block is not None, "docs/kafka.md lacks the RECORDED: client-versions markers"
    rows = {}
    for line in block.group(1).splitlines():
        if line.startswith("| ") and not line.startswith(("| Client", "|---")):
            rows[line[2:].split(" ")[0]] = line
    return rows


@pytest.mark.parametrize("client", list(CLIENTS))
def test_client_versions_are_advertised_and_recorded(kafka_server: RunningKafka, client: str) -> None:
    tour, version = CLIENTS[client]
    tour(kafka_server.bootstrap)
    seen = observed_versions(kafka_server)
    advertised = {spec.name: (spec.min_version, spec.max_version) for spec in all_apis()}
    for api, versions in seen.items():
        low, high = advertised[api]
        assert all(low <= v <= high for v in versions), (client, api, versions, (low, high))
    assert CORE <= set(seen), (client, sorted(CORE - set(seen)))
    row = render_row(client, version(), seen)
    recorded = documented_rows().get(client)
    if recorded is not None and recorded.startswith(f"| {client} {version()} |"):
        assert recorded == row, f"{client} now sends other versions: run python -m tests.kafka.test_client_versions"


def main() -> None:
    """Run every client's tour and rewrite docs/kafka.md's recorded table."""
    import tempfile

    from tests.kafka.conftest import RunningKafka as Running

    rows = ["| Client | API versions sent in the tour |", "|---|---|"]
    for client, (tour, version) in CLIENTS.items():
        with tempfile.TemporaryDirectory() as tmp:
            running = Running(f"file://{tmp}/store", Path(tmp) / "wal", {}, {}).start()
            try:
                tour(running.bootstrap)
                rows.append(render_row(client, version(), observed_versions(running)))
            finally:
                running.stop()
    text = DOC.read_text()
    start = text.index("<!-- BEGIN RECORDED: client-versions -->\n") + len("<!-- BEGIN RECORDED: client-versions -->\n")
    end = text.index("<!-- END RECORDED: client-versions -->")
    DOC.write_text(text[:start] + "\n".join(rows) + "\n" + text[end:])


if __name__ == "__main__":
    main()
