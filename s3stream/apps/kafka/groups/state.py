"""Kafka's classic group rebalance protocol as a pure state machine over an injected ``now_ms``.

Empty -> PreparingRebalance -> CompletingRebalance -> Stable, as Kafka's ``GroupCoordinator`` runs it:

* **Join phase** (PreparingRebalance): members (re)send JoinGroup; it ends when every member has rejoined
  and no KIP-394 pending member is outstanding, or when the rebalance timeout (the largest of the members')
  passes: then dynamic members that did not rejoin are removed. The first rebalance of an Empty group waits
  ``group.initial.rebalance.delay.ms`` instead, extended while new members keep arriving (generation 0),
  up to the rebalance timeout. The generation is bumped, the protocol chosen by the members' votes, and
  every waiting JoinGroup answered (the leader gets everyone's metadata).
* **Sync phase** (CompletingRebalance): the leader's SyncGroup carries the assignment; every waiting SyncGroup
  is answered and the group is Stable. Members that have not sent SyncGroup within the rebalance timeout
  are removed (and the group rebalances again).
* **Sessions**: a member expires when no heartbeat (or commit, join, sync) arrives within its session
  timeout, except while its JoinGroup or SyncGroup is waiting (the rebalance bounds it then).
* **Static members** (KIP-345): a known ``group.instance.id`` joining with no member id replaces the old
  member id, keeps its assignment and, in a Stable group whose protocol would not change, gets the current
  generation back without a rebalance; the old member id is fenced (FENCED_INSTANCE_ID).

Every method takes ``now_ms`` and returns the replies it completes as :class:`Effects`; :meth:`Group.tick`
fires the timers due at ``now_ms`` and :meth:`Group.next_deadline` says when to call it next. No I/O, no
clock, no randomness: a simulator drives it by calling these in any order with any times.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from s3stream.apps.kafka.groups.member import JoinedMember, JoinRequest, JoinResult, Member, SyncResult, Ticket

__all__ = ["DEFAULT_NEW_MEMBER_JOIN_TIMEOUT_MS", "Effects", "Group", "GroupSettings", "GroupState", "consumer_topics"]

#: Kafka's ``NewMemberJoinTimeoutMs``: a new member's JoinGroup waits at most this long for a rebalance
DEFAULT_NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000


class GroupState(enum.Enum):
    """The states, under the names Kafka reports (DescribeGroups, ListGroups)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class GroupSettings:
    initial_rebalance_delay_ms: int = 3_000
    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    new_member_join_timeout_ms: int = DEFAULT_NEW_MEMBER_JOIN_TIMEOUT_MS


@dataclass(slots=True)
class Effects:
    """What one call completed: replies for waiting JoinGroup/SyncGroup tickets, and whether the group's
    metadata (generation, members, assignments) changed in a way worth persisting."""

    replies: list[tuple[Ticket, JoinResult | SyncResult]] = field(default_factory=list)
    persist: bool = False

    def reply(self, ticket: Ticket, result: JoinResult | SyncResult) -> None:
        self.replies.append((ticket, result))


class Group:
    """One group's membership and rebalance state (committed offsets live in the coordinator)."""

    def __init__(self, group_id: str, settings: GroupSettings, now_ms: int = 0) -> None:
        self.group_id = group_id
        self.settings = settings
        self.state = GroupState.EMPTY
        self.state_since_ms = now_ms
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader: str | None = None
        self.members: dict[str, Member] = {}
        #: group.instance.id -> member id
        self.static: dict[str, str] = {}
        #: KIP-394 member ids handed out with MEMBER_ID_REQUIRED -> when they expire
        self.pending: dict[str, int] = {}
        #: members that got their JoinGroup answer but have not sent SyncGroup yet
        self.pending_sync: set[str] = set()
        self._join_deadline: int | None = None
        #: (configured delay, remaining budget) while the initial rebalance delay runs
        self._initial: tuple[int, int] | None = None
        self._new_member_added = False
        self._sync_deadline: int | None = None

    # -- queries -------------------------------------------------------------------------------------

    @property
    def is_empty(self) -> bool:
        return not self.members and not self.pending

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def next_deadline(self) -> int | None:
        """The earliest time :meth:`tick` has something to do, or None."""
        found = [d for d in (self._join_deadline, self._sync_deadline) if d is not None]
        found.extend(self.pending.values())
        found.extend(d for m in self.members.values() if (d := m.expiry_ms()) is not None)
        return min(found, default=None)

    def joined_members(self) -> tuple[JoinedMember, ...]:
        assert self.protocol_name is not None
        proto = self.protocol_name
        return tuple(JoinedMember(m.member_id, m.instance_id, m.metadata_for(proto)) for m in self.members.values())

    def is_subscribed(self, topic: str) -> bool:
        """Whether some member's consumer subscription names ``topic`` (True when a subscription is unreadable,
        as Kafka assumes)."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return bool(self.members)
        for m in self.members.values():
            topics = consumer_topics(m.metadata_for(self.protocol_name))
            if topics is None or topic in topics:
                return True
        return False

    # -- JoinGroup -----------------------------------------------------------------------------------

    def join(self, now_ms: int, ticket: Ticket, req: JoinRequest) -> Effects:
        fx = Effects()
        s = self.settings
        if not s.min_session_timeout_ms <= req.session_timeout_ms <= s.max_session_timeout_ms:
            fx.reply(ticket, JoinResult(ErrorCode.invalid_session_timeout, req.member_id))
        elif self.state is GroupState.DEAD:
            fx.reply(ticket, JoinResult(ErrorCode.coordinator_not_available, req.member_id))
        elif not self._supports(req.protocol_type, [name for name, _ in req.protocols]):
            fx.reply(ticket, JoinResult(ErrorCode.inconsistent_group_protocol, req.member_id))
        elif not req.member_id:
            self._join_new(now_ms, ticket, req, fx)
        else:
            self._join_known(now_ms, ticket, req, fx)
        if self.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(now_ms, fx)
        return fx

    def _supports(self, protocol_type: str, names: Sequence[str]) -> bool:
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        if protocol_type != self.protocol_type:
            return False
        return any(all(name in m.protocol_names for m in self.members.values()) for name in names)

    def _join_new(self, now_ms: int, ticket: Ticket, req: JoinRequest, fx: Effects) -> None:
        new_id = req.new_member_id
        if req.instance_id is not None:
            old_id = self.static.get(req.instance_id)
            if old_id is not None:
                self._replace_static(now_ms, ticket, old_id, req, fx)
            else:
                self._add_member(now_ms, ticket, new_id, req, fx)
        elif req.require_known_member_id:
            self.pending[new_id] = now_ms + req.session_timeout_ms
            fx.reply(ticket, JoinResult(ErrorCode.member_id_required, new_id))
        else:
            self._add_member(now_ms, ticket, new_id, req, fx)

    def _join_known(self, now_ms: int, ticket: Ticket, req: JoinRequest, fx: Effects) -> None:
        mid = req.member_id
        if mid in self.pending:
            if req.instance_id is not None:  # pending ids are dynamic: let it start over as a static member
                fx.reply(ticket, JoinResult(ErrorCode.unknown_member_id, mid))
                return
            del self.pending[mid]
            self._add_member(now_ms, ticket, mid, req, fx)
            return
        if self._fenced(req.instance_id, mid):
            fx.reply(ticket, JoinResult(ErrorCode.fenced_instance_id, mid))
            return
        member = self.members.get(mid)
        if member is None or (req.instance_id is not None and req.instance_id not in self.static):
            fx.reply(ticket, JoinResult(ErrorCode.unknown_member_id, mid))
            return
        st = self.state
        if st is GroupState.PREPARING_REBALANCE:
            self._update_and_rebalance(now_ms, ticket, member, req, fx)
        elif st is GroupState.COMPLETING_REBALANCE:
            if member.matches(req.protocols):  # a lost JoinGroup response: answer it again
                fx.reply(ticket, self._join_result(member))
            else:
                self._update_and_rebalance(now_ms, ticket, member, req, fx)
        elif st is GroupState.STABLE:
            if mid == self.leader or not member.matches(req.protocols):
                self._update_and_rebalance(now_ms, ticket, member, req, fx)
            else:
                fx.reply(ticket, self._join_result(member))
        else:
            fx.reply(ticket, JoinResult(ErrorCode.unknown_member_id, mid))

    def _join_result(self, member: Member) -> JoinResult:
        is_leader = member.member_id == self.leader
        return JoinResult(ErrorCode.none, member.member_id, self.generation, self.protocol_type, self.protocol_name,
                          self.leader or "", self.joined_members() if is_leader else ())

    def _add_member(self, now_ms: int, ticket: Ticket, mid: str, req: JoinRequest, fx: Effects) -> None:
        member = Member(mid, req.instance_id, req.client_id, req.client_host, req.session_timeout_ms,
                        req.rebalance_timeout_ms, req.protocol_type, req.protocols, join_ticket=ticket, is_new=True,
                        deadline_ms=now_ms + self.settings.new_member_join_timeout_ms)
        if self.state is GroupState.PREPARING_REBALANCE and self.generation == 0:
            self._new_member_added = True
        if not self.members:
            self.protocol_type = req.protocol_type
        self.members[mid] = member
        if self.leader is None:
            self.leader = mid
        if req.instance_id is not None:
            self.static[req.instance_id] = mid
        self._maybe_prepare_rebalance(now_ms, fx)

    def _update_and_rebalance(self, now_ms: int, ticket: Ticket, member: Member, req: JoinRequest,
                              fx: Effects) -> None:
        self._update(member, ticket, req, fx)
        self._maybe_prepare_rebalance(now_ms, fx)

    def _update(self, member: Member, ticket: Ticket, req: JoinRequest, fx: Effects) -> None:
        if member.join_ticket is not None and member.join_ticket != ticket:  # superseded by a retry
            fx.reply(member.join_ticket, JoinResult(ErrorCode.rebalance_in_progress, member.member_id))
        member.protocols = req.protocols
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.client_id = req.client_id
        member.client_host = req.client_host
        member.join_ticket = ticket

    def _replace_static(self, now_ms: int, ticket: Ticket, old_id: str, req: JoinRequest, fx: Effects) -> None:
        new_id = req.new_member_id
        current_leader = self.leader
        member = self.members.pop(old_id)
        if member.join_ticket is not None:
            fx.reply(member.join_ticket, JoinResult(ErrorCode.fenced_instance_id, old_id))
            member.join_ticket = None
        if member.sync_ticket is not None:
            fx.reply(member.sync_ticket, SyncResult(ErrorCode.fenced_instance_id))
            member.sync_ticket = None
        member.member_id = new_id
        self.members[new_id] = member
        if self.leader == old_id:
            self.leader = new_id
        assert req.instance_id is not None
        self.static[req.instance_id] = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        member.deadline_ms = now_ms + req.session_timeout_ms
        self._update(member, ticket, req, fx)
        st = self.state
        if st is GroupState.STABLE:
            if self._select_protocol() == self.protocol_name:
                # nothing changes for the others: hand back the current generation. The leader returned is
                # the *old* leader id, so a restarted leader does not compute (and lose) a new assignment.
                member.join_ticket = None
                fx.reply(ticket, JoinResult(ErrorCode.none, new_id, self.generation, self.protocol_type,
                                            self.protocol_name, current_leader or ""))
                fx.persist = True
            else:
                self._prepare_rebalance(now_ms, fx)
        elif st is GroupState.COMPLETING_REBALANCE:
            # the leader may already hold the old member id: its assignment would miss the new one
            self._prepare_rebalance(now_ms, fx)

    # -- rebalance -----------------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, now_ms: int, fx: Effects) -> None:
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(now_ms, fx)

    def _prepare_rebalance(self, now_ms: int, fx: Effects) -> None:
        if self.state is GroupState.COMPLETING_REBALANCE:  # members waiting for an assignment must rejoin
            for m in self.members.values():
                m.assignment = b""
                if m.sync_ticket is not None:
                    fx.reply(m.sync_ticket, SyncResult(ErrorCode.rebalance_in_progress))
                    m.sync_ticket = None
                    m.deadline_ms = now_ms + m.session_timeout_ms
        self._sync_deadline = None
        self.pending_sync.clear()
        if self.state is GroupState.EMPTY:
            delay = self.settings.initial_rebalance_delay_ms
            self._initial = (delay, max(self.rebalance_timeout_ms() - delay, 0))
            self._join_deadline = now_ms + delay
        else:
            self._initial = None
            self._join_deadline = now_ms + self.rebalance_timeout_ms()
        self._transition(GroupState.PREPARING_REBALANCE, now_ms)
        self._maybe_complete_join(now_ms, fx)

    def _all_joined(self) -> bool:
        return not self.pending and all(m.join_ticket is not None for m in self.members.values())

    def _maybe_complete_join(self, now_ms: int, fx: Effects) -> None:
        if self.state is GroupState.PREPARING_REBALANCE and self._initial is None and self._all_joined():
            self._complete_join(now_ms, fx)

    def _complete_join(self, now_ms: int, fx: Effects) -> None:
        for m in list(self.members.values()):
            if m.join_ticket is None and m.instance_id is None:  # did not rejoin in time
                self._drop(m, fx)
        self._initial = None
        if not self._elect_joined_leader() and self.members:
            # only static members that did not rejoin remain: wait for them (or their session expiry)
            self._join_deadline = now_ms + max(self.rebalance_timeout_ms(), 1)
            return
        self._join_deadline = None
        self.generation += 1
        if not self.members:
            self.protocol_name = None
            self._transition(GroupState.EMPTY, now_ms)
            fx.persist = True
            return
        self.protocol_name = self._select_protocol()
        self._transition(GroupState.COMPLETING_REBALANCE, now_ms)
        for m in self.members.values():
            if m.join_ticket is not None:
                fx.reply(m.join_ticket, self._join_result(m))
                m.join_ticket = None
            m.is_new = False
            m.deadline_ms = now_ms + m.session_timeout_ms
        self.pending_sync = set(self.members)
        self._sync_deadline = now_ms + self.rebalance_timeout_ms()

    def _elect_joined_leader(self) -> bool:
        if self.leader is None:
            return False
        if self.members[self.leader].join_ticket is not None:
            return True
        for m in self.members.values():
            if m.join_ticket is not None:
                self.leader = m.member_id
                return True
        return False

    def _select_protocol(self) -> str:
        """The protocol every member supports that gets the most first-choice votes (ties: first voted)."""
        members = list(self.members.values())
        candidates = {n for n in members[0].protocol_names if all(n in m.protocol_names for m in members)}
        votes: dict[str, int] = {}
        for m in members:
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda name: votes[name])

    def _transition(self, state: GroupState, now_ms: int) -> None:
        self.state = state
        self.state_since_ms = now_ms

    # -- SyncGroup -----------------------------------------------------------------------------------

    def sync(self, now_ms: int, ticket: Ticket, member_id: str, instance_id: str | None, generation: int,
             protocol_type: str | None, protocol_name: str | None, assignments: Mapping[str, bytes]) -> Effects:
        fx = Effects()
        error = self._check_member(member_id, instance_id, generation)
        if error is None and protocol_type is not None and protocol_type != self.protocol_type:
            error = ErrorCode.inconsistent_group_protocol
        if error is None and protocol_name is not None and protocol_name != self.protocol_name:
            error = ErrorCode.inconsistent_group_protocol
        if error is None and self.state is GroupState.EMPTY:
            error = ErrorCode.unknown_member_id
        if error is None and self.state is GroupState.PREPARING_REBALANCE:
            error = ErrorCode.rebalance_in_progress
        if error is not None:
            fx.reply(ticket, SyncResult(error))
            return fx
        member = self.members[member_id]
        self._synced(member_id)
        if self.state is GroupState.STABLE:
            fx.reply(ticket, self._sync_result(member))
            member.deadline_ms = now_ms + member.session_timeout_ms
            return fx
        # CompletingRebalance: wait for the leader's assignment
        if member.sync_ticket is not None and member.sync_ticket != ticket:
            fx.reply(member.sync_ticket, SyncResult(ErrorCode.rebalance_in_progress))
        member.sync_ticket = ticket
        if member_id == self.leader:
            for m in self.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            self._transition(GroupState.STABLE, now_ms)
            for m in self.members.values():
                if m.sync_ticket is not None:
                    fx.reply(m.sync_ticket, self._sync_result(m))
                    m.sync_ticket = None
                    m.deadline_ms = now_ms + m.session_timeout_ms
            fx.persist = True
        return fx

    def _sync_result(self, member: Member) -> SyncResult:
        return SyncResult(ErrorCode.none, self.protocol_type, self.protocol_name, member.assignment)

    def _synced(self, member_id: str) -> None:
        self.pending_sync.discard(member_id)
        if not self.pending_sync:
            self._sync_deadline = None

    def _fenced(self, instance_id: str | None, member_id: str) -> bool:
        if instance_id is None:
            return False
        current = self.static.get(instance_id)
        return current is not None and current != member_id

    def _check_member(self, member_id: str, instance_id: str | None, generation: int) -> ErrorCode | None:
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if self._fenced(instance_id, member_id):
            return ErrorCode.fenced_instance_id
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        if generation != self.generation:
            return ErrorCode.illegal_generation
        return None

    # -- Heartbeat, LeaveGroup, OffsetCommit ---------------------------------------------------------

    def heartbeat(self, now_ms: int, member_id: str, instance_id: str | None, generation: int) -> ErrorCode:
        error = self._check_member(member_id, instance_id, generation)
        if error is not None:
            return error
        if self.state is GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        member = self.members[member_id]
        member.deadline_ms = now_ms + member.session_timeout_ms
        if self.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, now_ms: int, leaving: Sequence[tuple[str, str | None]]) -> tuple[list[ErrorCode], Effects]:
        """Remove members (``(member_id, instance_id)``; an empty member id removes a static member by its
        instance id, as the admin API does). Returns one error per member."""
        fx = Effects()
        if self.state is GroupState.DEAD:
            return [ErrorCode.coordinator_not_available] * len(leaving), fx
        errors = []
        for member_id, instance_id in leaving:
            if not member_id:
                current = self.static.get(instance_id) if instance_id is not None else None
                if current is None:
                    errors.append(ErrorCode.unknown_member_id)
                else:
                    self._remove(now_ms, self.members[current], fx)
                    errors.append(ErrorCode.none)
            elif member_id in self.pending:
                del self.pending[member_id]
                self._maybe_complete_join(now_ms, fx)
                errors.append(ErrorCode.none)
            elif self._fenced(instance_id, member_id):
                errors.append(ErrorCode.fenced_instance_id)
            elif member_id in self.members:
                self._remove(now_ms, self.members[member_id], fx)
                errors.append(ErrorCode.none)
            else:
                errors.append(ErrorCode.unknown_member_id)
        return errors, fx

    def validate_commit(self, now_ms: int, member_id: str, instance_id: str | None, generation: int) -> ErrorCode:
        """Whether an OffsetCommit may write: members of the current generation, or anyone (generation -1, no
        member id) while the group is Empty. A valid member's commit counts as a heartbeat."""
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if generation >= 0 or member_id or instance_id is not None:
            error = self._check_member(member_id, instance_id, generation)
            if error is not None:
                return error
        elif self.state is not GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        if self.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        member = self.members.get(member_id)
        if member is not None:
            member.deadline_ms = now_ms + member.session_timeout_ms
        return ErrorCode.none

    def _drop(self, member: Member, fx: Effects) -> None:
        """Forget a member; any request of it still waiting is answered UNKNOWN_MEMBER_ID (so a connection
        never waits forever on a member the group no longer has)."""
        mid = member.member_id
        if member.join_ticket is not None:
            fx.reply(member.join_ticket, JoinResult(ErrorCode.unknown_member_id, mid))
            member.join_ticket = None
        if member.sync_ticket is not None:
            fx.reply(member.sync_ticket, SyncResult(ErrorCode.unknown_member_id))
            member.sync_ticket = None
        del self.members[mid]
        if member.instance_id is not None and self.static.get(member.instance_id) == mid:
            del self.static[member.instance_id]
        self.pending_sync.discard(mid)
        if self.leader == mid:
            self.leader = next(iter(self.members), None)

    def _remove(self, now_ms: int, member: Member, fx: Effects) -> None:
        self._drop(member, fx)
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(now_ms, fx)
        elif self.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(now_ms, fx)

    # -- timers --------------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> Effects:
        """Fire every timer due at ``now_ms``, earliest first."""
        fx = Effects()
        while (due := self.next_deadline()) is not None and due <= now_ms:
            self._fire(now_ms, fx)
        return fx

    def _fire(self, now_ms: int, fx: Effects) -> None:
        if self._join_deadline is not None and self._join_deadline <= now_ms:
            self._join_deadline = None
            if self._initial is not None and self._new_member_added and self._initial[1] > 0:
                configured, remaining = self._initial
                self._new_member_added = False
                delay = min(configured, remaining)
                self._initial = (configured, max(remaining - delay, 0))
                self._join_deadline = now_ms + delay
            elif self.state is GroupState.PREPARING_REBALANCE:
                self._complete_join(now_ms, fx)
            return
        if self._sync_deadline is not None and self._sync_deadline <= now_ms:
            self._sync_deadline = None
            late = [self.members[mid] for mid in self.pending_sync if mid in self.members]
            self.pending_sync.clear()
            if late and self.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
                for m in late:
                    self._drop(m, fx)
                self._maybe_prepare_rebalance(now_ms, fx)
            return
        for mid, deadline in list(self.pending.items()):
            if deadline <= now_ms:
                del self.pending[mid]
                self._maybe_complete_join(now_ms, fx)
                return
        for m in list(self.members.values()):
            expiry = m.expiry_ms()
            if expiry is not None and expiry <= now_ms:
                self._remove(now_ms, m, fx)
                return

    # -- lifecycle -----------------------------------------------------------------------------------

    def try_delete(self) -> ErrorCode:
        """DeleteGroups: only an Empty group may go (it becomes Dead)."""
        if self.state is GroupState.DEAD:
            return ErrorCode.group_id_not_found
        if self.state is not GroupState.EMPTY:
            return ErrorCode.non_empty_group
        self.state = GroupState.DEAD
        self.pending.clear()
        self._join_deadline = self._sync_deadline = None
        return ErrorCode.none

    def undelete(self) -> None:
        """Back to Empty after a deletion whose tombstones could not be written."""
        if self.state is GroupState.DEAD:
            self.state = GroupState.EMPTY

    def restore(self, now_ms: int, generation: int, protocol_type: str | None, protocol_name: str | None,
                leader: str | None, members: Sequence[Member]) -> None:
        """Load a persisted generation (after a restart): Stable with its members and assignments, each
        given a fresh session, or Empty when it had none."""
        self.generation = generation
        self.protocol_type = protocol_type or None
        self.members = {}
        self.static = {}
        if not members or protocol_name is None:
            self.protocol_name = None
            self.leader = None
            self._transition(GroupState.EMPTY, now_ms)
            return
        for m in members:
            m.deadline_ms = now_ms + m.session_timeout_ms
            self.members[m.member_id] = m
            if m.instance_id is not None:
                self.static[m.instance_id] = m.member_id
        self.protocol_name = protocol_name
        self.leader = leader if leader in self.members else next(iter(self.members))
        self._transition(GroupState.STABLE, now_ms)


_U16 = struct.Struct(">h")
_U32 = struct.Struct(">i")


def consumer_topics(metadata: bytes) -> set[str] | None:
    """The topics of a ConsumerProtocolSubscription (any version: the topic list comes first), or None when
    the bytes do not parse."""
    try:
        pos = 2
        (count,) = _U32.unpack_from(metadata, pos)
        pos += 4
        if count < 0 or count > len(metadata):
            return None
        topics = set()
        for _ in range(count):
            (n,) = _U16.unpack_from(metadata, pos)
            pos += 2
            if n < 0 or pos + n > len(metadata):
                return None
            topics.add(metadata[pos:pos + n].decode())
            pos += n
    except (struct.error, UnicodeDecodeError):
        return None
    return topics
