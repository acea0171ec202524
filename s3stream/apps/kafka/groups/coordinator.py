"""The group coordinator component: every group's state machine, its timers, and the committed offsets.

This server coordinates every group. Group operations run on the event loop and are synchronous over the
pure :class:`~.state.Group`; JoinGroup and SyncGroup return futures that the group's replies complete (the
handlers turn them into ``Later`` replies). One ``loop.call_at`` timer per group fires
:meth:`Group.tick <s3stream.apps.kafka.groups.state.Group.tick>` at its next deadline. Session and
rebalance times use the loop's monotonic clock; commit timestamps and offset retention use the store's
clock (wall time, persisted).

Committed offsets are served from memory and written to ``__consumer_offsets`` first: a commit is applied
(and acknowledged) once durable. Group metadata (generation, members, assignments) is written after each
completed rebalance without delaying it, so after a restart a group resumes at its last persisted
generation (members that are gone expire; members that moved on rejoin). Offsets of Empty groups expire
after ``offsets.retention.minutes`` (Kafka's KIP-211 rules), and Empty groups without offsets are removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from s3stream.apps.kafka.errors import error_code
from s3stream.apps.kafka.groups.codec import (
    GroupMetadataRecord,
    MemberRecord,
    OffsetCommitRecord,
    encode_group_metadata,
    encode_group_metadata_key,
    encode_offset_commit,
    encode_offset_key,
)
from s3stream.apps.kafka.groups.member import JoinRequest, JoinResult, Member, SyncResult
from s3stream.apps.kafka.groups.offsets_log import OffsetsLog, Row
from s3stream.apps.kafka.groups.state import Effects, Group, GroupSettings, GroupState
from s3stream.base.errors import S3StreamError

if TYPE_CHECKING:
    from s3stream.apps.kafka.broker import Broker

__all__ = ["GroupCoordinator", "GroupSummary", "MemberSummary", "OffsetToCommit"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OffsetToCommit:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


@dataclass(frozen=True, slots=True)
class MemberSummary:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """DescribeGroups' view: metadata and assignments only while Stable, as Kafka reports them."""

    group_id: str
    state: str
    protocol_type: str
    protocol_data: str
    members: tuple[MemberSummary, ...]


class GroupCoordinator:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        cfg = broker.config
        self.settings = GroupSettings(initial_rebalance_delay_ms=cfg.group_initial_rebalance_delay_ms,
                                      min_session_timeout_ms=cfg.group_min_session_timeout_ms,
                                      max_session_timeout_ms=cfg.group_max_session_timeout_ms)
        self.log = OffsetsLog(broker.store, cfg.offsets_topic_num_partitions, broker.run_blocking)
        self.groups: dict[str, Group] = {}
        self.offsets: dict[str, dict[tuple[str, int], OffsetCommitRecord]] = {}
        #: wall time a group became Empty (the base of its offsets' retention)
        self._empty_since: dict[str, int] = {}
        self._futures: dict[int, asyncio.Future[Any]] = {}
        self._tickets = itertools.count(1)
        self._timers: dict[str, tuple[int, asyncio.TimerHandle]] = {}
        self._tracked: dict[str, GroupState] = {}
        self._ready = asyncio.Event()
        self._sweeper: asyncio.Task[None] | None = None
        for state in GroupState:
            broker.metrics.groups.labels(state.value).set(0)

    # -- lifecycle -----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Create or load ``__consumer_offsets``: every group's committed offsets and last generation."""
        loaded = await self.broker.run_blocking(self.log.open)
        now = self._now()
        for gid, rec in loaded.groups.items():
            group = self._new_group(gid)
            members = [Member(m.member_id, m.instance_id, m.client_id, m.client_host, m.session_timeout_ms,
                              m.rebalance_timeout_ms, rec.protocol_type, ((rec.protocol or "", m.subscription),),
                              assignment=m.assignment) for m in rec.members]
            group.restore(now, rec.generation, rec.protocol_type, rec.protocol, rec.leader, members)
            self._after(group, Effects())
            if group.state is GroupState.EMPTY and rec.current_state_timestamp >= 0:
                self._empty_since[gid] = rec.current_state_timestamp  # when it really became Empty
        for gid, offsets in loaded.offsets.items():
            self.offsets[gid] = dict(offsets)
            if gid not in self.groups:
                self._after(self._new_group(gid), Effects())
        log.info("loaded %d groups (%d with committed offsets) from %d records of %s", len(self.groups),
                 len(self.offsets), loaded.records, "__consumer_offsets")
        self._sweeper = asyncio.create_task(self._sweep_loop(), name="offsets-retention")
        self._ready.set()

    async def ready(self) -> None:
        await self._ready.wait()

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        for fut in self._futures.values():
            fut.cancel()
        self._futures.clear()
        await self.log.close()

    # -- clocks, ids ---------------------------------------------------------------------------------

    @staticmethod
    def _now() -> int:
        return int(asyncio.get_running_loop().time() * 1000)

    def _wall(self) -> int:
        return self.broker.clock.now_ms()

    def new_member_id(self, client_id: str | None, instance_id: str | None) -> str:
        """``{client.id or group.instance.id}-{uuid}``, as Kafka names members."""
        token = str(uuid.UUID(hex=self.broker.store.runtime.ids.token(16)))
        prefix = instance_id if instance_id is not None else (client_id or "")
        return f"{prefix}-{token}"

    # -- membership ----------------------------------------------------------------------------------

    def join(self, group_id: str, req: JoinRequest) -> asyncio.Future[JoinResult]:
        fut: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        group = self.groups.get(group_id)
        if group is None:
            if req.member_id:  # a member of a group this coordinator does not know: start over
                fut.set_result(JoinResult(ErrorCode.unknown_member_id, req.member_id))
                return fut
            group = self._new_group(group_id)
        fx = group.join(self._now(), self._ticket(fut), req)
        self._after(group, fx)
        self._dispose_if_unused(group)  # a refused first join leaves nothing behind
        return fut

    def sync(self, group_id: str, member_id: str, instance_id: str | None, generation: int,
             protocol_type: str | None, protocol_name: str | None,
             assignments: dict[str, bytes]) -> asyncio.Future[SyncResult]:
        fut: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        group = self.groups.get(group_id)
        if group is None:
            fut.set_result(SyncResult(ErrorCode.unknown_member_id))
            return fut
        fx = group.sync(self._now(), self._ticket(fut), member_id, instance_id, generation, protocol_type,
                        protocol_name, assignments)
        self._after(group, fx)
        return fut

    def heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation: int) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        error = group.heartbeat(self._now(), member_id, instance_id, generation)
        self._after(group, Effects())
        return error

    def leave(self, group_id: str, members: Sequence[tuple[str, str | None]]) -> list[ErrorCode]:
        group = self.groups.get(group_id)
        if group is None:
            return [ErrorCode.unknown_member_id] * len(members)
        errors, fx = group.leave(self._now(), members)
        self._after(group, fx)
        return errors

    # -- offsets -------------------------------------------------------------------------------------

    async def commit(self, group_id: str, member_id: str, instance_id: str | None, generation: int,
                     offsets: Sequence[OffsetToCommit], retention_ms: int = -1) -> list[ErrorCode]:
        """Validate the committer, then write the offsets; one error per offset, in order."""
        group = self.groups.get(group_id)
        if group is None:
            if generation >= 0:  # a generation of a group this coordinator does not have
                return [ErrorCode.illegal_generation] * len(offsets)
            group = self._new_group(group_id)
        error = group.validate_commit(self._now(), member_id, instance_id, generation)
        self._after(group, Effects())
        if error != ErrorCode.none:
            return [error] * len(offsets)
        errors = [ErrorCode.none] * len(offsets)
        wall = self._wall()
        limit = self.broker.config.offset_metadata_max_bytes
        rows: list[Row] = []
        records: dict[tuple[str, int], OffsetCommitRecord] = {}
        written: list[int] = []
        for i, o in enumerate(offsets):
            metadata = o.metadata or ""
            if len(metadata.encode()) > limit:
                errors[i] = ErrorCode.offset_metadata_too_large
                continue
            rec = OffsetCommitRecord(o.offset, o.leader_epoch, metadata, wall,
                                     wall + retention_ms if retention_ms >= 0 else -1)
            rows.append((encode_offset_key(group_id, o.topic, o.partition), encode_offset_commit(rec)))
            records[(o.topic, o.partition)] = rec
            written.append(i)

        def apply() -> None:  # in log order: a deletion queued later forgets these again
            self.offsets.setdefault(group_id, {}).update(records)
            if group_id not in self.groups:  # dropped meanwhile as unused: it has offsets now
                self._after(self._new_group(group_id), Effects())

        if rows:
            try:
                await self.log.append(group_id, rows, apply)
            except S3StreamError as exc:
                log.warning("committing offsets of group %r failed: %s", group_id, exc)
                code = _commit_error(exc)
                for i in written:
                    errors[i] = code
        self._dispose_if_unused(group)
        return errors

    def committed(self, group_id: str, partitions: Sequence[tuple[str, int]] | None
                  ) -> dict[tuple[str, int], OffsetCommitRecord | None]:
        """The committed offset of each partition (None when there is none); every partition with one when
        ``partitions`` is None."""
        have = self.offsets.get(group_id, {})
        if partitions is None:
            return dict(sorted(have.items()))
        return {tp: have.get(tp) for tp in partitions}

    async def delete_offsets(self, group_id: str, partitions: Sequence[tuple[str, int]]
                             ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        """OffsetDelete: the group's error, else one error per partition (a topic a member of a live consumer
        group is subscribed to keeps its offsets: GROUP_SUBSCRIBED_TO_TOPIC)."""
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return ErrorCode.group_id_not_found, {}
        results: dict[tuple[str, int], ErrorCode] = {}
        if group.state is not GroupState.EMPTY:
            if group.protocol_type != "consumer":
                return ErrorCode.non_empty_group, {}
            for tp in partitions:
                results[tp] = ErrorCode.group_subscribed_to_topic if group.is_subscribed(tp[0]) else ErrorCode.none
        else:
            results = dict.fromkeys(partitions, ErrorCode.none)
        have = self.offsets.get(group_id, {})
        doomed = [tp for tp, err in results.items() if err == ErrorCode.none and tp in have]
        if doomed:
            try:
                await self.log.append(group_id, [(encode_offset_key(group_id, t, p), None) for t, p in doomed],
                                      lambda: self._forget_offsets(group_id, doomed))
            except S3StreamError as exc:
                return _commit_error(exc), {}
        return ErrorCode.none, results

    def _forget_offsets(self, group_id: str, partitions: Sequence[tuple[str, int]]) -> None:
        have = self.offsets.get(group_id)
        if have is None:
            return
        for tp in partitions:
            have.pop(tp, None)
        if not have:
            del self.offsets[group_id]

    # -- admin ---------------------------------------------------------------------------------------

    def list_groups(self) -> list[tuple[str, str, str]]:
        """``(group id, protocol type, state)`` of every live group."""
        return [(gid, g.protocol_type or "", g.state.value) for gid, g in sorted(self.groups.items())
                if g.state is not GroupState.DEAD]

    def describe(self, group_id: str) -> GroupSummary | None:
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return None
        stable = group.state is GroupState.STABLE and group.protocol_name is not None
        proto = group.protocol_name or ""
        members = tuple(MemberSummary(m.member_id, m.instance_id, m.client_id, m.client_host,
                                      m.metadata_for(proto) if stable else b"", m.assignment if stable else b"")
                        for m in group.members.values())
        return GroupSummary(group_id, group.state.value, group.protocol_type or "", proto if stable else "", members)

    async def delete_groups(self, group_ids: Sequence[str]) -> dict[str, ErrorCode]:
        """DeleteGroups: an Empty group and its offsets go (tombstones); NON_EMPTY_GROUP while it has members."""
        results: dict[str, ErrorCode] = {}
        doomed: list[tuple[str, Group]] = []
        for gid in group_ids:
            group = self.groups.get(gid)
            results[gid] = ErrorCode.group_id_not_found if group is None else group.try_delete()
            if group is not None and results[gid] == ErrorCode.none:
                self._after(group, Effects())
                doomed.append((gid, group))
        writes = [(gid, group, self._erase(gid, group)) for gid, group in doomed]  # queued now, in order
        for gid, group, written in writes:
            try:
                await asyncio.shield(written)
            except S3StreamError as exc:
                log.warning("deleting group %r failed: %s", gid, exc)
                group.undelete()
                self._after(group, Effects())
                results[gid] = _commit_error(exc)
        return results

    def _erase(self, gid: str, group: Group) -> asyncio.Future[None]:
        """Queue tombstones for a Dead group's offsets and metadata; it is forgotten once they are durable."""
        rows: list[Row] = [(encode_offset_key(gid, t, p), None) for t, p in self.offsets.get(gid, {})]
        rows.append((encode_group_metadata_key(gid), None))

        def apply() -> None:
            if self.groups.get(gid) is group:
                self._drop_group(gid)
            self.offsets.pop(gid, None)

        return self.log.enqueue(gid, rows, apply)

    # -- retention -----------------------------------------------------------------------------------

    async def _sweep_loop(self) -> None:
        interval = self.broker.config.offsets_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await self.expire_offsets()
            except Exception:
                log.exception("expiring committed offsets failed")

    async def expire_offsets(self, now_wall: int | None = None) -> int:
        """Delete the offsets past retention of Empty groups, then Empty groups with no offsets (Kafka's
        ``cleanupGroupMetadata``). Returns how many offsets expired."""
        now = self._wall() if now_wall is None else now_wall
        retention = self.broker.config.offsets_retention_minutes * 60_000
        expired = 0
        jobs: list[asyncio.Future[None]] = []
        for gid, group in list(self.groups.items()):
            if group.state is not GroupState.EMPTY or group.pending:
                continue
            have = self.offsets.get(gid, {})
            base = self._empty_since.get(gid) if group.protocol_type else None
            old = [tp for tp, rec in have.items() if _expired(rec, base, now, retention)]
            expired += len(old)
            if len(old) == len(have):  # nothing left: the group goes too
                group.try_delete()
                self._after(group, Effects())
                erased = self._erase(gid, group)
                erased.add_done_callback(functools.partial(self._erased, group))
                jobs.append(erased)
            elif old:
                rows: list[Row] = [(encode_offset_key(gid, t, p), None) for t, p in old]
                jobs.append(self.log.enqueue(gid, rows, functools.partial(self._forget_offsets, gid, old)))
        results = await asyncio.gather(*jobs, return_exceptions=True)
        for res in results:
            if isinstance(res, BaseException):
                log.warning("expiring offsets failed: %s", res)
        return expired

    def _erased(self, group: Group, fut: asyncio.Future[None]) -> None:
        if fut.cancelled() or fut.exception() is not None:  # the tombstones did not land: keep it, retry later
            group.undelete()
            self._after(group, Effects())

    # -- plumbing ------------------------------------------------------------------------------------

    def _new_group(self, gid: str) -> Group:
        group = Group(gid, self.settings, self._now())
        self.groups[gid] = group
        return group

    def _ticket(self, fut: asyncio.Future[Any]) -> int:
        ticket = next(self._tickets)
        self._futures[ticket] = fut
        return ticket

    def _after(self, group: Group, fx: Effects) -> None:
        """Deliver replies, persist what changed, keep the metrics and the group's timer in step."""
        for ticket, result in fx.replies:
            fut = self._futures.pop(ticket, None)
            if fut is not None and not fut.done():
                fut.set_result(result)
        gid = group.group_id
        if self.groups.get(gid) is not group:
            return
        old = self._tracked.get(gid)
        if old is not group.state:
            if old is not None:
                self.broker.metrics.groups.labels(old.value).dec()
            self.broker.metrics.groups.labels(group.state.value).inc()
            self._tracked[gid] = group.state
            if group.state is GroupState.EMPTY:
                self._empty_since[gid] = self._wall()
            else:
                self._empty_since.pop(gid, None)
        if fx.persist:
            self._persist(group)
        self._reschedule(group)

    def _reschedule(self, group: Group) -> None:
        gid = group.group_id
        deadline = group.next_deadline()
        current = self._timers.get(gid)
        if current is not None:
            if current[0] == deadline:
                return
            current[1].cancel()
            del self._timers[gid]
        if deadline is not None:
            loop = asyncio.get_running_loop()
            self._timers[gid] = (deadline, loop.call_at(deadline / 1000, self._on_timer, gid, deadline))

    def _on_timer(self, gid: str, deadline: int) -> None:
        self._timers.pop(gid, None)
        group = self.groups.get(gid)
        if group is None:
            return
        fx = group.tick(max(self._now(), deadline))
        self._after(group, fx)
        self._dispose_if_unused(group)

    def _dispose_if_unused(self, group: Group) -> None:
        """Forget a group that never got further than a failed first request (nothing to keep or report)."""
        gid = group.group_id
        if (self.groups.get(gid) is group and group.state is GroupState.EMPTY and group.is_empty
                and group.generation == 0 and not self.offsets.get(gid) and not group.protocol_type):
            self._drop_group(gid)

    def _drop_group(self, gid: str) -> None:
        self.groups.pop(gid, None)
        state = self._tracked.pop(gid, None)
        if state is not None:
            self.broker.metrics.groups.labels(state.value).dec()
        self._empty_since.pop(gid, None)
        timer = self._timers.pop(gid, None)
        if timer is not None:
            timer[1].cancel()

    def _persist(self, group: Group) -> None:
        """Queue the group's current generation (best effort: membership is rebuilt by rejoining)."""
        proto = group.protocol_name
        members = tuple(MemberRecord(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                                     m.session_timeout_ms, m.metadata_for(proto), m.assignment)
                        for m in group.members.values()) if proto is not None else ()
        record = GroupMetadataRecord(group.protocol_type or "", group.generation, proto,
                                     group.leader if members else None, self._wall(), members)
        gid, generation = group.group_id, group.generation
        written = self.log.enqueue(gid, [(encode_group_metadata_key(gid), encode_group_metadata(record))])

        def done(fut: asyncio.Future[None]) -> None:
            if not fut.cancelled() and (exc := fut.exception()) is not None:
                log.warning("persisting group %r generation %d failed: %s", gid, generation, exc)

        written.add_done_callback(done)


def _expired(rec: OffsetCommitRecord, empty_since: int | None, now: int, retention_ms: int) -> bool:
    """Kafka's rule: an explicit expiry wins; else retention runs from when the group became Empty (a group
    with a protocol), or from the commit (a group only used for commits)."""
    if rec.expire_timestamp >= 0:
        return now >= rec.expire_timestamp
    return now - (rec.commit_timestamp if empty_since is None else empty_since) >= retention_ms


def _commit_error(exc: S3StreamError) -> ErrorCode:
    """Kafka's mapping of a failed write to ``__consumer_offsets`` onto what a committer can act on."""
    code = error_code(exc)
    if code in (ErrorCode.request_timed_out, ErrorCode.unknown_topic_or_partition):
        return ErrorCode.coordinator_not_available
    if code in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if code in (ErrorCode.message_too_large, ErrorCode.record_list_too_large):
        return ErrorCode.invalid_commit_offset_size
    return code
