"""Records, and the Arrow schema every format and hot path shares.

Vocabulary (offsets versus counts, written once here):

* ``offset``: the position of one record in a partition, assigned at append, never changed
  (compaction leaves gaps, CLEAN-GUAR-3).
* ``base_offset``: the first offset of a batch or segment (inclusive).
* ``last_offset``: the last offset a batch or segment *covers* (inclusive). After compaction the
  record at ``last_offset`` may be gone, but the range is kept so the log end never moves back.
* ``end_offset`` = ``last_offset + 1`` (exclusive). ``record_count`` counts records actually present,
  so ``record_count <= end_offset - base_offset``.
* ``log_start_offset``: the first readable offset; ``log_end_offset`` (LEO): the next offset to assign.

The Arrow schema :data:`RECORD_SCHEMA` is the one in-memory and on-disk shape of records: the local
WAL, WAL objects and segment objects all carry record batches of this schema. Hot paths (append,
flush, read, compaction) move ``pyarrow.RecordBatch`` values and never loop over records in Python;
:class:`Record` objects exist only at the public API edge.
"""

from __future__ import annotations

import bisect
import operator
import reprlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from s3stream.base.errors import InvalidArgument, MalformedRecord

__all__ = [
    "HEADER_TYPE",
    "INT64_MAX",
    "INT64_MIN",
    "RECORD_SCHEMA",
    "AppendResult",
    "LogExtent",
    "PreparedColumns",
    "Record",
    "SegmentInfo",
    "batch_from_records",
    "batch_nbytes",
    "binary_column",
    "concat",
    "int_arg",
    "prepare_columns",
    "records_from_batch",
]

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string(), nullable=False),
                                  pa.field("value", pa.binary())]))

#: offset, timestamp, key, value, headers; ``horizon_ms`` is the tombstone delete horizon that the
#: cleaner stamps (KIP-534, rule CLEAN-TOMB-1); null until a cleaning round retains the tombstone.
RECORD_SCHEMA = pa.schema([
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("timestamp", pa.int64(), nullable=False),
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("headers", HEADER_TYPE),
    pa.field("horizon_ms", pa.int64()),
])

#: The range of a timestamp (and of any int64 column): a Python int outside it would fail inside Arrow.
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def int_arg(name: str, value: object, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as an int argument of a public call, else :class:`InvalidArgument` naming ``name``.

    Any integer (numpy's too) is taken; a bool is refused (``True`` is no offset), as is anything else,
    so a wrong argument fails here, typed, instead of deep in Arrow or as a bare comparison error. O(1).
    """
    if type(value) is int:
        number = value
    elif isinstance(value, bool | np.bool_):
        raise InvalidArgument(f"{name} must be an int, not a bool ({value!r})")
    else:
        try:
            number = operator.index(value)  # type: ignore[arg-type]  # refuses what is not an integer
        except TypeError:
            raise InvalidArgument(f"{name} must be an int, not {type(value).__name__} "
                                  f"{reprlib.repr(value)}") from None
    if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        bounds = f"[{'' if minimum is None else minimum}, {'' if maximum is None else maximum}]"
        raise InvalidArgument(f"{name} {number} is out of range {bounds}")
    return number


@dataclass(frozen=True, slots=True)
class Record:
    """One record. ``value=None`` is a tombstone; ``timestamp=None`` takes the store clock at append.

    Records read back carry their ``offset``; it is not part of equality, so a record read back
    equals the one appended (with the timestamp the store assigned).
    """

    key: bytes | None
    value: bytes | None
    timestamp: int | None = None
    headers: Sequence[tuple[str, bytes]] = ()
    offset: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        """Check and snapshot the fields here, once per Record, so append never meets a wrong type.

        Raises MalformedRecord (an InvalidRecord, also a TypeError/ValueError): a key or value that is not
        bytes; a timestamp that is not an int in int64 range (a bool is refused); headers that are not
        (str, bytes) pairs (``bytes(7)`` would have stored seven zero bytes, ``bytes(10**10)`` 10 GB).
        """
        for name in ("key", "value"):
            data = getattr(self, name)
            if data is None or type(data) is bytes:
                continue
            if not isinstance(data, bytes | bytearray | memoryview):
                raise MalformedRecord(f"Record.{name} must be bytes or None, not {type(data).__name__}")
            # a snapshot: the caller may reuse its buffer, and len() of bytes is the byte count
            object.__setattr__(self, name, bytes(data))
        ts = self.timestamp
        if ts is not None and (type(ts) is not int or not INT64_MIN <= ts <= INT64_MAX):
            try:
                ts = int_arg("Record.timestamp", ts, minimum=INT64_MIN, maximum=INT64_MAX)
            except InvalidArgument as exc:
                raise MalformedRecord(f"{exc} (ms since the epoch, or None for the store's clock)") from None
            object.__setattr__(self, "timestamp", ts)
        headers: object = self.headers  # callers outside mypy pass anything
        if type(headers) is not tuple:
            object.__setattr__(self, "headers", () if headers is None else _checked_headers(headers))
            return
        for h in headers:  # the common case, (str, bytes) tuples, is only looked at (a plain loop: fastest)
            if type(h) is not tuple or len(h) != 2 or type(h[0]) is not str or type(h[1]) is not bytes:
                object.__setattr__(self, "headers", _checked_headers(headers))
                return

    @property
    def size_bytes(self) -> int:
        """The bytes this record counts against ``max.message.bytes`` (key + value + headers + 21)."""
        return _record_size(self.key, self.value, self.headers)


def _checked_headers(headers: object) -> tuple[tuple[str, bytes], ...]:
    """``headers`` as a tuple of (str, bytes) pairs (bytes-like values snapshotted), else MalformedRecord."""
    if isinstance(headers, str | bytes | bytearray | memoryview) or not isinstance(headers, Iterable):
        raise MalformedRecord(f"Record.headers must be a sequence of (str, bytes) pairs, not {type(headers).__name__}")
    out: list[tuple[str, bytes]] = []
    for i, pair in enumerate(headers):
        if type(pair) is tuple and len(pair) == 2 and type(pair[0]) is str and type(pair[1]) is bytes:
            out.append(pair)
            continue
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise MalformedRecord(f"Record.headers[{i}] must be a (str, bytes) pair, not {reprlib.repr(pair)}")
        key, value = pair
        if type(key) is not str:
            raise MalformedRecord(f"Record.headers[{i}] key must be a str, not {type(key).__name__}")
        if type(value) is not bytes:
            if not isinstance(value, bytes | bytearray | memoryview):
                raise MalformedRecord(f"Record.headers[{i}] ({key!r}) value must be bytes, not {type(value).__name__}")
            value = bytes(value)
        out.append((key, value))
    return tuple(out)


def _record_size(key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes]]) -> int:
    size = 21  # fixed per-record overhead of the encoded batch (offset, timestamp, lengths)
    size += len(key) if key is not None else 0
    size += len(value) if value is not None else 0
    for hk, hv in headers:
        size += len(hk.encode()) + len(hv) + 8
    return size


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where an appended batch landed: offsets ``base_offset..last_offset`` inclusive."""

    base_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """A segment as users see it (``PartitionLog.segments()``); the active segment comes last."""

    base_offset: int
    last_offset: int
    size_bytes: int
    record_count: int
    max_timestamp: int
    sealed: bool = True
    key: str | None = None


@dataclass(frozen=True, slots=True)
class LogExtent:
    """A partition's bounds and sealed segments at one instant (``PartitionLog.extent()``)."""

    log_start_offset: int
    high_watermark: int
    log_end_offset: int
    #: the sealed segments, in offset order (rolled and active ones are not here: ``segments()`` has them)
    sealed: tuple[SegmentInfo, ...]

    def sealed_at(self, offset: int) -> SegmentInfo | None:
        """The sealed segment holding ``offset``, if any."""
        i = bisect.bisect_left(self.sealed, offset, key=lambda s: s.last_offset)
        seg = self.sealed[i] if i < len(self.sealed) else None
        return seg if seg is not None and seg.base_offset <= offset else None


def batch_from_records(records: Sequence[Record], base_offset: int, timestamps: Sequence[int]) -> pa.RecordBatch:
    """Build the Arrow batch of ``records`` at consecutive offsets from ``base_offset``.

    ``timestamps`` are the resolved timestamps (the caller fills in ``None`` ones and applies
    ``message.timestamp.type``). Columns are built with one C-level constructor each.
    """
    n = len(records)
    offsets = pa.array(range(base_offset, base_offset + n), type=pa.int64())
    ts = pa.array(timestamps, type=pa.int64())
    keys = binary_column([r.key for r in records])
    values = binary_column([r.value for r in records])
    if any(r.headers for r in records):
        headers = pa.array([[{"key": k, "value": v} for k, v in r.headers] for r in records], type=HEADER_TYPE)
    else:
        headers = pa.nulls(n, type=HEADER_TYPE)
    horizon = pa.nulls(n, type=pa.int64())
    return pa.RecordBatch.from_arrays([offsets, ts, keys, values, headers, horizon], schema=RECORD_SCHEMA)


@dataclass(frozen=True, slots=True)
class PreparedColumns:
    """The columns of an append, built before its offsets are known (outside the partition lock)."""

    keys: pa.Array
    values: pa.Array
    timestamps: pa.Array
    headers: pa.Array
    sizes: pa.Array          # Record.size_bytes of every record
    num_rows: int

    def batch(self, base_offset: int) -> pa.RecordBatch:
        offsets = pa.array(range(base_offset, base_offset + self.num_rows), type=pa.int64())
        horizon = pa.nulls(self.num_rows, type=pa.int64())
        return pa.RecordBatch.from_arrays([offsets, self.timestamps, self.keys, self.values, self.headers, horizon],
                                          schema=RECORD_SCHEMA)


def prepare_columns(records: Sequence[Record], timestamps: Sequence[int] | pa.Array) -> PreparedColumns:
    """Arrow columns and per-record sizes of ``records`` (C-level constructors, one pass per column)."""
    n = len(records)
    keys = binary_column([r.key for r in records])
    values = binary_column([r.value for r in records])
    sizes = pc.add(pc.add(pc.fill_null(pc.binary_length(keys), 0), pc.fill_null(pc.binary_length(values), 0)), 21)
    if any(r.headers for r in records):
        headers = pa.array([[{"key": k, "value": v} for k, v in r.headers] for r in records], type=HEADER_TYPE)
        extra = pa.array([sum(len(k.encode()) + len(v) + 8 for k, v in r.headers) for r in records], type=pa.int32())
        sizes = pc.add(sizes, extra)
    else:
        headers = pa.nulls(n, type=HEADER_TYPE)
    ts = timestamps if isinstance(timestamps, pa.Array) else pa.array(timestamps, type=pa.int64())
    return PreparedColumns(keys, values, ts, headers, sizes, n)


def binary_column(items: list[bytes | None]) -> pa.Array:
    """A binary array of ``items`` whose buffers are exactly their size.

    ``pa.array`` grows its data buffer by doubling and then shrinks it, which Arrow's default allocator
    (mimalloc) does in place: up to a third of every appended batch stayed allocated, unseen by the
    pool's byte count, for as long as the batch sat in the tail cache. Joining the bytes once and
    wrapping the result costs the same CPU and allocates what is used.
    """
    n = len(items)
    try:
        data = b"".join(items)  # type: ignore[arg-type]  # a None raises TypeError: handled below
    except TypeError:
        if items.count(None) == n:
            return pa.nulls(n, type=pa.binary())
        return pa.array(items, type=pa.binary())  # keys mixing null and non-null: the builder's path
    if len(data) >= 1 << 31:
        return pa.array(items, type=pa.binary())  # past int32 offsets: let Arrow chunk or refuse it
    offsets = np.empty(n + 1, dtype=np.int32)
    offsets[0] = 0
    np.cumsum(np.fromiter(map(len, items), dtype=np.int32, count=n), out=offsets[1:])  # type: ignore[arg-type]
    return pa.BinaryArray.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def records_from_batch(batch: pa.RecordBatch | pa.Table) -> list[Record]:
    """The API-edge conversion: Arrow rows to :class:`Record` objects (with offsets)."""
    cols = batch.to_pydict()
    out: list[Record] = []
    append = out.append
    for off, ts, key, value, headers in zip(cols["offset"], cols["timestamp"], cols["key"], cols["value"],
                                            cols["headers"], strict=True):
        hdrs = tuple((h["key"], h["value"] if h["value"] is not None else b"") for h in headers) if headers else ()
        append(Record(key, value, ts, hdrs, off))
    return out


def batch_nbytes(batch: pa.RecordBatch) -> int:
    """The size a batch counts for ``segment.bytes``, ``retention.bytes`` and flush sizing.

    It is the sum of the record sizes as :attr:`Record.size_bytes` defines them, computed
    column-wise: key and value bytes plus a fixed per-record overhead (headers are counted too).
    """
    n: int = batch.num_rows
    if n == 0:
        return 0
    total = 21 * n
    for name in ("key", "value"):
        col = batch.column(name)
        total += _binary_payload_bytes(col)
    headers = batch.column("headers")
    if headers.null_count != n:
        flat = headers.flatten()
        total += _binary_payload_bytes(flat.field("key")) + _binary_payload_bytes(flat.field("value"))
        total += 8 * len(flat)
    return total


def _binary_payload_bytes(col: pa.Array) -> int:
    total = pc.sum(pc.binary_length(col)).as_py()
    return 0 if total is None else int(total)


def concat(batches: Iterable[pa.RecordBatch]) -> pa.RecordBatch:
    """One batch from many (same schema); an empty batch for none."""
    items = list(batches)
    if not items:
        return pa.RecordBatch.from_pylist([], schema=RECORD_SCHEMA)
    if len(items) == 1:
        return items[0]
    return pa.concat_batches(items)
