"""``s3stream consume TOPIC``: print records as JSON lines on stdout (like ``kafka-console-consumer``).

Start position, per partition (at most one of these flags):

* ``--offset N``: exactly N (an offset outside ``[log start, log end]`` is an error naming the partition);
* ``--from-beginning``: the log start offset;
* ``--timestamp MS``: the first offset whose timestamp is >= MS (the log end if there is none);
* none: the log start without ``--follow`` (print what is there, like ``cat``), the log end with
  ``--follow`` (only new records, like Kafka's console consumer).

Reading goes round-robin over the chosen partitions in Arrow batches of up to :data:`READ_RECORDS`
records / :data:`READ_BYTES` bytes. Without ``--follow`` it stops when every partition is read to its
end; with it, it polls every ``--poll-ms`` (sleeping on the store's clock) until interrupted or
``--max-records`` is reached. If retention moves a partition's log start past the reader, the reader
skips to the new start and says so on stderr (Kafka's ``auto.offset.reset=earliest``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, TextIO

import typer

from s3stream.apps.cli.common import OptionsOpt, UrlOpt, err_console, open_cli_store
from s3stream.apps.cli.jsonl import table_to_jsonl
from s3stream.base.errors import InvalidRequest, OffsetOutOfRange, UnknownTopic

if TYPE_CHECKING:
    import pyarrow as pa

    from s3stream.partition.log import PartitionLog
    from s3stream.store import Store

__all__ = ["READ_BYTES", "READ_RECORDS", "consume", "parse_partitions"]

READ_RECORDS = 1000
READ_BYTES = 1 << 20


def parse_partitions(spec: str, count: int, topic: str) -> list[int]:
    """``all`` -> every partition; ``N`` -> ``[N]`` (checked against the topic's ``count``)."""
    if spec.strip().lower() == "all":
        return list(range(count))
    try:
        p = int(spec)
    except ValueError:
        raise InvalidRequest(f"--partition must be a partition number or 'all', got {spec!r}") from None
    if not 0 <= p < count:
        raise UnknownTopic(f"topic {topic!r} has no partition {p} (it has {count})")
    return [p]


def _start(log: PartitionLog, *, offset: int | None, from_beginning: bool, timestamp: int | None,
           follow: bool) -> int:
    if offset is not None:
        start, end = log.log_start_offset, log.log_end_offset
        if not start <= offset <= end:
            raise OffsetOutOfRange(f"partition {log.partition}: offset {offset} is out of range "
                                   f"[{start}, {end}]", offset=offset, log_start_offset=start, log_end_offset=end)
        return offset
    if timestamp is not None:
        found = log.offset_for_timestamp(timestamp)
        return log.log_end_offset if found is None else found
    if from_beginning or not follow:
        return log.log_start_offset
    return log.log_end_offset


class _Reader:
    """Round-robin reads over partitions from their positions, writing JSON lines to ``out``."""

    def __init__(self, topic: str, logs: Sequence[PartitionLog], positions: list[int], out: TextIO,
                 max_records: int | None) -> None:
        self.topic = topic
        self.logs = logs
        self.positions = positions
        self.out = out
        self.remaining = max_records
        self.written = 0

    @property
    def done(self) -> bool:
        return self.remaining is not None and self.remaining <= 0

    def poll(self) -> int:
        """One pass over every partition; returns the records written."""
        got = 0
        for i, log in enumerate(self.logs):
            if self.done:
                break
            table = self._read(i, log)
            if table is None or table.num_rows == 0:
                continue
            self.out.write(table_to_jsonl(table, {"topic": self.topic, "partition": log.partition}))
            self.out.flush()
            self.positions[i] = int(table.column("offset")[-1].as_py()) + 1
            got += table.num_rows
            if self.remaining is not None:
                self.remaining -= table.num_rows
        self.written += got
        return got

    def _read(self, i: int, log: PartitionLog) -> pa.Table | None:
        limit = READ_RECORDS if self.remaining is None else min(READ_RECORDS, self.remaining)
        try:
            return log.read_arrow(self.positions[i], max_records=limit, max_bytes=READ_BYTES)
        except OffsetOutOfRange as exc:
            start = exc.log_start_offset
            if start is None or self.positions[i] >= start:
                raise
            err_console().print(f"[yellow]partition {log.partition}: offset {self.positions[i]} was deleted; "
                                f"skipping to the log start {start}[/]")
            self.positions[i] = start
            return None


def _silence_stdout() -> None:
    """After a broken pipe (``consume | head``), point stdout at /dev/null so exit stays quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file descriptor (tests)
        pass


def _run(store: Store, reader: _Reader, follow: bool, poll_ms: int) -> None:
    while not reader.done:
        if reader.poll() == 0:
            if not follow:
                return
            store.clock.sleep(poll_ms / 1000.0)


def consume(
    topic: Annotated[str, typer.Argument(help="Topic to read.")],
    partition: Annotated[str, typer.Option("--partition", "-p", help="A partition number, or all.")] = "all",
    offset: Annotated[int | None, typer.Option("--offset", min=0, help="Start at this offset.")] = None,
    from_beginning: Annotated[bool, typer.Option("--from-beginning", help="Start at the log start.")] = False,
    timestamp: Annotated[int | None, typer.Option(
        "--timestamp", min=0, help="Start at the first record with timestamp >= MS.")] = None,
    max_records: Annotated[int | None, typer.Option(
        "--max-records", "-n", min=1, help="Stop after this many records.")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-F", help="Keep polling for new records.")] = False,
    poll_ms: Annotated[int, typer.Option("--poll-ms", min=1, help="Poll interval with --follow.")] = 200,
    url: UrlOpt = None,
    option: OptionsOpt = None,
) -> None:
    """Print records as JSON lines on stdout: topic, partition, offset, timestamp, key, value, headers."""
    if sum([offset is not None, from_beginning, timestamp is not None]) > 1:
        raise InvalidRequest("give at most one of --offset, --from-beginning, --timestamp")
    out = typer.get_text_stream("stdout")
    with open_cli_store(url, option) as store:
        parts = parse_partitions(partition, store.partitions(topic), topic)
        logs = [store.partition(topic, p) for p in parts]
        positions = [_start(log, offset=offset, from_beginning=from_beginning, timestamp=timestamp,
                            follow=follow) for log in logs]
        reader = _Reader(topic, logs, positions, out, max_records)
        try:
            _run(store, reader, follow, poll_ms)
        except KeyboardInterrupt:
            pass
        except BrokenPipeError:
            _silence_stdout()
        err_console().print(f"[dim]consumed {reader.written} records[/]")
