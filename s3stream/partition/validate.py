"""Checking an append before anything is written, and building its Arrow batch once it has offsets.

An append is validated in the caller's thread into a :class:`PreparedAppend` (rules: compacted topics need
keys, ``max.message.bytes`` per record and per batch, ``message.timestamp.*`` bounds; timestamps resolved):

* a small list of :class:`~s3stream.base.records.Record` stays Python lists (one loop, no Arrow call), so a
  one-record append costs microseconds; its columns are built later, together with the other appends of its
  round (:func:`batch_of`);
* a larger list becomes Arrow columns at once (``prepare_columns``: C-level constructors, vectorised sizes);
* an Arrow batch (``append_arrow``) is checked with Arrow compute functions only, never per record.

Every check raises InvalidRecord, RecordTooLarge or InvalidArgument naming the first offending record, and
nothing of the batch is appended then.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from s3stream.base.errors import InvalidArgument, InvalidRecord, OffsetOutOfRange, RecordTooLarge
from s3stream.base.producer import ProducerBatch
from s3stream.base.records import HEADER_TYPE, RECORD_SCHEMA, Record, binary_column, prepare_columns
from s3stream.base.topic_config import TopicConfig
from s3stream.read.tiers import LogView

__all__ = ["ARROW_COLUMNS", "BATCH_OVERHEAD_BYTES", "SMALL_APPEND_RECORDS", "PreparedAppend", "batch_of",
           "check_offset", "check_producer", "prepare_arrow", "prepare_records"]

BATCH_OVERHEAD_BYTES = 61  # a Kafka record batch header; counts against max.message.bytes
#: appends of up to this many Records are checked in one Python loop and built into Arrow with their round
SMALL_APPEND_RECORDS = 64
#: the columns ``append_arrow`` takes (``value`` required, the others optional)
ARROW_COLUMNS = ("key", "value", "timestamp", "headers")

Columns = tuple[pa.Array, pa.Array, pa.Array, pa.Array]  # keys, values, timestamps, headers


@dataclass(slots=True)
class PreparedAppend:
    """A validated append, not yet at offsets: Python lists (small appends) or Arrow ``columns``."""

    count: int
    nbytes: int
    max_ts: int
    keys: list[bytes | None] | None = None
    values: list[bytes | None] | None = None
    timestamps: list[int] | None = None
    headers: list[Sequence[tuple[str, bytes]]] | None = None  # None: no record has headers
    columns: Columns | None = None
    producer: ProducerBatch | None = None  # an idempotent producer's batch: sequence-checked at its round


def check_producer(prepared: PreparedAppend, producer: object) -> None:
    """Attach an idempotent producer's batch to ``prepared`` (InvalidArgument for a malformed one, or one
    whose record count is not the append's: its sequences number the append's records)."""
    if not isinstance(producer, ProducerBatch):
        raise InvalidArgument(f"producer must be a ProducerBatch, not {type(producer).__name__}")
    producer.check()
    if producer.record_count != prepared.count:
        raise InvalidArgument(f"producer batch of {producer.record_count} records for an append of "
                              f"{prepared.count}")
    prepared.producer = producer


def prepare_records(recs: Sequence[Record], cfg: TopicConfig, now: int) -> PreparedAppend:
    """Check a non-empty list of Records (see the module docstring)."""
    n = len(recs)
    if n > SMALL_APPEND_RECORDS:
        return _prepare_columns(recs, cfg, now)
    log_append = cfg.message_timestamp_type == "LogAppendTime"
    low, high = now - cfg.message_timestamp_before_max_ms, now + cfg.message_timestamp_after_max_ms
    limit, compact = cfg.max_message_bytes, cfg.compact
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    stamps: list[int] = []
    headers: list[Sequence[tuple[str, bytes]]] | None = None
    total = 0
    max_ts = -1
    for r in recs:
        if type(r) is not Record and not _is_record(r):
            return _prepare_columns(recs, cfg, now)  # raises, naming the first offending record
        key, value, ts = r.key, r.value, r.timestamp
        size = 21
        if key is not None:
            size += len(key)
        elif compact:
            return _prepare_columns(recs, cfg, now)
        if value is not None:
            size += len(value)
        if r.headers:
            size += sum(len(hk.encode()) + len(hv) + 8 for hk, hv in r.headers)
            if headers is None:
                headers = [()] * len(keys)
            headers.append(r.headers)
        elif headers is not None:
            headers.append(())
        if log_append or ts is None:
            ts = now
        elif ts < low or ts > high:
            return _prepare_columns(recs, cfg, now)
        if size > limit or ts < 0:
            return _prepare_columns(recs, cfg, now)
        keys.append(key)
        values.append(value)
        stamps.append(ts)
        total += size
        max_ts = max(max_ts, ts)
    if total + BATCH_OVERHEAD_BYTES > limit:
        return _prepare_columns(recs, cfg, now)
    return PreparedAppend(n, total, max_ts, keys, values, stamps, headers)


def _is_record(item: object) -> bool:
    """Callers outside mypy pass anything as a record."""
    return isinstance(item, Record)


def _prepare_columns(recs: Sequence[Record], cfg: TopicConfig, now: int) -> PreparedAppend:
    """Check ``recs`` and build their columns with Arrow (large appends; exact errors for small ones)."""
    for i, r in enumerate(recs):
        if not _is_record(r):
            raise InvalidRecord(f"record {i} is a {type(r).__name__}, not an s3stream.Record")
    if cfg.compact:
        for i, r in enumerate(recs):
            if r.key is None:
                raise InvalidRecord(f"record {i} has a null key; compacted topics require a key on every record")
    log_append = cfg.message_timestamp_type == "LogAppendTime"
    raw = [r.timestamp for r in recs]
    timestamps = [now] * len(recs) if log_append else [now if t is None else t for t in raw]
    _check_timestamps(min(timestamps), max(timestamps), timestamps, cfg, now, log_append=log_append)
    cols = prepare_columns(recs, timestamps)
    nbytes = _check_sizes(cols.sizes, cfg)
    return PreparedAppend(len(recs), nbytes, max(timestamps),
                          columns=(cols.keys, cols.values, cols.timestamps, cols.headers))


def _check_timestamps(low: int, high: int, timestamps: Sequence[int] | pa.Array, cfg: TopicConfig, now: int, *,
                      log_append: bool) -> None:
    if low >= 0 and (log_append or (now - low <= cfg.message_timestamp_before_max_ms
                                    and high - now <= cfg.message_timestamp_after_max_ms)):
        return
    for i, ts in enumerate(timestamps.to_pylist() if isinstance(timestamps, pa.Array) else timestamps):
        if ts < 0:
            raise InvalidRecord(f"record {i} has a negative timestamp {ts}")
        if not log_append and (now - ts > cfg.message_timestamp_before_max_ms
                               or ts - now > cfg.message_timestamp_after_max_ms):
            raise InvalidRecord(f"record {i} timestamp {ts} is outside the accepted range around {now} "
                                "(message.timestamp.before.max.ms / message.timestamp.after.max.ms)")


def _check_sizes(sizes: pa.Array, cfg: TopicConfig) -> int:
    """The batch's logical bytes, after checking each record and the batch against ``max.message.bytes``."""
    largest = int(pc.max(sizes).as_py())
    if largest > cfg.max_message_bytes:
        i = int(pc.index(pc.greater(sizes, cfg.max_message_bytes), True).as_py())
        raise RecordTooLarge(f"record {i} is {sizes[i].as_py()} bytes, larger than max.message.bytes="
                             f"{cfg.max_message_bytes}")
    nbytes = int(pc.sum(sizes).as_py())
    if nbytes + BATCH_OVERHEAD_BYTES > cfg.max_message_bytes:
        raise RecordTooLarge(f"the batch is {nbytes + BATCH_OVERHEAD_BYTES} bytes, larger than "
                             f"max.message.bytes={cfg.max_message_bytes}")
    return nbytes


def prepare_arrow(data: pa.RecordBatch | pa.Table, cfg: TopicConfig, now: int) -> PreparedAppend:
    """Check an Arrow batch of :data:`ARROW_COLUMNS` with Arrow compute functions only (no per-record Python)."""
    if not isinstance(data, pa.RecordBatch | pa.Table):
        raise InvalidArgument(f"append_arrow takes a pyarrow.RecordBatch or Table, not {type(data).__name__}")
    names = data.schema.names
    unknown = [name for name in names if name not in ARROW_COLUMNS]
    if unknown or len(set(names)) != len(names):
        raise InvalidArgument(f"append_arrow takes the columns {', '.join(ARROW_COLUMNS)} (each at most once; "
                              f"offsets are assigned by the log), got {names}")
    if "value" not in names:
        raise InvalidArgument("append_arrow needs a 'value' column (null values are tombstones)")
    n = data.num_rows
    if n == 0:
        raise InvalidRecord("append needs at least one record")

    def column(name: str) -> pa.Array | None:
        if name not in names:
            return None
        col = data.column(name)
        return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col

    keys = _binary("key", column("key"), n)
    values = _binary("value", column("value"), n)
    if cfg.compact and keys.null_count:
        i = int(pc.index(pc.is_null(keys), True).as_py())
        raise InvalidRecord(f"record {i} has a null key; compacted topics require a key on every record")
    log_append = cfg.message_timestamp_type == "LogAppendTime"
    stamps = _timestamps(column("timestamp"), n, now, log_append=log_append)
    bounds = pc.min_max(stamps)
    low, high = int(bounds["min"].as_py()), int(bounds["max"].as_py())
    _check_timestamps(low, high, stamps, cfg, now, log_append=log_append)
    headers, header_bytes = _headers(column("headers"), n)
    sizes = pc.add(_lengths(values), 21)  # few compute calls: their fixed cost shows in small appends
    if keys.null_count < n:
        sizes = pc.add(sizes, _lengths(keys))
    if header_bytes is not None:
        sizes = pc.add(sizes, header_bytes)
    nbytes = _check_sizes(sizes, cfg)
    return PreparedAppend(n, nbytes, high, columns=(keys, values, stamps, headers))


def _lengths(col: pa.Array) -> pa.Array:
    """Byte lengths of a binary column, 0 for nulls."""
    lengths = pc.binary_length(col)
    return pc.fill_null(lengths, 0) if col.null_count else lengths


def _binary(name: str, col: pa.Array | None, n: int) -> pa.Array:
    if col is None or pa.types.is_null(col.type):
        return pa.nulls(n, type=pa.binary())
    t = col.type
    if pa.types.is_binary(t):
        return col
    if pa.types.is_large_binary(t) or pa.types.is_string(t) or pa.types.is_large_string(t) or \
            pa.types.is_fixed_size_binary(t):
        try:
            return col.cast(pa.binary())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise InvalidArgument(f"append_arrow: column {name!r} ({t}) does not fit a binary column: {exc}") from None
    raise InvalidArgument(f"append_arrow: column {name!r} must be binary (or string), not {t}")


def _timestamps(col: pa.Array | None, n: int, now: int, *, log_append: bool) -> pa.Array:
    """Timestamps in ms: the store clock's for null ones, every one with LogAppendTime."""
    if log_append or col is None or pa.types.is_null(col.type):
        return pa.array(np.full(n, now, dtype=np.int64))
    t = col.type
    try:
        if pa.types.is_timestamp(t):
            col = col.cast(pa.timestamp("ms"), safe=False).cast(pa.int64())
        elif pa.types.is_integer(t):
            col = col.cast(pa.int64())
        else:
            raise InvalidArgument(f"append_arrow: column 'timestamp' must be int64 ms (or a timestamp), not {t}")
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InvalidArgument(f"append_arrow: column 'timestamp' does not fit int64 ms: {exc}") from None
    return pc.fill_null(col, now) if col.null_count else col


def _headers(col: pa.Array | None, n: int) -> tuple[pa.Array, pa.Array | None]:
    """The headers column as HEADER_TYPE, and each record's header bytes (None when no record has headers)."""
    if col is None or pa.types.is_null(col.type):
        return pa.nulls(n, type=HEADER_TYPE), None
    if not col.type.equals(HEADER_TYPE):
        try:
            col = col.cast(HEADER_TYPE)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise InvalidArgument(f"append_arrow: column 'headers' must be {HEADER_TYPE}, not {col.type}: "
                                  f"{exc}") from None
    if col.null_count == n:
        return col, None
    flat = col.flatten()  # the header structs of the non-null lists
    if flat.null_count:  # a null header value is Kafka's and stays; a null header is no record's
        raise InvalidRecord("append_arrow: a header is null (each header is a key and a value)")
    hkeys, hvalues = flat.field("key"), flat.field("value")
    if hkeys.null_count:
        raise InvalidRecord("append_arrow: a header key is null (header keys are strings)")
    per_header = pc.add(pc.add(pc.binary_length(hkeys), pc.fill_null(pc.binary_length(hvalues), 0)), 8)
    parents = pc.list_parent_indices(col).to_numpy()
    extra = np.bincount(parents, weights=per_header.to_numpy(zero_copy_only=False), minlength=n)
    return col, pa.array(extra.astype(np.int64))


def batch_of(items: Sequence[PreparedAppend], base: int) -> pa.RecordBatch:
    """One RECORD_SCHEMA batch of ``items`` in order, at consecutive offsets from ``base``."""
    pieces: list[Columns] = []
    run: list[PreparedAppend] = []
    for item in items:
        if item.columns is None:
            run.append(item)
            continue
        if run:
            pieces.append(_columns_of(run))
            run = []
        pieces.append(item.columns)
    if run:
        pieces.append(_columns_of(run))
    if len(pieces) == 1:
        keys, values, stamps, headers = pieces[0]
    else:
        keys, values, stamps, headers = (pa.concat_arrays([p[i] for p in pieces]) for i in range(4))
    n = len(keys)
    offsets = pa.array(np.arange(base, base + n, dtype=np.int64))
    return pa.RecordBatch.from_arrays([offsets, stamps, keys, values, headers, _nulls(n, pa.int64())],
                                      schema=RECORD_SCHEMA)


@functools.lru_cache(maxsize=512)
def _nulls(n: int, kind: pa.DataType) -> pa.Array:
    """An all-null column of ``n`` rows (immutable: small rounds share them instead of allocating each time)."""
    return pa.nulls(n, type=kind)


def _columns_of(run: Sequence[PreparedAppend]) -> Columns:
    """The Arrow columns of consecutive small appends (one constructor per column for the whole run)."""
    if len(run) == 1:
        one = run[0]
        keys, values, stamps, headers = one.keys or [], one.values or [], one.timestamps or [], one.headers
    else:
        keys = list(itertools.chain.from_iterable(it.keys or () for it in run))
        values = list(itertools.chain.from_iterable(it.values or () for it in run))
        stamps = list(itertools.chain.from_iterable(it.timestamps or () for it in run))
        headers = None
        if any(it.headers is not None for it in run):
            headers = list(itertools.chain.from_iterable(
                it.headers if it.headers is not None else [()] * it.count for it in run))
    n = len(keys)
    if headers is None:
        header_col = _nulls(n, HEADER_TYPE)
    else:
        header_col = pa.array([[{"key": k, "value": v} for k, v in h] for h in headers], type=HEADER_TYPE)
    return binary_column(keys), binary_column(values), pa.array(stamps, type=pa.int64()), header_col


def check_offset(offset: int, view: LogView) -> None:
    """OffsetOutOfRange unless ``offset`` is in ``[log start, log end]`` of ``view``."""
    if offset < view.log_start_offset or offset > view.log_end_offset:
        raise OffsetOutOfRange(
            f"offset {offset} is out of range [{view.log_start_offset}, {view.log_end_offset}]",
            offset=offset, log_start_offset=view.log_start_offset, log_end_offset=view.log_end_offset)
