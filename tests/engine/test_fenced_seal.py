"""A fenced writer's seal of a segment the new writer already sealed and the cleaner compacted (sim seed 9606)."""

from __future__ import annotations

from pathlib import Path

import pytest

from s3stream import Fenced, Record

from .helpers import open_mem, read_all


def test_fenced_writer_does_not_seal_the_new_writers_compacted_segment(mem_url: str, tmp_path: Path) -> None:
    a = open_mem(mem_url, tmp_path, wal="a", background="manual", flush_interval_ms=60_000)
    b = open_mem(mem_url, tmp_path, wal="b", background="manual", flush_interval_ms=60_000)
    try:
        a.create_topic("c", 1, {"cleanup.policy": "compact", "segment.bytes": "300",
                                "min.cleanable.dirty.ratio": "0.01"})
        la = a.partition("c", 0)
        for i in range(8):  # size-triggered rolls: A holds rolled segments it has not sealed
            la.append([Record(b"k%d" % (i % 2), b"v%d" % i)])
        a.flush()  # A's records are in its WAL objects, unsealed

        lb = b.partition("c", 0)
        lb.append([Record(b"k0", b"b0")])  # B takes over: its claim seals A's records
        b.flush()
        cleaned = a.cleaner.run_pass().cleaned  # A's cleaner: A's process now sees B's segments
        assert cleaned is not None and cleaned.records_kept < cleaned.records_read

        # A's next seal reads offsets that are now B's compacted segments: it must learn it was fenced
        # (before reading them), not report the compacted segment as a seal that lost records
        with pytest.raises(Fenced):
            la.roll()
        assert [r.value for r in read_all(lb)][-1] == b"b0"
    finally:
        a.close()
        b.close()
