"""Appends of one partition: the queue, its drain rounds, and the local WAL entries they write.

Every append (``append``, ``append_async``, ``append_arrow``) is validated in the caller's thread
(:mod:`.validate`) and queued here with its future. A *drain round* takes everything queued, assigns offsets
from the log end in queue order, applies the roll rules append by append (ROLL-1..4, exactly as if each came
alone), and writes each run of appends between rolls as ONE Arrow batch: one local WAL entry (after a roll
entry when a boundary was decided), one buffered append for the flush pipeline, one tail-cache batch. So
concurrent appends to a partition share a WAL entry and an fsync, and a one-record append costs no Arrow
call of its own. Rounds run one at a time per partition, and while ``MAX_IN_FLIGHT`` of its entries await
their fsync the next round waits for one (group commit at the partition: the appends arriving meanwhile
share the next entry); a round runs in the appending thread for a blocking ``append`` that may start one at
once, else on the node's drainer thread (:mod:`s3stream.write.drainer`), which the fsync that frees a slot
asks to go on.

Idempotent producers (:mod:`s3stream.base.producer`): a round with producer batches checks them first, in
queue order, against the writer's producer state (a fork of it, so a round that fails changes nothing), at
the same time as offsets are assigned, so one producer's pipelined batches are checked in the order sent.
A rejected batch's future fails (ProducerFenced, OutOfOrderSequence) and a duplicate's resolves with the
original offsets: at once when the original is acknowledged (or was written before this process), else
when the original's future resolves (with its error, if it fails: a duplicate of a failed original fails
as it did, until the original's records are in a committed WAL object); an ``ack=s3`` duplicate of an original
not yet in a committed WAL object that no ``ack=s3`` future awaits fails with StoreUnavailable (retriable:
it must not be acknowledged from the local WAL alone). Neither is written. The batches written
are recorded in the producer state once their entry is in the local WAL, and travel with it (the WAL entry
and the WAL object list them), which is what a restart or a takeover rebuilds the state from. Appends
without a producer cost one ``is None`` check.

Ack (each append's future): ``wal`` once its entry is fsynced (resolved on the WAL's fsync thread), ``s3``
once its WAL object is committed (on the flush pipeline's thread; StoreUnavailable after ``max.block.ms``).
A round that fails before its entry is written (fenced, closed, the claim failed, the local WAL refused it)
fails the appends not yet written, and nothing of them is in the log. Atomicity is per append: its records
are consecutive and in one WAL entry.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import pyarrow as pa

from s3stream.base.errors import Fenced, InternalError, S3StreamError, StoreUnavailable
from s3stream.base.futures import settle
from s3stream.base.producer import ProducerAppend
from s3stream.base.records import AppendResult
from s3stream.base.topic_config import TopicConfig
from s3stream.format.walentry import AppendEntry, RollEntry, encode_entry
from s3stream.partition.state import LogState
from s3stream.partition.validate import PreparedAppend, batch_of
from s3stream.partition.writer import WriterState
from s3stream.policy.roll import should_roll
from s3stream.write.drainer import AppendDrainer
from s3stream.write.localwal import append_failed
from s3stream.write.node_runtime import NodeRuntime
from s3stream.write.uploader import BufferedAppend
from wal import WalError

__all__ = ["GROUP_BYTES", "MAX_IN_FLIGHT", "Appender"]

log = logging.getLogger(__name__)

#: a round's appends share one WAL entry up to this many bytes (a larger append goes alone: no copy)
GROUP_BYTES = 256 << 10
#: a partition's WAL entries written and not yet fsynced before its next round waits for one (as the WAL's
#: own fsyncs in flight): appends arriving meanwhile queue up and share the next entry
MAX_IN_FLIGHT = 2


@dataclass(slots=True)
class _Queued:
    prepared: PreparedAppend
    ack_s3: bool
    future: Future[AppendResult]
    started: float
    node: NodeRuntime
    result: AppendResult | None = None
    on_wal: Callable[[AppendResult], None] | None = None


class Appender:
    """The append queue of one partition (thread-safe); see the module docstring."""

    def __init__(self, state: LogState) -> None:
        self._state = state
        self._cond = threading.Condition(threading.Lock())
        self._items: list[_Queued] = []
        self._draining = False  # a round runs or is requested: it takes whatever is queued
        self._in_flight = 0  # WAL entries written and not yet fsynced: at MAX_IN_FLIGHT the next round waits
        self._drainer: AppendDrainer | None = None  # while appends are queued or a round runs: it counts us busy
        self._sequenced = 0  # appends queued with a producer batch (a round with none skips the checks)
        #: producer appends written and not yet acknowledged, by base offset (a duplicate waits for its original)
        self._unacked: dict[int, _Queued] = {}
        #: base offsets of WAL entries written and not yet fsynced, oldest first: the high watermark is the
        #: first of them (the log end when there is none); insertion order is offset order (under st.lock)
        self._unsynced: dict[int, None] = {}
        self._watchers: list[Callable[[], None]] = []

    def high_watermark(self, log_end_offset: int) -> int:
        """The end of what a crash of this process cannot lose (see ``PartitionLog.high_watermark``)."""
        with self._cond:
            return next(iter(self._unsynced), log_end_offset)

    def watch(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` after each WAL entry of this partition is fsynced; returns the unsubscribe call."""
        with self._cond:
            self._watchers = [*self._watchers, callback]

        def stop() -> None:
            with self._cond:
                self._watchers = [w for w in self._watchers if w is not callback]
        return stop

    @property
    def log_id(self) -> str:
        return self._state.log_id

    def submit(self, node: NodeRuntime, prepared: PreparedAppend, *, ack_s3: bool, started: float,
               inline: bool, on_wal: Callable[[AppendResult], None] | None = None) -> Future[AppendResult]:
        """Queue a validated append; with ``inline``, run the round in this thread when one may start now.
        ``on_wal(result)`` runs once its entry is fsynced (see ``PartitionLog.append_arrow_async``)."""
        future: Future[AppendResult] = Future()
        future.set_running_or_notify_cancel()  # a queued append cannot be taken back
        with self._cond:
            self._items.append(_Queued(prepared, ack_s3, future, started, node, on_wal=on_wal))
            if prepared.producer is not None:
                self._sequenced += 1
            drainer = self._start_locked(node.drainer)
        if drainer is not None and (not inline or self.drain_once()):
            drainer.request(self)
        return future

    def _start_locked(self, drainer: AppendDrainer) -> AppendDrainer | None:
        """With appends queued: the drainer, when a round may start now (the caller runs or requests it)."""
        if self._drainer is None:
            self._drainer = drainer
            drainer.started()
        if self._draining or self._in_flight >= MAX_IN_FLIGHT:
            return None  # the round in progress, or the next entry's fsync, starts it
        self._draining = True
        return self._drainer

    def _idle_locked(self) -> None:
        if not self._items and not self._draining and self._drainer is not None:
            self._drainer.finished()
            self._drainer = None
            self._cond.notify_all()

    def wait_idle(self) -> None:
        """Wait until every append queued so far is written (in the local WAL and the flush pipeline)."""
        with self._cond:
            while self._drainer is not None:
                self._cond.wait(0.1)

    def drain_once(self) -> bool:
        """Write one round of queued appends; True when the next round may start at once (the caller runs it)."""
        with self._cond:
            items, self._items = self._items, []
            sequenced, self._sequenced = self._sequenced, 0
        try:
            if items:
                self._write(items, sequenced=sequenced > 0)
        except BaseException as exc:  # a simulated crash: nothing queued will be written
            with self._cond:
                rest, self._items = self._items, []
                self._draining = False
                self._idle_locked()
            _fail(rest, exc)
            raise
        with self._cond:
            more = bool(self._items) and self._in_flight < MAX_IN_FLIGHT
            self._draining = more
            self._idle_locked()
        return more

    def _entry_durable(self, done: Future[int], base: int) -> None:
        """A round's WAL entry is fsynced (or failed): the appends queued meanwhile may go (fsync thread)."""
        with self._cond:
            self._in_flight -= 1
            if done.exception() is None:  # a failed entry stops the node: the high watermark stays below it
                self._unsynced.pop(base, None)
            drainer = self._start_locked(self._drainer) if self._items and self._drainer is not None else None
            watchers = self._watchers
        if drainer is not None:
            drainer.request(self)
        for callback in watchers:
            try:
                callback()
            except Exception:
                log.exception("a high-watermark watcher of %s failed", self.log_id)

    # -- a round -------------------------------------------------------------------------------------

    def _write(self, items: list[_Queued], *, sequenced: bool) -> None:
        st = self._state
        node = items[0].node
        done = 0
        memory = 0
        rolled = False
        settled: list[tuple[_Queued, AppendResult | BaseException | Future[AppendResult]]] = []
        try:
            node.uploader.check()  # a stopped node (fenced, closing) claims nothing and writes nothing
            cfg = st.last_config()
            now = st.host.clock.now_ms()
            with st.lock:
                w = st.ensure_writer(node)
                if sequenced:
                    items = self._sequence(w, items, now, settled)
                while done < len(items):
                    end, nbytes, roll = self._write_group(node, w, cfg, now, items, done, sequenced=sequenced)
                    done, memory, rolled = end, memory + nbytes, rolled or roll
        except Exception as exc:  # noqa: BLE001 - every error reaches the appends' futures, typed
            _fail(items[done:], _typed(exc, self.log_id))
        except BaseException as exc:
            _fail(items[done:], exc)
            raise
        finally:
            if memory:
                st.host.note_memory(st.owner, memory)
            if rolled:
                st.host.request_seal(st.owner)
            for q, outcome in settled:
                _settle_outcome(q, outcome)

    def _sequence(self, w: WriterState, items: list[_Queued], now: int,
                  settled: list[tuple[_Queued, AppendResult | BaseException | Future[AppendResult]]]
                  ) -> list[_Queued]:
        """Check the round's producer batches in order (see the module docstring): the appends to write;
        the others go to ``settled`` with their outcome (an error, the original result, or its future)."""
        table = w.producers.fork()
        offset = w.leo
        accepted: list[_Queued] = []
        in_round: dict[int, _Queued] = {}
        for q in items:
            p = q.prepared
            batch = p.producer
            if batch is not None:
                try:
                    original = table.check(batch)
                except S3StreamError as exc:
                    settled.append((q, exc))
                    continue
                if original is not None:
                    pending = in_round.get(original.base_offset) or self._unacked.get(original.base_offset)
                    if pending is not None and pending.future.done() and original.last_offset < w.unflushed_from:
                        # an original that failed, yet whose records reached a committed WAL object: they are
                        # the log's, durable, and its duplicates get their offsets
                        self._unacked.pop(original.base_offset, None)
                        pending = None
                    if q.ack_s3 and original.last_offset >= w.unflushed_from and (pending is None
                                                                                   or not pending.ack_s3):
                        # its original is not in a committed WAL object, and nothing here waits for one
                        settled.append((q, StoreUnavailable(
                            f"{self.log_id}: the original of this duplicate batch (offsets {original.base_offset}.."
                            f"{original.last_offset}) is not in the object store yet; retry (ack=s3)")))
                        continue
                    settled.append((q, original if pending is None else pending.future))
                    continue
                table.record(ProducerAppend.of(batch, offset), now)
                in_round[offset] = q
            accepted.append(q)
            offset += p.count
        return accepted

    @staticmethod
    def _written(group: Sequence[_Queued]) -> tuple[ProducerAppend, ...]:
        """The producer batches of a group at their offsets (empty when it has none)."""
        out: list[ProducerAppend] = []
        for q in group:
            batch = q.prepared.producer
            if batch is not None:
                assert q.result is not None
                out.append(ProducerAppend.of(batch, q.result.base_offset))
        return tuple(out)

    def _track_unacked(self, group: Sequence[_Queued]) -> None:
        for q in group:
            if q.prepared.producer is not None and q.result is not None:
                self._unacked[q.result.base_offset] = q
                q.future.add_done_callback(functools.partial(self._acknowledged, q.result.base_offset))

    def _acknowledged(self, base_offset: int, done: Future[AppendResult]) -> None:
        # a failed original stays (until its records are in a committed WAL object, see _sequence): its records
        # may or may not be in the log, so a duplicate fails as it did, never taken for acknowledged
        if done.exception() is None:
            self._unacked.pop(base_offset, None)

    def _write_group(self, node: NodeRuntime, w: WriterState, cfg: TopicConfig, now: int, items: list[_Queued],
                     start: int, *, sequenced: bool) -> tuple[int, int, bool]:
        """Write ``items[start:end]`` as one WAL entry (after a roll entry when the first one rolls the segment);
        return ``end``, its bytes and whether it rolled. Changes nothing unless the entry was written."""
        base = w.leo
        first = items[start].prepared
        roll = should_roll(w.active.stats(), incoming_bytes=first.nbytes, incoming_max_ts=first.max_ts,
                           incoming_last_offset=base + first.count - 1, now_ms=now,
                           segment_bytes=cfg.segment_bytes, max_segment_ms=cfg.max_segment_ms)
        seg = self._state.new_segment(cfg, now) if roll else w.active.copy()
        end, offset, nbytes = start, base, 0
        while end < len(items):
            q = items[end]
            p = q.prepared
            if end > start and (nbytes + p.nbytes > GROUP_BYTES or should_roll(
                    seg.stats(), incoming_bytes=p.nbytes, incoming_max_ts=p.max_ts,
                    incoming_last_offset=offset + p.count - 1, now_ms=now, segment_bytes=cfg.segment_bytes,
                    max_segment_ms=cfg.max_segment_ms)):
                break
            seg.add(p.nbytes, p.count, p.max_ts, offset + p.count)
            q.result = AppendResult(offset, offset + p.count - 1)
            offset += p.count
            nbytes += p.nbytes
            end += 1
        group = items[start:end]
        batch = batch_of([q.prepared for q in group], base)
        producers = self._written(group) if sequenced else ()
        s3_future: Future[int] | None = Future() if any(q.ack_s3 for q in group) else None
        with self._cond:  # before the records are visible: the high watermark stays below them until fsynced
            self._unsynced[base] = None
        try:
            wal_future, local_seq = self._write_ahead(node, batch, nbytes, roll=roll, s3_future=s3_future,
                                                      producers=producers)
        except BaseException:
            with self._cond:
                self._unsynced.pop(base, None)
            raise
        if roll:
            w.roll(seg, roll_seq=local_seq - 1)  # the roll entry went just before the batch
        else:
            w.active = seg
        w.add_batch(batch, base, offset - 1, nbytes)
        if producers:
            w.record_producers(producers, now)
            self._track_unacked(group)
        with self._cond:
            self._in_flight += 1
        # first: an append acknowledged from the WAL is below the high watermark when its caller wakes
        wal_future.add_done_callback(lambda f: self._entry_durable(f, base))
        if hooked := [q for q in group if q.on_wal is not None]:
            wal_future.add_done_callback(lambda f: self._in_wal(hooked, f, node))
        wal_acked = [q for q in group if not q.ack_s3]
        if wal_acked:
            wal_future.add_done_callback(lambda f: self._acked(wal_acked, f, node))
        if s3_future is not None:
            s3_acked = [q for q in group if q.ack_s3]
            s3_future.add_done_callback(lambda f: self._acked(s3_acked, f, node))
        return end, nbytes, roll

    def _write_ahead(self, node: NodeRuntime, batch: pa.RecordBatch, nbytes: int, *, roll: bool,
                     s3_future: Future[int] | None, producers: tuple[ProducerAppend, ...]
                     ) -> tuple[Future[int], int]:
        """The batch (after a roll entry) into the local WAL and the flush pipeline, in one order for both."""
        log_id = self._state.log_id
        base = int(batch.column(0)[0].as_py())
        payload = encode_entry(AppendEntry(log_id, batch, producers))
        marker = encode_entry(RollEntry(log_id, base)) if roll else None
        with node.append_lock:
            node.uploader.check()
            try:
                if marker is not None:
                    node.wal.append_async(marker)
                local_seq = node.wal.next_seq
                wal_future = node.wal.append_async(payload)
            except WalError as exc:  # the writer stopped earlier: nothing of this batch was queued
                raise append_failed(node, exc) from exc
            node.uploader.add(BufferedAppend(log_id, batch, nbytes, local_seq, (base,) if roll else (), s3_future,
                                             producers=producers))
        return wal_future, local_seq

    def write_roll_marker(self, node: NodeRuntime, base_offset: int) -> int:
        """An explicit roll, in the local WAL (``roll()`` seals at once, so the boundary is durable in the
        manifest before it returns; a crash before that loses only an unacknowledged boundary)."""
        payload = encode_entry(RollEntry(self._state.log_id, base_offset))
        with node.append_lock:
            node.uploader.check()
            try:
                seq = node.wal.next_seq
                node.wal.append_async(payload)
            except WalError as exc:
                raise append_failed(node, exc) from exc
        return seq

    def _in_wal(self, group: Sequence[_Queued], done: Future[int], node: NodeRuntime) -> None:
        """Call the ``on_wal`` hooks of ``group`` (the WAL's fsync thread): not for a failed entry or a node fenced."""
        if done.exception() is not None or node.uploader.fenced:
            return
        for q in group:
            assert q.on_wal is not None
            assert q.result is not None
            try:
                q.on_wal(q.result)
            except Exception:
                log.exception("an on_wal hook of an append to %s failed", self.log_id)

    def _acked(self, group: Sequence[_Queued], done: Future[int], node: NodeRuntime) -> None:
        """Resolve the futures of ``group`` (runs on the WAL's or the flush pipeline's thread: no blocking).

        An ``ack=wal`` group whose entry became durable only after the node learned it was fenced is not
        acknowledged: a fenced node acknowledges nothing more, since on a partition the new writer took over
        the records are replaced (they reach the bucket only if the partition is still this node's when it
        restarts, as for any append that failed)."""
        error = done.exception()
        if error is None and not group[0].ack_s3 and node.uploader.fenced:
            error = Fenced(f"node {node.node_id} was fenced by another process before this append to {self.log_id} "
                           "was durable in its local WAL: not acknowledged (a partition another node took over "
                           "gets the offsets of its records)")
        if error is not None:
            if isinstance(error, WalError):
                error = append_failed(node, error)
            _fail(group, _typed(error, self.log_id))
            return
        host = self._state.host
        now = host.clock.monotonic()
        latency = host.metrics.ack_latency
        records = nbytes = 0
        for q in group:
            assert q.result is not None
            settle(q.future, q.result)
            latency.observe(now - q.started)
            records += q.prepared.count
            nbytes += q.prepared.nbytes
        host.metrics.appended(self._state.topic, records, nbytes)


def _typed(exc: BaseException, log_id: str) -> BaseException:
    """What an append's future carries: S3StreamErrors as they are, anything else as an InternalError (a bug)."""
    if isinstance(exc, S3StreamError) or not isinstance(exc, Exception):
        return exc
    log.error("append to %s failed unexpectedly", log_id, exc_info=exc)
    error = InternalError(f"append to {log_id} failed: {exc!r}")
    error.__cause__ = exc
    return error


def _settle_outcome(q: _Queued, outcome: AppendResult | BaseException | Future[AppendResult]) -> None:
    """A producer append not written: its error, its original's result, or its original's future's outcome."""
    if isinstance(outcome, BaseException):
        settle(q.future, error=outcome)
    elif isinstance(outcome, AppendResult):
        settle(q.future, outcome)
    else:
        def follow(original: Future[AppendResult]) -> None:
            error = original.exception()
            if error is not None:
                settle(q.future, error=error)
            else:
                settle(q.future, original.result())

        outcome.add_done_callback(follow)


def _fail(items: Sequence[_Queued], exc: BaseException) -> None:
    for q in items:
        settle(q.future, error=exc)
