"""``s3stream produce TOPIC``: append records read from stdin (like ``kafka-console-producer``).

Input formats:

* ``lines`` (default): each line is one record value; with ``--key-separator SEP`` each line is
  ``KEY SEP VALUE`` (split at the first SEP; a line without SEP is an error naming the line).
  Bytes are taken as they are (binary-safe apart from the newline); ``\\n`` or ``\\r\\n`` ends a line.
* ``jsonl``: one JSON object per line (:mod:`s3stream.apps.cli.jsonl`); blank lines are skipped.

Placement: a record's own ``partition`` (jsonl) wins, then ``--partition``, then Kafka's default
partitioner (:mod:`s3stream.policy.partitioner`: murmur2 of the key, unkeyed round-robin).

Batching: records are buffered per partition and appended as one atomic batch when a buffer reaches
:data:`BATCH_RECORDS` records or :data:`BATCH_BYTES` bytes (never more than the topic's
``max.message.bytes``), so a large input costs few appends and few WAL fsyncs. Input is appended as it
is read: if line 5000 is malformed, the records before it are appended and the command fails (as with
Kafka's console producer); a batch the store rejects (``RecordTooLarge``, ``InvalidRecord``) is not
appended at all, since an append is atomic.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from s3stream.apps.cli.common import OptionsOpt, UrlOpt, err_console, open_cli_store
from s3stream.apps.cli.jsonl import ParsedRecord, record_from_json
from s3stream.base.errors import InvalidRequest, UnknownTopic
from s3stream.base.records import Record
from s3stream.policy.partitioner import Partitioner

if TYPE_CHECKING:
    from s3stream.partition.log import PartitionLog
    from s3stream.store import Store

__all__ = ["BATCH_BYTES", "BATCH_RECORDS", "Batcher", "InputFormat", "parse_input", "produce"]

BATCH_RECORDS = 1000
BATCH_BYTES = 1 << 20
_BATCH_OVERHEAD_BYTES = 61  # what one append adds to its records against max.message.bytes
_PROGRESS_EVERY = 1000


class InputFormat(enum.StrEnum):
    """How stdin is read."""

    lines = "lines"
    jsonl = "jsonl"


@dataclass(slots=True)
class _Landed:
    """What one partition received: offsets ``first..last`` over ``count`` records."""

    first: int
    last: int
    count: int


class Batcher:
    """Per-partition buffers, each appended as one batch when full (see the module docstring)."""

    def __init__(self, store: Store, topic: str, *, max_records: int = BATCH_RECORDS,
                 max_bytes: int = BATCH_BYTES) -> None:
        self._store = store
        self.topic = topic
        self.partitions = store.partitions(topic)
        max_message = int(store.topic_config(topic)["max.message.bytes"])
        self._max_records = max_records
        self._max_bytes = max(1, min(max_bytes, max_message - _BATCH_OVERHEAD_BYTES))
        self._logs: dict[int, PartitionLog] = {}
        self._buffers: dict[int, list[Record]] = {}
        self._sizes: dict[int, int] = {}
        self.landed: dict[int, _Landed] = {}

    @property
    def records(self) -> int:
        """Records appended so far."""
        return sum(x.count for x in self.landed.values())

    def add(self, record: Record, partition: int) -> None:
        """Buffer ``record`` for ``partition``; append the buffer first if the record would overflow it."""
        if not 0 <= partition < self.partitions:
            raise UnknownTopic(f"topic {self.topic!r} has no partition {partition} (it has {self.partitions})")
        buf = self._buffers.setdefault(partition, [])
        size = record.size_bytes
        if buf and self._sizes[partition] + size > self._max_bytes:
            self._append(partition)
            buf = self._buffers.setdefault(partition, [])
        buf.append(record)
        self._sizes[partition] = self._sizes.get(partition, 0) + size
        if len(buf) >= self._max_records:
            self._append(partition)

    def flush(self) -> None:
        """Append every non-empty buffer."""
        for partition in sorted(self._buffers):
            self._append(partition)

    def _append(self, partition: int) -> None:
        buf = self._buffers.pop(partition, [])
        self._sizes.pop(partition, None)
        if not buf:
            return
        log = self._logs.get(partition)
        if log is None:
            log = self._logs[partition] = self._store.partition(self.topic, partition)
        res = log.append(buf)
        prev = self.landed.get(partition)
        first = res.base_offset if prev is None else prev.first
        self.landed[partition] = _Landed(first, res.last_offset, len(buf) + (prev.count if prev else 0))


def _strip_newline(raw: bytes) -> bytes:
    if raw.endswith(b"\r\n"):
        return raw[:-2]
    return raw[:-1] if raw.endswith(b"\n") else raw


def parse_input(lines: Iterable[bytes], fmt: InputFormat, key_separator: str | None) -> Iterator[ParsedRecord]:
    """Records parsed from raw stdin lines, with the partition each one asks for (or None)."""
    sep = key_separator.encode("utf-8") if key_separator else None
    if fmt is InputFormat.jsonl and sep is not None:
        raise InvalidRequest("--key-separator applies to --format lines only (jsonl carries the key)")
    for lineno, raw in enumerate(lines, 1):
        if fmt is InputFormat.jsonl:
            if raw.strip():
                yield record_from_json(raw, f"stdin line {lineno}")
            continue
        line = _strip_newline(raw)
        if sep is None:
            yield Record(key=None, value=line), None
            continue
        key, found, value = line.partition(sep)
        if not found:
            raise InvalidRequest(f"stdin line {lineno}: no key separator {key_separator!r} found")
        yield Record(key=key, value=value), None


def _summary(batcher: Batcher) -> Table | str:
    if not batcher.landed:
        return "no records read from stdin"
    table = Table(title=f"produced {batcher.records} records to {batcher.topic!r}", title_justify="left")
    for name in ("partition", "records", "first offset", "last offset"):
        table.add_column(name, justify="right")
    for p in sorted(batcher.landed):
        x = batcher.landed[p]
        table.add_row(str(p), str(x.count), str(x.first), str(x.last))
    return table


def _pump(records: Iterable[ParsedRecord], batcher: Batcher, partition: int | None) -> None:
    choose = Partitioner(batcher.partitions)
    console = err_console()
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
                  transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task("reading stdin: 0 records")
        try:
            for n, (record, own) in enumerate(records, 1):
                target = own if own is not None else partition if partition is not None else choose(record.key)
                batcher.add(record, target)
                if n % _PROGRESS_EVERY == 0:
                    progress.update(task, description=f"reading stdin: {n} records")
        except InvalidRequest:
            batcher.flush()  # as with Kafka, what was read before the bad line (or batch) is appended
            raise
        batcher.flush()


def produce(
    topic: Annotated[str, typer.Argument(help="Topic to append to.")],
    partition: Annotated[int | None, typer.Option(
        "--partition", "-p", min=0, help="Append every record to this partition.")] = None,
    fmt: Annotated[InputFormat, typer.Option("--format", "-f", help="Input format.")] = InputFormat.lines,
    key_separator: Annotated[str | None, typer.Option(
        "--key-separator", "-k", help="lines: split each line into KEY SEP VALUE at the first SEP.")] = None,
    url: UrlOpt = None,
    option: OptionsOpt = None,
) -> None:
    """Append records read from stdin (lines or JSON lines); prints a summary on stderr."""
    if key_separator == "":
        raise InvalidRequest("--key-separator must not be empty")
    stdin = typer.get_binary_stream("stdin")
    with open_cli_store(url, option, writes=True) as store:
        batcher = Batcher(store, topic)
        if partition is not None and partition >= batcher.partitions:
            raise UnknownTopic(f"topic {topic!r} has no partition {partition} (it has {batcher.partitions})")
        if stdin.isatty():
            err_console().print("[dim]reading records from stdin, one per line (Ctrl-D to end)[/]")
        try:
            _pump(parse_input(stdin, fmt, key_separator), batcher, partition)
        finally:
            err_console().print(_summary(batcher))
