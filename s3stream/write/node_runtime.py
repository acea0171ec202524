"""A node as a writer: its local WAL, its claimed WAL namespace, its flush pipeline, its append drainer and
the partitions it writes (seen through :class:`NodeLog`, so this layer never imports the partitions above it).

Published WAL objects are announced to the partitions (``on_flushed``) and trim the local WAL; a clean
close writes the close marker (``walobject`` ``ends``) after the last upload.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from typing import Any, Protocol

from s3stream.base import layout
from s3stream.base.errors import PreconditionFailed
from s3stream.format.walentry import ClaimEntry, encode_entry
from s3stream.format.walobject import encode_fence_object
from s3stream.read.walscan import ChunkRef
from s3stream.write.context import StoreContext
from s3stream.write.drainer import AppendDrainer
from s3stream.write.localwal import WalResumer, append_failed
from s3stream.write.uploader import BufferedAppend, FlushedObject, Uploader
from wal import WalError, WalWriter

__all__ = ["NodeLog", "NodeRuntime"]

log = logging.getLogger(__name__)


class NodeLog(Protocol):
    """What the node needs of a partition it writes."""

    @property
    def log_id(self) -> str: ...
    def on_flushed(self, ref: ChunkRef, last_offset: int) -> None: ...
    def published_end(self) -> int | None: ...
    def oldest_pending_roll_seq(self) -> int | None: ...
    def has_pending_seals(self) -> bool: ...
    def seal_pending(self) -> None: ...
    def detach(self) -> None: ...


class NodeRuntime:
    """This process as a writer: WAL directory, WAL namespace, flush pipeline, written partitions."""

    def __init__(self, ctx: StoreContext, node_id: str, wal: WalWriter, fence_seq: int) -> None:
        self.ctx = ctx
        self.node_id = node_id
        self.wal = wal
        self.fence_seq = fence_seq
        self.append_lock = threading.Lock()
        self.wal_resumer = WalResumer(self)
        s = ctx.settings
        background = s.background == "threads"  # manual: no thread of ours; the caller runs the steps
        # writes queued appends (s3stream.write.drainer)
        self.drainer = AppendDrainer(node_id, ctx.clock, background=background,
                                     disk_step=None if wal.threaded else wal.step)
        self._logs: dict[str, NodeLog] = {}
        self._logs_lock = threading.Lock()
        self.uploader = Uploader(ctx.objstore, node_id=node_id, first_seq=fence_seq + 1,
                                 flush_interval_ms=s.flush_interval_ms, flush_bytes=s.flush_bytes,
                                 buffer_bytes=s.buffer_bytes, clock=ctx.clock, ids=ctx.ids,
                                 crash_points=ctx.crash, on_flushed=self._on_flushed, trim_local=self._trim_local,
                                 stale_after_s=max(1.0, s.orphan_min_age_ms / 6000.0),
                                 upload_concurrency=s.upload_concurrency, max_block_ms=s.max_block_ms,
                                 retry_backoff_ms=s.upload_retry_backoff_ms,
                                 retry_backoff_max_ms=s.upload_retry_backoff_max_ms, background=background)

    def drain_inline(self) -> None:
        """With ``background=manual``: write the queued appends in this thread (no drainer thread would)."""
        if self.ctx.settings.background == "manual":
            self.drainer.wait_idle()

    def settle_inline(self, future: Future[Any], *, ack_s3: bool) -> None:
        """With ``background=manual``: run the steps a blocking append waits for, here (the drain round, the
        local WAL's write and fsync; for ``ack=s3`` the flush too)."""
        if future.done() or self.ctx.settings.background != "manual":
            return
        self.drainer.wait_idle()
        if ack_s3:
            self.uploader.settle(future)
        if not self.wal.threaded:  # (a producer's duplicate follows its original, which may await either)
            while not future.done() and self.wal.step():
                pass
        if not future.done():
            self.uploader.settle(future)

    def void_local_entries(self, log_id: str, base_offset: int) -> None:
        """Before this node takes ``log_id`` over from another node (whose records end at ``base_offset``): a claim
        entry in the local WAL, durable before the claim commits, so that no recovery replays the entries of the
        log this node wrote in an earlier epoch (the other node has written those offsets since: replaying them
        would refuse the open, or worse, bring records back over acknowledged ones)."""
        payload = encode_entry(ClaimEntry(log_id, base_offset))
        try:
            self.wal.append(payload)
        except WalError as exc:
            raise append_failed(self, exc) from exc

    def register(self, plog: NodeLog) -> None:
        with self._logs_lock:
            self._logs[plog.log_id] = plog

    def logs(self) -> list[NodeLog]:
        with self._logs_lock:
            return list(self._logs.values())

    def _trim_local(self, upto_seq: int) -> None:
        """Trim the local WAL after a publish, short of any roll entry whose segment is not sealed yet (a
        restart after a crash replays it, so recovery claims that partition and seals the segment); a
        failure only delays the trim (the next one covers more)."""
        floors = [seq for plog in self.logs() if (seq := plog.oldest_pending_roll_seq()) is not None]
        if floors:
            upto_seq = min(upto_seq, min(floors) - 1)
        try:
            self.wal.trim(upto_seq)
        except WalError as exc:
            log.warning("node %s: trimming the local WAL failed, it is retried at the next publish: %s",
                        self.node_id, exc)

    def _on_flushed(self, obj: FlushedObject, items: list[BufferedAppend]) -> None:
        self.ctx.walindex.put(obj.key, obj.index)
        self.ctx.metrics.flushed(obj.object_size, len(obj.index.chunks))
        with self._logs_lock:
            logs = dict(self._logs)
        for chunk in obj.index.chunks:
            plog = logs.get(chunk.log_id)
            if plog is not None:
                plog.on_flushed(ChunkRef(obj.key, obj.seq, chunk), chunk.last_offset)

    def close(self) -> None:
        try:
            self.drainer.close(self.ctx.settings.commit_timeout_ms / 1000.0)
            self.uploader.close(self.ctx.settings.commit_timeout_ms / 1000.0)
            self._write_close_marker()
        finally:
            for plog in self.logs():
                plog.detach()
            self.wal.close()

    def _write_close_marker(self) -> None:
        """After the last upload: a fence object recording where each log's records end, so a WAL object
        deleted later (even the newest) reads as lost data instead of a shorter log (walscan)."""
        rt = self.ctx
        ends = [(plog.log_id, end) for plog in self.logs() if (end := plog.published_end()) is not None]
        if not ends or rt.crash.crashed:
            return
        seq = self.uploader.lowest_unpublished_seq
        body = encode_fence_object(node_id=self.node_id, seq=seq, created_ms=rt.clock.now_ms(),
                                   committed=(self.fence_seq, seq), ends=ends)
        try:
            rt.objstore.put(layout.wal_key(self.node_id, seq), body, if_none_match=True)
        except PreconditionFailed:
            log.info("node %s: no close marker, another process fenced it", self.node_id)
