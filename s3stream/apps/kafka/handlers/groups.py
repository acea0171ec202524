"""Consumer-group APIs (the classic protocol): kio messages in, :class:`GroupCoordinator` calls, kio messages out.

FindCoordinator names this broker for every group (one server coordinates them all). JoinGroup and
SyncGroup answers wait for the rebalance (``Later``); the rest answer at once, except commits and
deletions, which wait until ``__consumer_offsets`` holds them durably. Every version's fields are mapped
here; the protocol itself lives in :mod:`s3stream.apps.kafka.groups`.
"""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from s3stream.apps.kafka.api import ApiSpec, Later, RequestContext
from s3stream.apps.kafka.broker import Broker
from s3stream.apps.kafka.groups.coordinator import GroupCoordinator, OffsetToCommit
from s3stream.apps.kafka.groups.member import JoinRequest, JoinResult, SyncResult
from s3stream.apps.kafka.messages import build, has_field, nested
from s3stream.apps.kafka.topics import resolve_topic_id
from s3stream.apps.kafka.wire import response_class
from s3stream.base.errors import UnknownTopic

__all__ = ["APIS", "STARTUP"]

T = TypeVar("T")
_ZERO = datetime.timedelta(0)
_MS = datetime.timedelta(milliseconds=1)
_NO_OPERATIONS = -(2**31)
#: with no ACLs a client may do every group operation: READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS
_GROUP_OPERATIONS = sum(1 << op for op in (3, 6, 8, 10, 11))
#: ListGroups v5 group type of every group here
_CLASSIC = "classic"


def _ms(value: datetime.timedelta) -> int:
    return value // _MS


def _client_host(ctx: RequestContext) -> str:
    return "/" + ctx.session.peer.rpartition(":")[0].strip("[]")


async def _coordinator(broker: Broker) -> GroupCoordinator:
    coord = broker.component(GroupCoordinator)
    await coord.ready()
    return coord


def _respond(fut: asyncio.Future[T], make: Callable[[T], Any]) -> Any:
    """The response now if the future is done, else a Later that builds it when it is (a future, not a
    coroutine: a connection closed before its turn leaves nothing un-awaited behind)."""
    if fut.done():
        return make(fut.result())
    out: asyncio.Future[Any] = fut.get_loop().create_future()

    def done(f: asyncio.Future[T]) -> None:
        if out.done():
            return
        if f.cancelled():
            out.cancel()
        elif (exc := f.exception()) is not None:
            out.set_exception(exc)
        else:
            out.set_result(make(f.result()))

    fut.add_done_callback(done)
    return Later(out)


def _count(broker: Broker, api: str, code: ErrorCode) -> None:
    if code != ErrorCode.none:
        broker.metrics.request_errors.labels(api, code.name).inc()


def _topic_partitions(broker: Broker, names: Sequence[str]) -> dict[str, int | None]:
    """Partition count of each topic (None when it does not exist). Blocking."""
    out: dict[str, int | None] = {}
    for name in dict.fromkeys(names):
        try:
            out[name] = broker.store.partitions(name)
        except UnknownTopic:
            out[name] = None
    return out


# -- FindCoordinator (10) --------------------------------------------------------------------------


def _transactions_supported() -> bool:
    from s3stream.apps.kafka.handlers import all_apis

    return any(spec.api_key == 26 for spec in all_apis())  # EndTxn


async def _find_coordinator(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    v = ctx.api_version
    cls = response_class(10, v)
    key_type = int(getattr(request, "key_type", 0))
    keys: tuple[str, ...] = tuple(request.coordinator_keys) if v >= 4 else (request.key,)
    host, port = broker.config.advertised
    node = broker.config.node_id
    if key_type == 0 or (key_type == 1 and _transactions_supported()):
        found: tuple[ErrorCode, str | None, int, str, int] = (ErrorCode.none, None, node, host, port)
    elif key_type == 1:
        # fatal for clients at once (COORDINATOR_NOT_AVAILABLE would have them retry until their timeout)
        found = (ErrorCode.transactional_id_authorization_failed, "transactions are not supported by s3stream",
                 -1, "", -1)
    else:
        found = (ErrorCode.invalid_request, f"unsupported key type {key_type}", -1, "", -1)
    error, message, node_id, host_, port_ = found
    _count(broker, "FindCoordinator", error)
    if v < 4:
        return build(cls, throttle_time=_ZERO, error_code=error, error_message=message, node_id=node_id, host=host_,
                     port=port_)
    entry = nested(cls, "Coordinator")
    return cls(throttle_time=_ZERO, coordinators=tuple(
        entry(key=k, node_id=node_id, host=host_, port=port_, error_code=error, error_message=message) for k in keys))


# -- JoinGroup (11) --------------------------------------------------------------------------------


def _join_response(v: int, r: JoinResult) -> Any:
    cls = response_class(11, v)
    member_cls = nested(cls, "JoinGroupResponseMember")
    members = tuple(build(member_cls, member_id=m.member_id, group_instance_id=m.instance_id, metadata=m.metadata)
                    for m in r.members)
    protocol_name = r.protocol_name if v >= 7 else (r.protocol_name or "")
    return build(cls, throttle_time=_ZERO, error_code=r.error, generation_id=r.generation_id,
                 protocol_type=r.protocol_type, protocol_name=protocol_name, leader=r.leader, skip_assignment=False,
                 member_id=r.member_id, members=members)


async def _join_group(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    v = ctx.api_version
    coord = await _coordinator(broker)
    if not request.group_id:
        return _join_response(v, JoinResult(ErrorCode.invalid_group_id, request.member_id))
    session = _ms(request.session_timeout)
    rebalance = _ms(request.rebalance_timeout) if v >= 1 else -1
    rebalance = rebalance if rebalance >= 0 else session  # v0 has none: the session timeout bounds the rebalance
    instance = getattr(request, "group_instance_id", None)
    member_id = request.member_id
    new_id = "" if member_id else coord.new_member_id(ctx.client_id, instance)
    join = JoinRequest(member_id, instance, ctx.client_id or "", _client_host(ctx), session, rebalance,
                       request.protocol_type, tuple((p.name, bytes(p.metadata)) for p in request.protocols),
                       v >= 4 and instance is None, new_id)
    fut = coord.join(request.group_id, join)

    def make(r: JoinResult) -> Any:
        _count(broker, "JoinGroup", r.error)
        return _join_response(v, r)

    return _respond(fut, make)


# -- SyncGroup (14) --------------------------------------------------------------------------------


def _sync_response(v: int, r: SyncResult) -> Any:
    return build(response_class(14, v), throttle_time=_ZERO, error_code=r.error, protocol_type=r.protocol_type,
                 protocol_name=r.protocol_name, assignment=r.assignment)


async def _sync_group(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    v = ctx.api_version
    coord = await _coordinator(broker)
    if not request.group_id:
        return _sync_response(v, SyncResult(ErrorCode.invalid_group_id))
    assignments = {a.member_id: bytes(a.assignment) for a in request.assignments}
    fut = coord.sync(request.group_id, request.member_id, getattr(request, "group_instance_id", None),
                     int(request.generation_id), getattr(request, "protocol_type", None),
                     getattr(request, "protocol_name", None), assignments)

    def make(r: SyncResult) -> Any:
        _count(broker, "SyncGroup", r.error)
        return _sync_response(v, r)

    return _respond(fut, make)


# -- Heartbeat (12), LeaveGroup (13) ---------------------------------------------------------------


async def _heartbeat(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    coord = await _coordinator(broker)
    if not request.group_id:
        error = ErrorCode.invalid_group_id
    else:
        error = coord.heartbeat(request.group_id, request.member_id, getattr(request, "group_instance_id", None),
                                int(request.generation_id))
    _count(broker, "Heartbeat", error)
    return build(response_class(12, ctx.api_version), throttle_time=_ZERO, error_code=error)


async def _leave_group(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    v = ctx.api_version
    cls = response_class(13, v)
    coord = await _coordinator(broker)
    leaving: list[tuple[str, str | None]] = (
        [(request.member_id, None)] if v < 3 else [(m.member_id, m.group_instance_id) for m in request.members])
    if not request.group_id:
        errors = [ErrorCode.invalid_group_id] * len(leaving)
    else:
        errors = coord.leave(request.group_id, leaving)
    if v < 3:
        _count(broker, "LeaveGroup", errors[0])
        return build(cls, throttle_time=_ZERO, error_code=errors[0])
    member_cls = nested(cls, "MemberResponse")
    return cls(throttle_time=_ZERO, error_code=ErrorCode.none, members=tuple(
        member_cls(member_id=mid, group_instance_id=iid, error_code=err)
        for (mid, iid), err in zip(leaving, errors, strict=True)))


# -- OffsetCommit (8) ------------------------------------------------------------------------------


async def _offset_commit(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    v = ctx.api_version
    cls = response_class(8, v)
    topic_cls, part_cls = nested(cls, "OffsetCommitResponseTopic"), nested(cls, "OffsetCommitResponsePartition")
    coord = await _coordinator(broker)
    names = await broker.run_blocking(_resolve_names, broker, request.topics, v >= 10)
    counts = await broker.run_blocking(_topic_partitions, broker, [n for n in names if n is not None])
    # per (topic index, partition index): an error now, or a slot in the commit
    errors: dict[tuple[int, int], ErrorCode] = {}
    todo: list[OffsetToCommit] = []
    slots: list[tuple[int, int]] = []
    for ti, (topic, name) in enumerate(zip(request.topics, names, strict=True)):
        for pi, p in enumerate(topic.partitions):
            if name is None:
                errors[(ti, pi)] = ErrorCode.unknown_topic_id
                continue
            count = counts.get(name)
            if count is None or not 0 <= p.partition_index < count:
                errors[(ti, pi)] = ErrorCode.unknown_topic_or_partition
                continue
            todo.append(OffsetToCommit(name, int(p.partition_index), int(p.committed_offset),
                                       int(getattr(p, "committed_leader_epoch", -1)), p.committed_metadata))
            slots.append((ti, pi))
    retention = _ms(request.retention_time) if has_field(type(request), "retention_time") else -1
    if todo:
        results = await coord.commit(request.group_id, request.member_id, getattr(request, "group_instance_id", None),
                                     int(request.generation_id_or_member_epoch), todo, retention)
        errors.update(zip(slots, results, strict=True))
    for code in set(errors.values()):
        _count(broker, "OffsetCommit", code)
    return build(cls, throttle_time=_ZERO, topics=tuple(
        build(topic_cls, name=getattr(t, "name", None), topic_id=getattr(t, "topic_id", None), partitions=tuple(
            part_cls(partition_index=p.partition_index, error_code=errors[(ti, pi)])
            for pi, p in enumerate(t.partitions)))
        for ti, t in enumerate(request.topics)))


def _resolve_names(broker: Broker, topics: Sequence[Any], by_id: bool) -> list[str | None]:
    """Topic names of request topics (by id from OffsetCommit/OffsetFetch v10; None: unknown id). Blocking."""
    if not by_id:
        return [t.name for t in topics]
    return [resolve_topic_id(broker, t.topic_id) for t in topics]


# -- OffsetFetch (9) -------------------------------------------------------------------------------


async def _offset_fetch(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    v = ctx.api_version
    cls = response_class(9, v)
    coord = await _coordinator(broker)
    if v < 8:
        topic_cls, part_cls = nested(cls, "OffsetFetchResponseTopic"), nested(cls, "OffsetFetchResponsePartition")
        topics = await _fetch_group(broker, coord, v, request.group_id, request.topics, topic_cls, part_cls)
        return build(cls, throttle_time=_ZERO, topics=topics, error_code=ErrorCode.none)
    group_cls = nested(cls, "OffsetFetchResponseGroup")
    topic_cls, part_cls = nested(cls, "OffsetFetchResponseTopics"), nested(cls, "OffsetFetchResponsePartitions")
    groups = []
    for g in request.groups:
        topics = await _fetch_group(broker, coord, v, g.group_id, g.topics, topic_cls, part_cls)
        groups.append(group_cls(group_id=g.group_id, topics=topics, error_code=ErrorCode.none))
    return cls(throttle_time=_ZERO, groups=tuple(groups))


async def _fetch_group(broker: Broker, coord: GroupCoordinator, v: int, group_id: str, topics: Sequence[Any] | None,
                       topic_cls: type[Any], part_cls: type[Any]) -> tuple[Any, ...]:
    by_id = v >= 10
    # (name, topic id, partitions, error): an unknown topic id gets UNKNOWN_TOPIC_ID for its partitions
    wanted: list[tuple[str, uuid.UUID | None, list[int], ErrorCode]] = []
    if topics is None:  # every committed partition of the group
        committed = coord.committed(group_id, None)
        names = list(dict.fromkeys(t for t, _ in committed))
        ids = await broker.run_blocking(_topic_ids, broker, names) if by_id else {}
        wanted = [(n, ids.get(n), [p for t, p in committed if t == n], ErrorCode.none)
                  for n in names if not by_id or n in ids]
    else:
        resolved = await broker.run_blocking(_resolve_names, broker, topics, by_id)
        for t, name in zip(topics, resolved, strict=True):
            parts = [int(p) for p in t.partition_indexes]
            tid = getattr(t, "topic_id", None)
            wanted.append((name, tid, parts, ErrorCode.none) if name is not None
                          else ("", tid, parts, ErrorCode.unknown_topic_id))
        committed = coord.committed(group_id, [(n, p) for n, _, ps, e in wanted if e == ErrorCode.none for p in ps])
    out = []
    for name, tid, parts, error in wanted:
        entries = []
        for p in parts:
            rec = committed.get((name, p)) if error == ErrorCode.none else None
            entries.append(build(part_cls, partition_index=p, committed_offset=rec.offset if rec else -1,
                                 committed_leader_epoch=rec.leader_epoch if rec else -1,
                                 metadata=rec.metadata if rec else "", error_code=error))
        out.append(build(topic_cls, name=name, topic_id=tid, partitions=tuple(entries)))
    return tuple(out)


def _topic_ids(broker: Broker, names: Sequence[str]) -> dict[str, uuid.UUID]:
    out = {}
    for name in names:
        try:
            out[name] = broker.topic_uuid(name)
        except UnknownTopic:
            continue
    return out


# -- OffsetDelete (47) -----------------------------------------------------------------------------


async def _offset_delete(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    cls = response_class(47, ctx.api_version)
    topic_cls, part_cls = nested(cls, "OffsetDeleteResponseTopic"), nested(cls, "OffsetDeleteResponsePartition")
    coord = await _coordinator(broker)
    counts = await broker.run_blocking(_topic_partitions, broker, [t.name for t in request.topics])
    known = [(t.name, int(p.partition_index)) for t in request.topics for p in t.partitions
             if (c := counts.get(t.name)) is not None and 0 <= p.partition_index < c]
    group_error, results = await coord.delete_offsets(request.group_id, known)
    if group_error != ErrorCode.none:
        return cls(error_code=group_error, throttle_time=_ZERO, topics=())
    return cls(error_code=ErrorCode.none, throttle_time=_ZERO, topics=tuple(
        topic_cls(name=t.name, partitions=tuple(
            part_cls(partition_index=p.partition_index,
                     error_code=results.get((t.name, int(p.partition_index)), ErrorCode.unknown_topic_or_partition))
            for p in t.partitions))
        for t in request.topics))


# -- ListGroups (16), DescribeGroups (15), DeleteGroups (42) ----------------------------------------


async def _list_groups(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    cls = response_class(16, ctx.api_version)
    entry = nested(cls, "ListedGroup")
    coord = await _coordinator(broker)
    states = {s.lower() for s in getattr(request, "states_filter", ())}
    types = {t.lower() for t in getattr(request, "types_filter", ())}
    listed = [] if types and _CLASSIC not in types else [
        build(entry, group_id=gid, protocol_type=ptype, group_state=state, group_type=_CLASSIC)
        for gid, ptype, state in coord.list_groups() if not states or state.lower() in states]
    return build(cls, throttle_time=_ZERO, error_code=ErrorCode.none, groups=tuple(listed))


async def _describe_groups(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    v = ctx.api_version
    cls = response_class(15, v)
    group_cls, member_cls = nested(cls, "DescribedGroup"), nested(cls, "DescribedGroupMember")
    coord = await _coordinator(broker)
    operations = _GROUP_OPERATIONS if getattr(request, "include_authorized_operations", False) else _NO_OPERATIONS
    out = []
    for gid in request.groups:
        summary = coord.describe(gid)
        if summary is None:
            missing = v >= 6
            out.append(build(group_cls, error_code=ErrorCode.group_id_not_found if missing else ErrorCode.none,
                             error_message=f"group {gid!r} not found" if missing else None, group_id=gid,
                             group_state="Dead", protocol_type="", protocol_data="", members=(),
                             authorized_operations=_NO_OPERATIONS))
            continue
        members = tuple(build(member_cls, member_id=m.member_id, group_instance_id=m.instance_id,
                              client_id=m.client_id, client_host=m.client_host, member_metadata=m.metadata,
                              member_assignment=m.assignment) for m in summary.members)
        out.append(build(group_cls, error_code=ErrorCode.none, error_message=None, group_id=gid,
                         group_state=summary.state, protocol_type=summary.protocol_type,
                         protocol_data=summary.protocol_data, members=members, authorized_operations=operations))
    return build(cls, throttle_time=_ZERO, groups=tuple(out))


async def _delete_groups(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    cls = response_class(42, ctx.api_version)
    entry = nested(cls, "DeletableGroupResult")
    coord = await _coordinator(broker)
    names = list(request.groups_names)
    results = await coord.delete_groups(names)
    return cls(throttle_time=_ZERO, results=tuple(entry(group_id=g, error_code=results[g]) for g in names))


#: the coordinator loads ``__consumer_offsets`` before the server takes requests
STARTUP = (GroupCoordinator,)

APIS = [
    ApiSpec(8, "OffsetCommit", 2, 10, _offset_commit),
    ApiSpec(9, "OffsetFetch", 1, 10, _offset_fetch),
    ApiSpec(10, "FindCoordinator", 0, 6, _find_coordinator),
    ApiSpec(11, "JoinGroup", 0, 9, _join_group),
    ApiSpec(12, "Heartbeat", 0, 4, _heartbeat),
    ApiSpec(13, "LeaveGroup", 0, 5, _leave_group),
    ApiSpec(14, "SyncGroup", 0, 5, _sync_group),
    ApiSpec(15, "DescribeGroups", 0, 6, _describe_groups),
    ApiSpec(16, "ListGroups", 0, 5, _list_groups),
    ApiSpec(42, "DeleteGroups", 0, 2, _delete_groups),
    ApiSpec(47, "OffsetDelete", 0, 0, _offset_delete),
]
