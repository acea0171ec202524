"""Consumer groups with real clients: rebalances, committed offsets across a restart, static members, admin."""

from __future__ import annotations

import asyncio
import io
import socket
import struct
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import aiokafka
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import GroupIdNotFoundError, NonEmptyGroupError
from kafka.structs import OffsetAndMetadata
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from s3stream import Record
from s3stream.apps.kafka.groups import OFFSETS_TOPIC
from s3stream.apps.kafka.groups.codec import decode_group_metadata, decode_key, decode_offset_commit
from s3stream.apps.kafka.groups.coordinator import GroupCoordinator
from s3stream.apps.kafka.groups.offsets_log import partition_for
from s3stream.apps.kafka.wire import request_class, response_class
from s3stream.base.errors import CorruptData
from tests.kafka.conftest import RunningKafka

FAST_CONSUMER = {"session.timeout.ms": 2000, "heartbeat.interval.ms": 100, "auto.offset.reset": "earliest",
                 "topic.metadata.refresh.interval.ms": 1000}


def _create_topic(server: RunningKafka, name: str, partitions: int, records: int = 0) -> None:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)
    if records:
        producer = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5})
        for i in range(records):
            producer.produce(name, key=b"k%d" % i, value=b"v%d" % i, partition=i % partitions)
        assert producer.flush(10) == 0


def _consumer(server: RunningKafka, group: str, topic: str, **extra: Any) -> Consumer:
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group, **FAST_CONSUMER, **extra})
    c.subscribe([topic])
    return c


def _settle(consumers: list[Consumer], partitions: int, timeout: float = 20) -> list[list[int]]:
    """Poll every consumer until their assignments cover all partitions, each exactly once, none idle."""
    assignment: list[list[int]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(0.02)
        assignment = [sorted(tp.partition for tp in c.assignment()) for c in consumers]
        flat = sorted(p for a in assignment for p in a)
        if flat == list(range(partitions)) and all(assignment):
            return assignment
    raise AssertionError(f"no complete assignment within {timeout}s: {assignment}")


def _coordinator(server: RunningKafka) -> GroupCoordinator:
    return server.server.broker.component(GroupCoordinator)  # type: ignore[no-any-return]


def _groups_gauge(server: RunningKafka, state: str) -> float:
    assert server.store is not None
    value = server.store.metrics_registry.get_sample_value("s3stream_kafka_groups", {"state": state})
    return float(value or 0)


def _wait(predicate: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def test_group_of_three_rebalances_when_one_leaves_and_one_joins(kafka_server: RunningKafka) -> None:
    _create_topic(kafka_server, "six", 6)
    consumers = [_consumer(kafka_server, "trio", "six") for _ in range(3)]
    try:
        assert len(_settle(consumers, 6)) == 3
        generation = _coordinator(kafka_server).groups["trio"].generation
        assert _groups_gauge(kafka_server, "Stable") == 1
        consumers.pop().close()  # LeaveGroup: the other two take over its partitions
        assert len(_settle(consumers, 6)) == 2
        consumers.append(_consumer(kafka_server, "trio", "six"))
        assert len(_settle(consumers, 6)) == 3
        assert _coordinator(kafka_server).groups["trio"].generation >= generation + 2
    finally:
        for c in consumers:
            c.close()
    _wait(lambda: _coordinator(kafka_server).groups["trio"].state.value == "Empty")
    assert _groups_gauge(kafka_server, "Empty") == 1 and _groups_gauge(kafka_server, "Stable") == 0


def test_a_killed_member_is_expired_after_its_session_timeout(kafka_server: RunningKafka) -> None:
    _create_topic(kafka_server, "expiry", 4)
    survivor = _consumer(kafka_server, "exp", "expiry")
    victim = subprocess.Popen(["kcat", "-b", kafka_server.bootstrap, "-G", "exp", "expiry", "-q",
                               "-X", "session.timeout.ms=800", "-X", "heartbeat.interval.ms=100"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        group = _coordinator(kafka_server).groups
        _wait(lambda: "exp" in group and len(group["exp"].members) == 2 and group["exp"].state.value == "Stable",
              timeout=20)
        _wait(lambda: survivor.poll(0.02) is None and len(survivor.assignment()) == 2)  # it shares the topic
        killed_at = time.monotonic()
        victim.kill()  # no LeaveGroup: only the session timeout can tell
        victim.wait(10)
        assert _settle([survivor], 4) == [[0, 1, 2, 3]]
        # not at once: the session (800 ms) counts from the victim's last heartbeat, which a loaded machine may
        # have sent a few hundred ms before the kill
        assert time.monotonic() - killed_at >= 0.4
        assert len(group["exp"].members) == 1
    finally:
        victim.kill()
        survivor.close()


@pytest.mark.parametrize("kafka_store_url", ["file", pytest.param("seaweedfs", marks=[pytest.mark.seaweedfs,
                                                                                     pytest.mark.s3])],
                         indirect=True)
def test_consumer_resumes_from_committed_offsets_after_restart(kafka_server: RunningKafka) -> None:
    _create_topic(kafka_server, "resume", 3, records=60)
    first = KafkaConsumer("resume", bootstrap_servers=kafka_server.bootstrap, group_id="resumers",
                          auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=2000,
                          heartbeat_interval_ms=200, consumer_timeout_ms=10_000)
    seen: list[tuple[int, int]] = []
    for msg in first:
        seen.append((msg.partition, msg.offset))
        if len(seen) == 30:
            break
    positions = {tp: first.position(tp) for tp in first.assignment()}
    first.commit({tp: OffsetAndMetadata(pos, f"meta-{tp.partition}", -1) for tp, pos in positions.items()})
    first.close()

    kafka_server.restart()  # a new server process: the offsets come back from __consumer_offsets

    assert kafka_server.store is not None
    assert kafka_server.store.topic_config(OFFSETS_TOPIC)["cleanup.policy"] == "compact"
    assert kafka_server.store.partitions(OFFSETS_TOPIC) == 4  # FAST_BROKER's offsets.topic.num.partitions
    admin = KafkaAdminClient(bootstrap_servers=kafka_server.bootstrap)
    try:
        committed = admin.list_group_offsets({"resumers": None})["resumers"]
    finally:
        admin.close()
    assert {(tp.partition, o.offset, o.metadata) for tp, o in committed.items()} == {
        (tp.partition, pos, f"meta-{tp.partition}") for tp, pos in positions.items()}
    second = KafkaConsumer("resume", bootstrap_servers=kafka_server.bootstrap, group_id="resumers",
                           auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=2000,
                           heartbeat_interval_ms=200, consumer_timeout_ms=10_000)
    rest: list[tuple[int, int]] = []
    try:
        for msg in second:  # had it started anywhere but at the commits, the first 30 would repeat some
            rest.append((msg.partition, msg.offset))
            if len(rest) == 30:
                break
    finally:
        second.close()
    assert len(rest) == 30 and not set(rest) & set(seen)
    assert sorted(seen + rest) == sorted((p, o) for p in range(3) for o in range(20))


def test_static_member_rejoins_without_a_rebalance(kafka_server: RunningKafka) -> None:
    _create_topic(kafka_server, "static", 4)
    revoked: list[str] = []
    static = {"session.timeout.ms": 6000}
    a = _consumer(kafka_server, "statics", "static", **{"group.instance.id": "a", **static})
    a.subscribe(["static"], on_revoke=lambda c, parts: revoked.append("a"))
    b = _consumer(kafka_server, "statics", "static", **{"group.instance.id": "b", **static})
    try:
        before = _settle([a, b], 4)
        group = _coordinator(kafka_server).groups["statics"]
        generation = group.generation
        old_ids = set(group.members)
        b.close()  # a static member does not leave: its session keeps its place
        assert set(group.members) == old_ids
        b = _consumer(kafka_server, "statics", "static", **{"group.instance.id": "b", **static})
        after = _settle([a, b], 4)
        assert after == before  # the restarted member got its previous assignment back
        assert group.generation == generation  # ... without a rebalance
        assert len(group.members) == 2 and set(group.members) != old_ids  # under a new member id
        assert revoked == []
    finally:
        a.close()
        b.close()


def test_aiokafka_consumer_group(kafka_server: RunningKafka) -> None:
    _create_topic(kafka_server, "aio", 4, records=40)

    async def run() -> tuple[list[set[int]], list[tuple[int, int]], dict[int, int]]:
        consumers = [aiokafka.AIOKafkaConsumer("aio", bootstrap_servers=kafka_server.bootstrap, group_id="aio-g",
                                               auto_offset_reset="earliest", enable_auto_commit=False,
                                               session_timeout_ms=2000, heartbeat_interval_ms=100)
                     for _ in range(2)]
        for c in consumers:
            await c.start()
        got: list[tuple[int, int]] = []
        try:
            deadline = asyncio.get_running_loop().time() + 20
            while len(got) < 40 or not all(c.assignment() for c in consumers):
                assert asyncio.get_running_loop().time() < deadline, (len(got), [c.assignment() for c in consumers])
                for c in consumers:
                    batch = await c.getmany(timeout_ms=50)
                    got.extend((m.partition, m.offset) for msgs in batch.values() for m in msgs)
            assignments = [{tp.partition for tp in c.assignment()} for c in consumers]
            for c in consumers:
                await c.commit()
            committed = {p: await consumers[0].committed(aiokafka.TopicPartition("aio", p)) for p in range(4)}
        finally:
            for c in consumers:
                await c.stop()
        return assignments, got, committed

    assignments, got, committed = asyncio.run(run())
    assert assignments[0] | assignments[1] == {0, 1, 2, 3} and not assignments[0] & assignments[1]
    assert sorted(set(got)) == sorted((p, o) for p in range(4) for o in range(10))
    assert committed == dict.fromkeys(range(4), 10)


def test_kafka_python_admin_lists_describes_and_deletes_groups(kafka_server: RunningKafka) -> None:
    _create_topic(kafka_server, "adm", 2, records=4)
    live = _consumer(kafka_server, "busy", "adm")
    admin = KafkaAdminClient(bootstrap_servers=kafka_server.bootstrap)
    simple = KafkaConsumer(bootstrap_servers=kafka_server.bootstrap, group_id="simple", enable_auto_commit=False)
    try:
        _settle([live], 2)
        # a non-member commit (generation -1) creates an Empty group of committed offsets only
        tp = KTopicPartition("adm", 1)
        simple.assign([tp])
        simple.commit({tp: OffsetAndMetadata(3, "manual", -1)})
        listed = {g["group_id"]: g for g in admin.list_groups()}
        assert listed["busy"]["group_state"] == "Stable" and listed["busy"]["protocol_type"] == "consumer"
        assert listed["simple"]["group_state"] == "Empty" and listed["simple"]["protocol_type"] == ""
        assert {g["group_id"] for g in admin.list_groups(states_filter=["Stable"])} == {"busy"}
        described = admin.describe_groups(["busy"])["busy"]
        assert described["group_state"] == "Stable" and described["protocol_data"] == "range"
        [member] = described["members"]
        assert member["client_host"] == "/127.0.0.1"
        assert member["member_assignment"]["assigned_partitions"] == [{"topic": "adm", "partitions": [0, 1]}]
        offsets = admin.list_group_offsets({"simple": None})["simple"]
        assert offsets == {tp: OffsetAndMetadata(3, "manual", -1)}
        assert admin.delete_groups(["busy"]) == {"busy": NonEmptyGroupError.__name__}
        live.close()
        _wait(lambda: admin.describe_groups(["busy"])["busy"]["group_state"] == "Empty")
        assert admin.delete_groups(["busy", "simple"]) == {"busy": "OK", "simple": "OK"}
        assert {g["group_id"] for g in admin.list_groups()} == set()
        assert admin.list_group_offsets({"simple": None})["simple"] == {}
        assert admin.delete_groups(["simple"]) == {"simple": GroupIdNotFoundError.__name__}
    finally:
        live.close()
        simple.close()
        admin.close()
    kafka_server.restart()  # the deletions are tombstones: nothing comes back
    assert _coordinator(kafka_server).groups == {}


def test_kcat_balanced_consumer(kafka_server: RunningKafka) -> None:
    _create_topic(kafka_server, "kc", 2, records=10)
    out = subprocess.run(["kcat", "-b", kafka_server.bootstrap, "-G", "kcat-g", "kc", "-e", "-q", "-f", "%p:%o\\n",
                          "-X", "auto.offset.reset=earliest", "-X", "session.timeout.ms=2000"],
                         capture_output=True, text=True, timeout=60, check=True)
    assert sorted(out.stdout.split()) == sorted(f"{p}:{o}" for p in range(2) for o in range(5))
    committed = _coordinator(kafka_server).committed("kcat-g", [("kc", 0), ("kc", 1)])
    assert {tp: rec.offset for tp, rec in committed.items() if rec} == {("kc", 0): 5, ("kc", 1): 5}


def test_group_metadata_and_offsets_are_kafka_records_in_the_internal_topic(kafka_server: RunningKafka) -> None:
    _create_topic(kafka_server, "recs", 2, records=4)
    consumer = _consumer(kafka_server, "rec-g", "recs", **{"enable.auto.commit": False})
    try:
        _settle([consumer], 2)
        generation = _coordinator(kafka_server).groups["rec-g"].generation
        consumer.commit(offsets=[CTopicPartition("recs", 0, 2)], asynchronous=False)
    finally:
        consumer.close()
    assert kafka_server.store is not None
    log = kafka_server.store.partition(OFFSETS_TOPIC, partition_for("rec-g", 4))

    def records() -> list[tuple[Any, bytes | None]]:
        table = log.read_arrow(0)
        return [(decode_key(k), v) for k, v in zip(table.column("key").to_pylist(), table.column("value").to_pylist())]

    def group_records() -> list[Any]:
        return [decode_group_metadata(v) for key, v in records() if key.topic is None and v is not None]

    # the group's records follow its rebalances without delaying them: the last one (Empty) comes after the leave
    _wait(lambda: group_records()[-1].generation == generation + 1)
    commits = [(key, decode_offset_commit(v)) for key, v in records() if key.topic is not None and v is not None]
    assert [(key.group, key.topic, key.partition, rec.offset) for key, rec in commits] == [("rec-g", "recs", 0, 2)]
    metadata = group_records()
    stable = next(m for m in metadata if m.generation == generation)
    assert stable.protocol_type == "consumer" and stable.protocol == "range" and len(stable.members) == 1
    assert stable.members[0].assignment  # the leader's assignment, as Kafka stores it
    assert metadata[-1].members == () and metadata[-1].protocol is None  # left: Empty


@pytest.mark.parametrize("kafka_options", [{"offsets_retention_minutes": 1}])
def test_offsets_of_empty_groups_expire_after_retention(kafka_server: RunningKafka) -> None:
    _create_topic(kafka_server, "ret", 1)
    simple = KafkaConsumer(bootstrap_servers=kafka_server.bootstrap, group_id="old", enable_auto_commit=False)
    try:
        tp = KTopicPartition("ret", 0)
        simple.assign([tp])
        simple.commit({tp: OffsetAndMetadata(0, "", -1)})
    finally:
        simple.close()
    # OffsetCommit v2-v4 may ask for its own retention: 10 s here
    import datetime

    part = sys_nested(request_class(8, 2), "OffsetCommitRequestPartition")(
        partition_index=0, committed_offset=0, committed_metadata=None)
    topic = sys_nested(request_class(8, 2), "OffsetCommitRequestTopic")(name="ret", partitions=(part,))
    r = raw(kafka_server, 8, 2, group_id="brief", generation_id_or_member_epoch=-1, member_id="",
            retention_time=datetime.timedelta(seconds=10), topics=(topic,))
    assert r.topics[0].partitions[0].error_code == ErrorCode.none
    coord = _coordinator(kafka_server)
    assert kafka_server.thread is not None and kafka_server.store is not None
    now = kafka_server.store.clock.now_ms()
    assert kafka_server.thread.run_coroutine(coord.expire_offsets(now + 9_000)) == 0
    assert kafka_server.thread.run_coroutine(coord.expire_offsets(now + 11_000)) == 1
    assert "brief" not in coord.groups and "old" in coord.groups
    assert kafka_server.thread.run_coroutine(coord.expire_offsets(now + 61_000)) == 1
    assert "old" not in coord.groups and "old" not in coord.offsets
    kafka_server.restart()  # tombstones: it stays gone
    assert "old" not in _coordinator(kafka_server).groups


def test_offset_delete(kafka_server: RunningKafka) -> None:
    _create_topic(kafka_server, "od", 2, records=2)
    live = _consumer(kafka_server, "od-g", "od")
    admin = KafkaAdminClient(bootstrap_servers=kafka_server.bootstrap)
    try:
        _settle([live], 2)
        live.commit(offsets=[CTopicPartition("od", 0, 1), CTopicPartition("od", 1, 1)], asynchronous=False)
        result = admin.delete_group_offsets("od-g", [KTopicPartition("od", 0)])
        assert [e.__name__ for e in result.values()] == ["GroupSubscribedToTopicError"]
        live.close()
        _wait(lambda: _coordinator(kafka_server).groups["od-g"].state.value == "Empty")
        result = admin.delete_group_offsets("od-g", [KTopicPartition("od", 0)])
        assert [e.__name__ for e in result.values()] == ["NoError"]
        left = admin.list_group_offsets({"od-g": None})["od-g"]
        assert list(left) == [KTopicPartition("od", 1)]
    finally:
        live.close()
        admin.close()


def test_a_stable_group_carries_on_across_a_restart(kafka_server: RunningKafka) -> None:
    _create_topic(kafka_server, "carry", 2, records=4)
    consumer = _consumer(kafka_server, "carry-g", "carry", **{"enable.auto.commit": False,
                                                              "session.timeout.ms": 6000})
    try:
        _settle([consumer], 2)
        generation = _coordinator(kafka_server).groups["carry-g"].generation
        _wait(lambda: _persisted_generation(kafka_server, "carry-g") == generation)  # written after the rebalance
        kafka_server.restart()
        group = _coordinator(kafka_server).groups["carry-g"]
        assert (group.state.value, group.generation, len(group.members)) == ("Stable", generation, 1)
        consumer.commit(offsets=[CTopicPartition("carry", 0, 2)], asynchronous=False)  # same member, same generation
        assert _coordinator(kafka_server).committed("carry-g", [("carry", 0)])[("carry", 0)].offset == 2  # type: ignore[union-attr]
        assert group.generation == generation
    finally:
        consumer.close()


def _persisted_generation(server: RunningKafka, group: str) -> int | None:
    assert server.store is not None
    table = server.store.partition(OFFSETS_TOPIC, partition_for(group, 4)).read_arrow(0)
    found = None
    for k, v in zip(table.column("key").to_pylist(), table.column("value").to_pylist()):
        key = decode_key(k)
        if key.group == group and key.topic is None and v is not None:
            found = decode_group_metadata(v).generation
    return found


def test_an_unreadable_record_stops_the_server_from_starting(kafka_server: RunningKafka) -> None:
    assert kafka_server.store is not None
    log = kafka_server.store.partition(OFFSETS_TOPIC, 0)
    log.append([Record(key=b"\x00\x07\x00\x01g", value=b"?")])  # a record type this server cannot read
    with pytest.raises(CorruptData, match="record type 7"):
        kafka_server.restart()


# -- the protocol edges, over a raw socket ---------------------------------------------------------


def raw(server: RunningKafka, api_key: int, version: int, **fields: Any) -> Any:
    cls = request_class(api_key, version)
    assert cls is not None
    body = cls(**fields)
    buf = io.BytesIO()
    header_cls = cls.__header_schema__
    entity_writer(header_cls)(buf, header_cls(request_api_key=i16(api_key), request_api_version=i16(version),
                                              correlation_id=i32(1), client_id="raw"))
    entity_writer(cls)(buf, body)
    host, port = server.bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(struct.pack(">i", buf.tell()) + buf.getvalue())
        (size,) = struct.unpack(">i", _recv(sock, 4))
        frame = _recv(sock, size)
    rcls = response_class(api_key, version)
    _, offset = entity_reader(rcls.__header_schema__)(frame, 0)
    return entity_reader(rcls)(frame, offset)[0]


def _recv(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk
        data += chunk
    return data


@pytest.fixture
def proto(kafka_server: RunningKafka) -> Iterator[Callable[..., Any]]:
    yield lambda api_key, version, **fields: raw(kafka_server, api_key, version, **fields)


def test_find_coordinator_versions(kafka_server: RunningKafka, proto: Callable[..., Any]) -> None:
    host, port = kafka_server.bootstrap.rsplit(":", 1)
    r0 = proto(10, 0, key="g")
    assert (r0.error_code, r0.node_id, r0.host, r0.port) == (ErrorCode.none, 0, host, int(port))
    r6 = proto(10, 6, key_type=0, coordinator_keys=("a", "b"))
    assert [(c.key, c.error_code, c.port) for c in r6.coordinators] == [("a", ErrorCode.none, int(port)),
                                                                         ("b", ErrorCode.none, int(port))]
    txn = proto(10, 3, key="tx", key_type=1)
    assert txn.error_code == ErrorCode.transactional_id_authorization_failed  # transactions: fatal at once


def test_join_group_protocol_edges(kafka_server: RunningKafka, proto: Callable[..., Any]) -> None:
    import datetime

    join9 = request_class(11, 9)
    assert join9 is not None
    protocol = sys_nested(join9, "JoinGroupRequestProtocol")(name="range", metadata=b"m")
    ms = datetime.timedelta(milliseconds=1)
    common = {"group_id": "edge", "session_timeout": 10_000 * ms, "rebalance_timeout": 20_000 * ms,
              "protocol_type": "consumer", "protocols": (protocol,)}
    first = proto(11, 9, member_id="", **common)
    assert first.error_code == ErrorCode.member_id_required and first.member_id.startswith("raw-")
    bad = proto(11, 9, member_id="", **{**common, "session_timeout": 10 * ms})
    assert bad.error_code == ErrorCode.invalid_session_timeout
    joined = proto(11, 9, member_id=first.member_id, **common)  # after the initial delay
    assert (joined.error_code, joined.generation_id, joined.leader, joined.protocol_name) == (
        ErrorCode.none, 1, first.member_id, "range")
    other = proto(11, 9, member_id="", **{**common, "protocol_type": "connect"})
    assert other.error_code == ErrorCode.inconsistent_group_protocol
    hb = proto(12, 4, group_id="edge", generation_id=0, member_id=first.member_id)
    assert hb.error_code == ErrorCode.illegal_generation
    described = proto(15, 5, groups=("edge",), include_authorized_operations=True).groups[0]
    assert described.group_state == "CompletingRebalance" and described.members[0].member_id == first.member_id
    assert described.authorized_operations == sum(1 << op for op in (3, 6, 8, 10, 11))
    missing = proto(15, 6, groups=("nope",), include_authorized_operations=False).groups[0]
    assert missing.error_code == ErrorCode.group_id_not_found
    dead = proto(15, 5, groups=("nope",), include_authorized_operations=False).groups[0]
    assert (dead.error_code, dead.group_state) == (ErrorCode.none, "Dead")
    leave = proto(13, 5, group_id="edge", members=(
        sys_nested(request_class(11 + 2, 5), "MemberIdentity")(member_id=first.member_id),))
    assert [m.error_code for m in leave.members] == [ErrorCode.none]


def sys_nested(cls: Any, name: str) -> Any:
    import sys

    return getattr(sys.modules[cls.__module__], name)


def test_every_advertised_version_answers(kafka_server: RunningKafka, proto: Callable[..., Any]) -> None:
    """One request of each version of each group API, built from that version's own schema."""
    import datetime

    from s3stream.apps.kafka.messages import build

    _create_topic(kafka_server, "sweep", 1)
    tid = kafka_server.server.broker.topic_uuid("sweep")
    ms = datetime.timedelta(milliseconds=1)

    def req(api_key: int, version: int, **fields: Any) -> Any:
        cls = request_class(api_key, version)
        assert cls is not None
        return proto(api_key, version, **{k: v for k, v in fields.items() if k in cls.__dataclass_fields__})

    def nested(api_key: int, version: int, cls_name: str, **fields: Any) -> Any:
        return build(sys_nested(request_class(api_key, version), cls_name), **fields)

    for v in range(7):
        r = req(10, v, key="g", key_type=0, coordinator_keys=("g",))
        assert (r.error_code if v < 4 else r.coordinators[0].error_code) == ErrorCode.none
    for v in range(10):
        protocol = nested(11, v, "JoinGroupRequestProtocol", name="range", metadata=b"")
        r = req(11, v, group_id=f"sweep-j{v}", session_timeout=30_000 * ms, rebalance_timeout=30_000 * ms, member_id="",
                group_instance_id=None, protocol_type="consumer", protocols=(protocol,), reason=None)
        if v >= 4:
            assert r.error_code == ErrorCode.member_id_required and r.member_id
        else:
            assert (r.error_code, r.generation_id, r.protocol_name) == (ErrorCode.none, 1, "range")
    for v in range(6):
        r = req(14, v, group_id="none", generation_id=1, member_id="m", group_instance_id=None, assignments=())
        assert r.error_code == ErrorCode.unknown_member_id
    for v in range(5):
        assert req(12, v, group_id="none", generation_id=1, member_id="m").error_code == ErrorCode.unknown_member_id
    for v in range(6):
        member = nested(13, v, "MemberIdentity", member_id="m") if v >= 3 else None
        r = req(13, v, group_id="none", member_id="m", members=(member,))
        assert (r.error_code if v < 3 else r.members[0].error_code) == ErrorCode.unknown_member_id
    for v in range(2, 11):
        part = nested(8, v, "OffsetCommitRequestPartition", partition_index=0, committed_offset=v,
                      committed_leader_epoch=-1, committed_metadata=f"v{v}")
        topic = nested(8, v, "OffsetCommitRequestTopic", name="sweep", topic_id=tid, partitions=(part,))
        r = req(8, v, group_id=f"sweep-c{v}", generation_id_or_member_epoch=-1, member_id="",
                retention_time=-1 * ms, group_instance_id=None, topics=(topic,))
        assert r.topics[0].partitions[0].error_code == ErrorCode.none
    for v in range(1, 11):
        gid = f"sweep-c{max(v, 2)}"
        if v < 8:
            topic = nested(9, v, "OffsetFetchRequestTopic", name="sweep", partition_indexes=(0,))
            r = req(9, v, group_id=gid, topics=(topic,), require_stable=False)
            part = r.topics[0].partitions[0]
        else:
            topic = nested(9, v, "OffsetFetchRequestTopics", name="sweep", topic_id=tid, partition_indexes=(0,))
            group = nested(9, v, "OffsetFetchRequestGroup", group_id=gid, member_id=None, member_epoch=-1,
                           topics=(topic,))
            r = req(9, v, groups=(group,), require_stable=False)
            part = r.groups[0].topics[0].partitions[0]
        assert (part.error_code, part.committed_offset, part.metadata) == (ErrorCode.none, max(v, 2), f"v{max(v, 2)}")
    for v in range(6):
        r = req(16, v, states_filter=(), types_filter=())
        assert {"sweep-c2", "sweep-j0"} <= {g.group_id for g in r.groups}
    for v in range(7):
        r = req(15, v, groups=("sweep-j0",), include_authorized_operations=False)
        assert (r.groups[0].error_code, r.groups[0].group_state) == (ErrorCode.none, "CompletingRebalance")
    for v in range(3):
        assert req(42, v, groups_names=(f"sweep-c{v + 2}",)).results[0].error_code == ErrorCode.none
    part = nested(47, 0, "OffsetDeleteRequestPartition", partition_index=0)
    r = req(47, 0, group_id="sweep-c5", topics=(nested(47, 0, "OffsetDeleteRequestTopic", name="sweep",
                                                         partitions=(part,)),))
    assert (r.error_code, r.topics[0].partitions[0].error_code) == (ErrorCode.none, ErrorCode.none)
