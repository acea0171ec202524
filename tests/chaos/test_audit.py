"""The chaos harness's own logic, without processes: the side log and the audit's rules."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from s3stream.testing.chaos.audit import ClaimInfo, ReadRow, Retention, audit_partition
from s3stream.testing.chaos.sidelog import ChaosRandom, Event, SideLog, describe, digest, make_records, read_events


def _append(writer: str, inc: int, aid: int, *, part: int = 0, n: int = 2, ack: str = "wal", key: int | None = None,
            ts: int = 1000, tombstone: bool = False) -> tuple[Event, list[tuple[str, bytes, str, bool]]]:
    """An intent event and its records ``(ident, key, digest, tombstone)``."""
    recs = []
    for i in range(n):
        ident = f"{writer}.{inc}.{aid}.{i}"
        k = b"k%04d" % (aid if key is None else key)
        value = None if tombstone else ident.encode()
        recs.append([ident, k.hex(), digest(k, value), ts, tombstone])
    ev = Event("intent", {"w": writer, "inc": inc, "a": aid, "p": part, "ack": ack, "recs": recs})
    return ev, [(r[0], bytes.fromhex(r[1]), r[2], r[4]) for r in recs]


def _ack(intent: Event, offset: int, ms: int = 2000) -> Event:
    f = intent.fields
    return Event("ack", {"w": f["w"], "inc": f["inc"], "a": f["a"], "p": f["p"], "o": offset,
                         "last": offset + len(f["recs"]) - 1, "ack": f["ack"], "ms": ms})


def _rows(base: int, recs: list[tuple[str, bytes, str, bool]]) -> list[ReadRow]:
    return [ReadRow(base + i, ident, key, dig, tomb) for i, (ident, key, dig, tomb) in enumerate(recs)]


def test_side_log_round_trip_skips_only_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "side.jsonl"
    log = SideLog(path)
    records = make_records(ChaosRandom(7, "t"), "w.0.1", 3, keys=4, now_ms=123)
    log.write("intent", w="w", inc=0, a=1, p=0, ack="wal", recs=describe(records))
    log.write("ack", w="w", inc=0, a=1, p=0, o=5, last=7, ack="wal", ms=9)
    log.close()
    with path.open("a") as fh:
        fh.write('{"k":"ack","w":"w","inc"')  # killed mid-line
    events = list(read_events(path))
    assert [e.kind for e in events] == ["intent", "ack"]
    assert [r.ident for r in events[0].records()] == ["w.0.1.0", "w.0.1.1", "w.0.1.2"]
    assert [r.digest for r in events[0].records()] == [digest(r.key, r.value) for r in records]
    path.write_text('{"k":"ack"\n{"k":"exit"}\n')
    with pytest.raises(ValueError, match="line 1"):
        list(read_events(path))


def test_records_are_reproducible_from_the_seed() -> None:
    a = make_records(ChaosRandom(3, "w", 1), "p", 5, keys=8, now_ms=1, tombstone_ratio=0.5)
    b = make_records(ChaosRandom(3, "w", 1), "p", 5, keys=8, now_ms=1, tombstone_ratio=0.5)
    assert a == b and len({r.headers for r in a}) == 5


def test_a_complete_read_passes_and_unacknowledged_records_may_be_there() -> None:
    i1, r1 = _append("w", 0, 1)
    i2, r2 = _append("w", 0, 2)  # never acknowledged, but written
    res = audit_partition(0, [_ack(i1, 0)], [i1, i2], _rows(0, r1) + _rows(2, r2), 0, 4)
    assert res.ok and res.checked_records == 2 and res.read_records == 4


def test_lost_duplicated_changed_and_moved_records_are_counted() -> None:
    i1, r1 = _append("w", 0, 1)
    i2, r2 = _append("w", 0, 2)
    acks = [_ack(i1, 0), _ack(i2, 2)]
    lost = audit_partition(0, acks, [i1, i2], _rows(0, r1), 0, 2)
    assert lost.lost == 3  # two records, and the log end below them
    dup = audit_partition(0, acks, [i1, i2], _rows(0, r1) + _rows(2, r2) + _rows(4, r2[:1]), 0, 5)
    assert dup.duplicated == 1
    bad = ReadRow(2, r2[0][0], r2[0][1], "0" * 16, False)
    changed = audit_partition(0, acks, [i1, i2], [*_rows(0, r1), bad, *_rows(3, r2[1:])], 0, 4)
    assert changed.changed == 1
    moved = audit_partition(0, acks, [i1, i2], _rows(0, r1) + _rows(3, r2), 0, 5)
    assert moved.changed == 2 and not moved.ok
    unknown = audit_partition(0, acks[:1], [i1], [*_rows(0, r1), ReadRow(2, "x.0.9.0", b"k", "00", False)], 0, 3)
    assert unknown.changed == 1


def test_an_offset_acknowledged_twice_and_a_log_end_moving_back_are_failures() -> None:
    i1, r1 = _append("w", 0, 1)
    i2, _ = _append("w", 1, 1)
    res = audit_partition(0, [_ack(i1, 0), _ack(i2, 0)], [i1, i2], _rows(0, r1), 0, 2, previous_leo=5)
    assert res.reused_offsets == 2 and res.log_end_back == 1


def test_settled_limits_what_a_read_during_the_run_must_hold() -> None:
    i1, _ = _append("w", 3, 1)
    res = audit_partition(0, [_ack(i1, 0)], [i1], [], 0, 0, settled=lambda w, inc, ack: inc < 3)
    assert res.ok and res.checked_records == 0


def test_ack_wal_records_past_another_nodes_claim_are_replaced_by_design() -> None:
    i1, _r1 = _append("A", 0, 1)  # A acknowledged 0..1 from its WAL; B claimed at 0 and wrote its own there
    i2, r2 = _append("B", 0, 1)
    claims = [ClaimInfo(1, "A", 0, 1000), ClaimInfo(5, "B", 0, 2500)]
    acks = [_ack(i1, 0, ms=2000), _ack(i2, 0, ms=3000)]
    res = audit_partition(0, acks, [i1, i2], _rows(0, r2), 0, 2, claims=claims)
    assert res.ok and res.replaced_by_design == 2
    # the same with ack=s3: it was in the bucket, so the new writer must have adopted it
    s1, _ = _append("A", 0, 1, ack="s3")
    res = audit_partition(0, [_ack(s1, 0, ms=2000), acks[1]], [s1, i2], _rows(0, r2), 0, 2, claims=claims)
    assert res.lost == 2
    # below the claim's end it was in the bucket: it must be there
    late = [ClaimInfo(1, "A", 0, 1000), ClaimInfo(5, "B", 2, 2500)]
    res = audit_partition(0, acks[:1], [i1, i2], _rows(0, r2), 0, 2, claims=late)
    assert res.lost == 2
    # after A claimed back, its new acknowledgements must stay
    back = [*claims, ClaimInfo(9, "A", 2, 4000)]
    i3, _r3 = _append("A", 1, 1)
    res = audit_partition(0, [*acks, _ack(i3, 2, ms=4500)], [i1, i2, i3], _rows(0, r2), 0, 2, claims=back)
    assert res.lost == 3 and res.replaced_by_design == 2


def test_nothing_may_resolve_after_the_writer_saw_fenced() -> None:
    i1, r1 = _append("A", 0, 1)
    fenced = [Event("fenced", {"w": "A", "inc": 0, "ms": 1500})]
    res = audit_partition(0, [_ack(i1, 0, ms=2000)], [i1], _rows(0, r1), 0, 2, fenced=fenced)
    assert res.acked_after_fenced == 1


def test_retention_may_remove_only_expired_records_below_the_log_start() -> None:
    old, _ = _append("w", 0, 1, ts=1000)
    new, r_new = _append("w", 0, 2, ts=9000)
    acks = [_ack(old, 0), _ack(new, 2)]
    ok = audit_partition(0, acks, [old, new], _rows(2, r_new), 2, 4,
                         retention=Retention(delete=True, cutoff_ms=5000))
    assert ok.ok and ok.removed_legitimately == 2
    early = audit_partition(0, acks, [old, new], [], 4, 4, retention=Retention(delete=True, cutoff_ms=5000))
    assert early.lost == 2
    none = audit_partition(0, acks, [old, new], _rows(2, r_new), 2, 4, retention=Retention(delete=True))
    assert none.lost == 2


def test_compaction_may_remove_only_superseded_records_and_tombstones() -> None:
    first, _ = _append("w", 0, 1, n=1, key=7)
    second, r2 = _append("w", 0, 2, n=1, key=7)
    other, r3 = _append("w", 0, 3, n=1, key=8)
    tomb, _ = _append("w", 0, 4, n=1, key=9, tombstone=True)
    acks = [_ack(first, 0), _ack(second, 1), _ack(other, 2), _ack(tomb, 3)]
    intents = [first, second, other, tomb]
    ok = audit_partition(0, acks, intents, _rows(1, r2) + _rows(2, r3), 0, 4, retention=Retention(compact=True))
    assert ok.ok and ok.removed_legitimately == 2
    latest_gone = audit_partition(0, acks, intents, _rows(2, r3), 0, 4, retention=Retention(compact=True))
    assert latest_gone.lost == 2  # the latest value, and the older one nothing supersedes in the log


def test_kill_at_sigkills_the_process_at_the_chosen_hit() -> None:
    code = ("from s3stream.testing.chaos.worker import KillAt\n"
            "k = KillAt('seal.after_segment_put', 1)\n"
            "k.hit('flush.before_put'); k.hit('seal.after_segment_put'); print('survived one', flush=True)\n"
            "k.hit('seal.after_segment_put'); print('survived two', flush=True)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, check=False)
    assert proc.returncode == -signal.SIGKILL
    assert proc.stdout.decode().split() == ["survived", "one"]
