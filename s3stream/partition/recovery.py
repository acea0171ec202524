"""Replaying a partition's local WAL entries after a restart (the engine's recovery drives it, log by log).

The recovering node claims the partition once (:func:`recovery_end` says where its log ends in the bucket),
then replays, in local WAL order, the entries the bucket lacks: an append entry is buffered again for the
flush pipeline and the tail cache (its idempotent producers' batches into the producer state), a roll entry
rolls the active segment (sealed at the end of recovery).
An entry wholly below the log end is skipped; one starting past it is CorruptData (records the bucket and
the replayed entries both lack).
"""

from __future__ import annotations

import pyarrow.compute as pc

from s3stream.base.errors import CorruptData
from s3stream.base.records import batch_nbytes
from s3stream.format.walentry import AppendEntry, RollEntry
from s3stream.partition.state import LogState
from s3stream.write.node_runtime import NodeRuntime
from s3stream.write.uploader import BufferedAppend

__all__ = ["recover_entry", "recovery_end"]


def recovery_end(state: LogState, node: NodeRuntime) -> int:
    """Claim the partition for the recovering ``node`` (once) and return where its log ends in the bucket."""
    with state.lock:
        return state.ensure_writer(node).leo


def recover_entry(state: LogState, node: NodeRuntime, entry: AppendEntry | RollEntry, local_seq: int) -> bool:
    """Replay one local WAL entry; False when the bucket already holds it (see the module docstring)."""
    with state.lock:
        w = state.ensure_writer(node)
        if isinstance(entry, RollEntry):
            if entry.base_offset == w.active.base_offset or entry.base_offset != w.leo:
                return False
            w.roll(state.new_segment(state.config(), state.host.clock.now_ms()))
            return True
        batch = entry.batch
        if batch.num_rows == 0:
            return False
        base = int(batch.column(0)[0].as_py())
        last = int(batch.column(0)[-1].as_py())
        if last < w.leo:
            return False
        if base != w.leo:
            raise CorruptData(f"local WAL entry {local_seq} of {state.log_id} starts at offset {base} but the "
                              f"log ends at {w.leo}: records are missing", source=state.log_id)
        nbytes = batch_nbytes(batch)
        max_ts = int(pc.max(batch.column("timestamp")).as_py())
        with node.append_lock:
            node.uploader.add(BufferedAppend(state.log_id, batch, nbytes, local_seq, (), producers=entry.producers))
        w.active.add(nbytes, batch.num_rows, max_ts, last + 1)
        w.add_batch(batch, base, last, nbytes)
        if entry.producers:
            w.record_producers(entry.producers, state.host.clock.now_ms())
        return True
