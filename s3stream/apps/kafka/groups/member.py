"""One member of a classic consumer group, and the replies the group state machine hands back.

A *ticket* names a JoinGroup or SyncGroup request that is waiting for the rebalance: the state machine
keeps tickets on the members and returns ``(ticket, result)`` pairs when they complete, so it never holds
a future or a socket (the coordinator maps tickets to futures; a simulator to whatever it likes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

__all__ = ["JoinRequest", "JoinResult", "JoinedMember", "Member", "SyncResult", "Ticket"]

Ticket = int


@dataclass(frozen=True, slots=True)
class JoinedMember:
    """What the leader learns about each member: its ids and its metadata for the chosen protocol."""

    member_id: str
    instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[JoinedMember, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class JoinRequest:
    """A JoinGroup request as the state machine sees it (every version normalised).

    ``new_member_id`` is the id the group gives this member if it needs one (the caller draws it, so the
    state machine stays free of randomness); ``require_known_member_id`` is KIP-394 (JoinGroup v4+).
    """

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    require_known_member_id: bool
    new_member_id: str


@dataclass(slots=True)
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    #: the JoinGroup / SyncGroup waiting for the rebalance, if any
    join_ticket: Ticket | None = None
    sync_ticket: Ticket | None = None
    #: a member that has not yet completed a join: it is bounded by the new-member join timeout
    is_new: bool = False
    #: when the member expires unless it heartbeats (or joins/syncs) again
    deadline_ms: int = 0

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""

    def matches(self, protocols: Sequence[tuple[str, bytes]]) -> bool:
        """Same protocols, in the same order, with the same metadata (a rejoin that changes nothing)."""
        return tuple(protocols) == self.protocols

    def vote(self, candidates: set[str]) -> str:
        """This member's most preferred protocol among those every member supports."""
        for name in self.protocol_names:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def expiry_ms(self) -> int | None:
        """When the session check applies: a member waiting in a join or a sync is bounded by the rebalance
        instead (Kafka's ``hasSatisfiedHeartbeat``), except a new member, bounded by its join timeout."""
        if self.is_new or (self.join_ticket is None and self.sync_ticket is None):
            return self.deadline_ms
        return None
