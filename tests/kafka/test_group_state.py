"""The classic group rebalance state machine, driven with an injected clock (no server, no store)."""

from __future__ import annotations

import random

import pytest
from kio.schema.errors import ErrorCode

from s3stream.apps.kafka.groups.codec import (
    GroupMetadataRecord,
    MemberRecord,
    OffsetCommitRecord,
    decode_group_metadata,
    decode_key,
    decode_offset_commit,
    encode_group_metadata,
    encode_group_metadata_key,
    encode_offset_commit,
    encode_offset_key,
)
from s3stream.apps.kafka.groups.member import JoinRequest, JoinResult, SyncResult
from s3stream.apps.kafka.groups.offsets_log import java_string_hash, partition_for
from s3stream.apps.kafka.groups.state import Group, GroupSettings, GroupState, consumer_topics
from s3stream.base.errors import CorruptData

SESSION = 1_000
REBALANCE = 5_000
DELAY = 100
SETTINGS = GroupSettings(initial_rebalance_delay_ms=DELAY, min_session_timeout_ms=100, max_session_timeout_ms=60_000)
RANGE = (("range", b"r-meta"),)


class Harness:
    """A group plus the replies it has handed out, by ticket."""

    def __init__(self, settings: GroupSettings = SETTINGS) -> None:
        self.now = 0
        self.group = Group("g", settings, self.now)
        self.replies: dict[int, JoinResult | SyncResult] = {}
        self.persisted = 0
        self._tickets = 0
        self._ids = 0

    def _run(self, fx) -> None:
        for ticket, result in fx.replies:
            assert ticket not in self.replies, "a ticket is answered once"
            self.replies[ticket] = result
        self.persisted += fx.persist

    def join(self, member_id: str = "", *, instance: str | None = None, protocols=RANGE, session: int = SESSION,
             rebalance: int = REBALANCE, require_known: bool = False, protocol_type: str = "consumer") -> int:
        self._tickets += 1
        self._ids += 1
        req = JoinRequest(member_id, instance, "client", "/127.0.0.1", session, rebalance, protocol_type,
                          tuple(protocols), require_known, f"m{self._ids}")
        self._run(self.group.join(self.now, self._tickets, req))
        return self._tickets

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None,
             instance: str | None = None) -> int:
        self._tickets += 1
        self._run(self.group.sync(self.now, self._tickets, member_id, instance, generation, "consumer", None,
                                  assignments or {}))
        return self._tickets

    def heartbeat(self, member_id: str, generation: int, instance: str | None = None) -> ErrorCode:
        return self.group.heartbeat(self.now, member_id, instance, generation)

    def leave(self, *members: tuple[str, str | None]) -> list[ErrorCode]:
        errors, fx = self.group.leave(self.now, members)
        self._run(fx)
        return errors

    def advance(self, ms: int) -> None:
        """Move time forward, firing every timer on the way at its own deadline (as the loop would)."""
        target = self.now + ms
        while (due := self.group.next_deadline()) is not None and due <= target:
            self.now = max(self.now, due)
            self._run(self.group.tick(self.now))
        self.now = target

    def result(self, ticket: int) -> JoinResult | SyncResult | None:
        return self.replies.get(ticket)

    def joined(self, ticket: int) -> JoinResult:
        r = self.replies[ticket]
        assert isinstance(r, JoinResult)
        return r

    def synced(self, ticket: int) -> SyncResult:
        r = self.replies[ticket]
        assert isinstance(r, SyncResult)
        return r


def stable_pair(h: Harness) -> tuple[str, str, int]:
    """Two dynamic members, joined and synced: (leader, follower, generation)."""
    a, b = h.join(), h.join()
    h.advance(DELAY)
    assert h.result(a) is None  # the second member arrived within the initial delay: it is extended once
    h.advance(DELAY)
    ja, jb = h.joined(a), h.joined(b)
    assert ja.error == jb.error == ErrorCode.none
    assert ja.generation_id == jb.generation_id == 1
    leader = ja.leader
    follower = jb.member_id if leader == ja.member_id else ja.member_id
    gen = ja.generation_id
    s_f = h.sync(follower, gen)
    assert h.result(s_f) is None  # waits for the leader's assignment
    s_l = h.sync(leader, gen, {leader: b"A", follower: b"B"})
    assert h.synced(s_l).assignment == b"A"
    assert h.synced(s_f).assignment == b"B"
    assert h.group.state is GroupState.STABLE
    return leader, follower, gen


def test_member_id_required_then_join_sync_heartbeat() -> None:
    h = Harness()
    t = h.join(require_known=True)
    r = h.joined(t)
    assert r.error == ErrorCode.member_id_required and r.member_id == "m1"
    assert h.group.state is GroupState.EMPTY and "m1" in h.group.pending
    t = h.join("m1", require_known=True)
    assert h.result(t) is None and h.group.state is GroupState.PREPARING_REBALANCE
    h.advance(DELAY - 1)
    assert h.result(t) is None  # group.initial.rebalance.delay.ms
    h.advance(1)
    r = h.joined(t)
    assert (r.error, r.member_id, r.generation_id, r.leader, r.protocol_name) == (ErrorCode.none, "m1", 1, "m1",
                                                                                   "range")
    assert [(m.member_id, m.metadata) for m in r.members] == [("m1", b"r-meta")]
    assert h.group.state is GroupState.COMPLETING_REBALANCE
    assert h.heartbeat("m1", 1) == ErrorCode.none
    s = h.sync("m1", 1, {"m1": b"assignment"})
    assert h.synced(s) == SyncResult(ErrorCode.none, "consumer", "range", b"assignment")
    assert h.group.state is GroupState.STABLE and h.persisted == 1
    assert h.heartbeat("m1", 1) == ErrorCode.none
    assert h.heartbeat("m1", 0) == ErrorCode.illegal_generation
    assert h.heartbeat("nobody", 1) == ErrorCode.unknown_member_id


def test_unclaimed_pending_member_expires() -> None:
    h = Harness()
    h.join(require_known=True)
    assert h.group.pending
    h.advance(SESSION)
    assert not h.group.pending and h.group.next_deadline() is None


def test_only_the_leader_gets_the_members_and_followers_wait_for_its_assignment() -> None:
    h = Harness()
    leader, follower, gen = stable_pair(h)
    assert h.heartbeat(leader, gen) == h.heartbeat(follower, gen) == ErrorCode.none
    assert h.group.generation == gen


def test_new_member_triggers_rebalance_and_old_members_are_told_by_heartbeat() -> None:
    h = Harness()
    leader, follower, gen = stable_pair(h)
    t = h.join()
    assert h.group.state is GroupState.PREPARING_REBALANCE and h.result(t) is None
    assert h.heartbeat(follower, gen) == ErrorCode.rebalance_in_progress
    # a SyncGroup during the join phase is refused
    assert h.synced(h.sync(follower, gen)).error == ErrorCode.rebalance_in_progress
    # an old member rejoins; the leader rejoins: everyone is in, so the join completes at once
    tf = h.join(follower)
    tl = h.join(leader)
    results = [h.joined(x) for x in (t, tf, tl)]
    assert {r.generation_id for r in results} == {gen + 1}
    assert {r.error for r in results} == {ErrorCode.none}
    assert sum(1 for r in results if r.members) == 1  # only the leader
    assert len(h.joined(tl).members) == 3


def test_session_expiry_removes_a_silent_member_and_rebalances() -> None:
    h = Harness()
    leader, follower, gen = stable_pair(h)
    waited = 0
    while follower in h.group.members:  # the leader heartbeats, the follower is silent
        h.advance(SESSION // 4)
        waited += SESSION // 4
        assert h.heartbeat(leader, gen) == (ErrorCode.none if follower in h.group.members
                                            else ErrorCode.rebalance_in_progress)
    assert SESSION <= waited <= SESSION + SESSION // 4
    assert h.group.state is GroupState.PREPARING_REBALANCE
    assert h.heartbeat(leader, gen) == ErrorCode.rebalance_in_progress
    t = h.join(leader)
    r = h.joined(t)  # the only member rejoined: completes at once
    assert r.generation_id == gen + 1 and [m.member_id for m in r.members] == [leader]


def test_rebalance_timeout_removes_members_that_do_not_rejoin() -> None:
    h = Harness()
    leader, follower, gen = stable_pair(h)
    tl = h.join(leader)  # the leader rejoins (forces a rebalance); the follower never does but keeps heartbeating
    assert h.result(tl) is None
    step = SESSION // 2
    waited = 0
    while h.result(tl) is None:
        h.advance(step)
        waited += step
        h.heartbeat(follower, gen)
    assert waited >= REBALANCE
    r = h.joined(tl)
    assert r.generation_id == gen + 1 and [m.member_id for m in r.members] == [leader]
    assert follower not in h.group.members
    assert h.heartbeat(follower, gen) == ErrorCode.unknown_member_id


def test_sync_timeout_removes_members_that_never_sync() -> None:
    h = Harness()
    a, b = h.join(), h.join()
    h.advance(2 * DELAY)
    leader = h.joined(a).leader
    other = h.joined(b).member_id if leader == h.joined(a).member_id else h.joined(a).member_id
    s = h.sync(leader, 1, {leader: b"x"})
    assert h.synced(s).error == ErrorCode.none and h.group.state is GroupState.STABLE
    for _ in range(10):  # the other member heartbeats but never sends SyncGroup
        h.advance(REBALANCE // 8)
        h.heartbeat(leader, 1)
        h.heartbeat(other, 1)
    assert other not in h.group.members
    assert h.group.state is GroupState.PREPARING_REBALANCE


def test_leave_rebalances_and_the_last_leave_empties_the_group() -> None:
    h = Harness()
    leader, follower, gen = stable_pair(h)
    assert h.leave((leader, None)) == [ErrorCode.none]
    assert h.group.leader == follower and h.group.state is GroupState.PREPARING_REBALANCE
    assert h.heartbeat(follower, gen) == ErrorCode.rebalance_in_progress
    t = h.join(follower)
    assert h.joined(t).generation_id == gen + 1 and h.joined(t).leader == follower
    h.sync(follower, gen + 1, {follower: b"all"})
    persisted = h.persisted
    assert h.leave((follower, None), ("ghost", None)) == [ErrorCode.none, ErrorCode.unknown_member_id]
    assert h.group.state is GroupState.EMPTY and h.group.generation == gen + 2
    assert h.persisted == persisted + 1  # the Empty generation is written
    assert h.group.next_deadline() is None


def test_leave_answers_a_waiting_join_with_unknown_member_id() -> None:
    h = Harness()
    leader, _follower, _gen = stable_pair(h)
    tl = h.join(leader)
    assert h.result(tl) is None
    h.leave((leader, None))
    assert h.joined(tl).error == ErrorCode.unknown_member_id


def test_generation_fencing_of_sync_heartbeat_and_commit() -> None:
    h = Harness()
    leader, follower, gen = stable_pair(h)
    h.join()  # a third member: generation gen+1 will follow
    h.join(leader)
    h.join(follower)
    assert h.group.generation == gen + 1
    assert h.synced(h.sync(follower, gen)).error == ErrorCode.illegal_generation
    assert h.heartbeat(follower, gen) == ErrorCode.illegal_generation
    assert h.group.validate_commit(h.now, follower, None, gen) == ErrorCode.illegal_generation
    # CompletingRebalance: the right generation still cannot commit until it has its assignment
    assert h.group.validate_commit(h.now, follower, None, gen + 1) == ErrorCode.rebalance_in_progress
    h.sync(leader, gen + 1, {})
    assert h.group.validate_commit(h.now, follower, None, gen + 1) == ErrorCode.none
    # only members commit to a live group
    assert h.group.validate_commit(h.now, "", None, -1) == ErrorCode.unknown_member_id


def test_simple_commits_are_allowed_while_the_group_is_empty() -> None:
    h = Harness()
    assert h.group.validate_commit(h.now, "", None, -1) == ErrorCode.none
    assert h.group.validate_commit(h.now, "someone", None, 3) == ErrorCode.unknown_member_id


def test_static_member_rejoins_without_rebalance_and_the_old_id_is_fenced() -> None:
    h = Harness()
    ta = h.join(instance="ia")
    tb = h.join(instance="ib")
    h.advance(2 * DELAY)
    ra, rb = h.joined(ta), h.joined(tb)
    gen = ra.generation_id
    assert ra.leader == ra.member_id  # the first member leads
    h.sync(rb.member_id, gen, instance="ib")
    h.sync(ra.member_id, gen, {ra.member_id: b"A", rb.member_id: b"B"}, instance="ia")
    assert h.group.state is GroupState.STABLE
    # ib restarts: it joins with no member id and its instance id
    t = h.join("", instance="ib")
    r = h.joined(t)
    assert r.error == ErrorCode.none and r.generation_id == gen and r.member_id != rb.member_id
    assert r.leader == ra.member_id and r.members == ()
    assert h.group.state is GroupState.STABLE and h.group.generation == gen
    s = h.sync(r.member_id, gen, instance="ib")
    assert h.synced(s).assignment == b"B"  # its previous assignment
    assert h.heartbeat(ra.member_id, gen, "ia") == ErrorCode.none  # the others never see a rebalance
    # the old incarnation is fenced
    assert h.heartbeat(rb.member_id, gen, "ib") == ErrorCode.fenced_instance_id
    assert h.joined(h.join(rb.member_id, instance="ib")).error == ErrorCode.fenced_instance_id
    assert h.group.validate_commit(h.now, rb.member_id, "ib", gen) == ErrorCode.fenced_instance_id


def test_static_leader_restart_keeps_the_old_leader_id_in_its_answer() -> None:
    h = Harness()
    ta = h.join(instance="ia")
    h.advance(DELAY)
    ra = h.joined(ta)
    h.sync(ra.member_id, 1, {ra.member_id: b"A"}, instance="ia")
    r = h.joined(h.join("", instance="ia"))
    assert r.generation_id == 1 and r.leader == ra.member_id != r.member_id
    assert h.group.leader == r.member_id  # the group itself follows the new id


def test_static_member_changing_the_chosen_protocol_triggers_a_rebalance() -> None:
    h = Harness()
    both = (("range", b""), ("roundrobin", b""))
    ta, tb = h.join(instance="ia", protocols=both), h.join(instance="ib", protocols=both)
    h.advance(2 * DELAY)
    ra, rb = h.joined(ta), h.joined(tb)
    h.sync(rb.member_id, 1, instance="ib")
    h.sync(ra.member_id, 1, {}, instance="ia")
    assert h.group.protocol_name == "range"
    t = h.join("", instance="ib", protocols=(("roundrobin", b""),))
    assert h.result(t) is None and h.group.state is GroupState.PREPARING_REBALANCE
    h.join(ra.member_id, instance="ia", protocols=both)
    assert h.joined(t).protocol_name == "roundrobin" and h.joined(t).generation_id == 2


def test_static_members_that_miss_a_rebalance_stay_in_the_group() -> None:
    h = Harness()
    ta, tb = h.join(instance="ia"), h.join(instance="ib", rebalance=0)
    h.advance(2 * DELAY)
    ra, rb = h.joined(ta), h.joined(tb)
    h.sync(rb.member_id, 1, instance="ib")
    h.sync(ra.member_id, 1, {}, instance="ia")
    h.leave((ra.member_id, "ia"))  # ia leaves: ib must rejoin, but stays silent
    assert h.group.state is GroupState.PREPARING_REBALANCE
    h.advance(1)  # ib's rebalance timeout is 0: the join ends, ib (static) is kept, nobody leads: it waits on
    assert rb.member_id in h.group.members and h.group.state is GroupState.PREPARING_REBALANCE
    h.advance(SESSION)  # ib's session runs out: the group empties
    assert h.group.state is GroupState.EMPTY and h.group.generation == 2


def test_static_member_is_removed_by_instance_id() -> None:
    h = Harness()
    ta = h.join(instance="ia")
    h.advance(DELAY)
    ra = h.joined(ta)
    assert h.leave(("", "ia"), ("", "nope")) == [ErrorCode.none, ErrorCode.unknown_member_id]
    assert ra.member_id not in h.group.members and h.group.state is GroupState.EMPTY


def test_protocol_is_chosen_by_votes_and_must_be_common() -> None:
    h = Harness()
    t1 = h.join(protocols=(("roundrobin", b"1"), ("range", b"1")))
    t2 = h.join(protocols=(("range", b"2"), ("roundrobin", b"2")))
    t3 = h.join(protocols=(("range", b"3"), ("sticky", b"3"), ("roundrobin", b"3")))
    h.advance(2 * DELAY)
    assert {h.joined(t).protocol_name for t in (t1, t2, t3)} == {"range"}
    leader = next(h.joined(t) for t in (t1, t2, t3) if h.joined(t).members)
    assert sorted(m.metadata for m in leader.members) == [b"1", b"2", b"3"]
    bad = h.join(protocols=(("sticky", b""),))
    assert h.joined(bad).error == ErrorCode.inconsistent_group_protocol
    other_type = h.join(protocol_type="connect", protocols=(("range", b""),))
    assert h.joined(other_type).error == ErrorCode.inconsistent_group_protocol


def test_session_timeout_bounds() -> None:
    h = Harness()
    assert h.joined(h.join(session=99)).error == ErrorCode.invalid_session_timeout
    assert h.joined(h.join(session=60_001)).error == ErrorCode.invalid_session_timeout
    assert h.group.state is GroupState.EMPTY and not h.group.members


def test_initial_delay_extends_while_new_members_arrive_up_to_the_rebalance_timeout() -> None:
    h = Harness()
    first = h.join(rebalance=250)  # delay 100, then extensions from a budget of 250 - 100
    for at in (90, 190, 240):  # a new member within each window extends it: by 100, then by the last 50
        h.advance(at - h.now)
        h.join(rebalance=250)
        assert h.result(first) is None
    h.advance(250 - h.now - 1)
    assert h.result(first) is None
    h.advance(1)  # the budget is spent at the rebalance timeout, whoever is still arriving
    assert h.joined(first).generation_id == 1
    assert len(h.joined(first).members) == 4


def test_members_waiting_in_join_or_sync_are_not_expired_by_their_session() -> None:
    h = Harness()
    leader, follower, gen = stable_pair(h)
    tl = h.join(leader)  # the leader waits in JoinGroup, silent; the follower heartbeats
    for _ in range(6):
        h.advance(SESSION // 2)
        assert h.heartbeat(follower, gen) == ErrorCode.rebalance_in_progress
    assert leader in h.group.members and h.result(tl) is None
    tf = h.join(follower)
    assert h.joined(tl).generation_id == h.joined(tf).generation_id == gen + 1
    s = h.sync(follower, gen + 1)  # the follower waits in SyncGroup, silent; the leader heartbeats
    for _ in range(6):
        h.advance(SESSION // 2)
        assert h.heartbeat(leader, gen + 1) == ErrorCode.none
    assert follower in h.group.members and h.result(s) is None
    h.sync(leader, gen + 1, {follower: b"F"})
    assert h.synced(s).assignment == b"F"


def test_delete_only_when_empty() -> None:
    h = Harness()
    leader, follower, _gen = stable_pair(h)
    assert h.group.try_delete() == ErrorCode.non_empty_group
    h.leave((leader, None), (follower, None))
    assert h.group.try_delete() == ErrorCode.none and h.group.state is GroupState.DEAD
    assert h.group.try_delete() == ErrorCode.group_id_not_found
    assert h.joined(h.join()).error == ErrorCode.coordinator_not_available


def test_seeded_random_operations_answer_every_request_and_keep_invariants() -> None:
    """Whatever happens, every JoinGroup/SyncGroup gets exactly one answer once time moves on."""
    for seed in range(30):
        rng = random.Random(seed)
        h = Harness()
        known: list[tuple[str, str | None]] = []
        tickets: list[int] = []
        for _ in range(120):
            op = rng.random()
            gen = h.group.generation
            if op < 0.25 or not known:
                inst = rng.choice([None, "s1", "s2"])
                t = h.join(require_known=rng.random() < 0.5, instance=inst, rebalance=rng.choice([0, 50, REBALANCE]))
                tickets.append(t)
                r = h.result(t)
                if isinstance(r, JoinResult) and r.member_id:
                    known.append((r.member_id, inst))
            elif op < 0.45:
                mid, inst = rng.choice(known)
                tickets.append(h.join(mid, instance=inst))
            elif op < 0.65:
                mid, inst = rng.choice(known)
                tickets.append(h.sync(mid, gen, {m: b"x" for m, _ in known}, instance=inst))
            elif op < 0.8:
                mid, inst = rng.choice(known)
                h.heartbeat(mid, gen, inst)
            elif op < 0.87:
                h.leave(rng.choice(known))
            else:
                h.advance(rng.choice([10, 100, 500, 2_000]))
            g = h.group
            assert g.leader is None or g.leader in g.members
            assert set(g.static.values()) <= set(g.members)
            assert (g.state is GroupState.EMPTY) == (not g.members) or g.state is GroupState.PREPARING_REBALANCE
        h.advance(400_000)  # past every session, rebalance and new-member timeout
        for m in h.group.members.values():
            assert m.join_ticket is None and m.sync_ticket is None
        assert all(t in h.replies for t in tickets), f"seed {seed}: a request was never answered"
        assert h.group.state is GroupState.EMPTY


# -- __consumer_offsets records -------------------------------------------------------------------


def test_offset_commit_records_round_trip_in_kafkas_layout() -> None:
    key = encode_offset_key("grp", "topic", 7)
    assert key == b"\x00\x01\x00\x03grp\x00\x05topic\x00\x00\x00\x07"
    assert decode_key(key).group == "grp" and decode_key(key).partition == 7
    rec = OffsetCommitRecord(42, 3, "meta", 1_700_000_000_000)
    value = encode_offset_commit(rec)
    assert value[:2] == b"\x00\x03"  # value version 3
    assert decode_offset_commit(value) == rec
    expiring = OffsetCommitRecord(42, -1, "", 1_000, 5_000)
    assert encode_offset_commit(expiring)[:2] == b"\x00\x01"  # version 1 carries the expiry
    assert decode_offset_commit(encode_offset_commit(expiring)) == expiring
    # version 4 (flexible): compact string + empty tagged fields
    v4 = b"\x00\x04" + (9).to_bytes(8, "big") + (2).to_bytes(4, "big") + b"\x03ab" + (5).to_bytes(8, "big") + b"\x00"
    assert decode_offset_commit(v4) == OffsetCommitRecord(9, 2, "ab", 5)


def test_group_metadata_records_round_trip() -> None:
    rec = GroupMetadataRecord("consumer", 4, "range", "m1", 123, (
        MemberRecord("m1", "inst", "cid", "/10.0.0.1", 5_000, 1_000, b"sub", b"asg"),
        MemberRecord("m2", None, "cid", "/10.0.0.2", 5_000, 1_000, b"", b""),
    ))
    assert decode_group_metadata(encode_group_metadata(rec)) == rec
    assert decode_key(encode_group_metadata_key("g")).topic is None
    empty = GroupMetadataRecord("consumer", 5, None, None, 9, ())
    assert decode_group_metadata(encode_group_metadata(empty)) == empty


@pytest.mark.parametrize("data", [
    b"\x00\x05" + bytes(30),                        # a value version this server cannot read
    b"\x00\x03" + bytes(5),                         # truncated
    encode_offset_commit(OffsetCommitRecord(1, 1, "x", 1)) + b"\x00",  # trailing bytes
])
def test_unreadable_offset_values_are_corrupt_data(data: bytes) -> None:
    with pytest.raises(CorruptData):
        decode_offset_commit(data)


def test_unknown_key_types_are_corrupt_data() -> None:
    with pytest.raises(CorruptData):
        decode_key(b"\x00\x03\x00\x01g")
    with pytest.raises(CorruptData):
        decode_group_metadata(b"\x00\x03\x00\x08consumer")


def test_group_partition_is_javas_string_hash() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -2147483648  # Integer.MIN_VALUE: abs() is 0
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00  # UTF-16 surrogates, as Java sees them


def test_consumer_subscription_topics() -> None:
    meta = b"\x00\x01" + b"\x00\x00\x00\x02" + b"\x00\x01a" + b"\x00\x02bc" + b"\xff\xff\xff\xff"
    assert consumer_topics(meta) == {"a", "bc"}
    assert consumer_topics(b"\x00") is None
