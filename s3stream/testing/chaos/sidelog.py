"""The side log: what a chaos worker intended and what the store acknowledged, one JSON line per event.

A worker writes an ``intent`` line before each append (so a record that reached the log without an
acknowledgement is still recognised on read-back) and an ``ack`` line after the store acknowledged it, and
flushes the file after each line: a SIGKILL then loses nothing the worker reported (the kernel has it). The
last line may be torn by the kill; :func:`read_events` drops a torn *last* line only.

Every record is unique and recognisable: its header ``chaos`` is its identity ``{writer}.{incarnation}.
{append}.{index}``, and the side log keeps a digest of its key and value, so a read-back record is matched to
its append wherever it turns up.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from s3stream.base.records import Record
from s3stream.testing.sim.setup import SimRandom

__all__ = ["HEADER", "AckedRecord", "ChaosRandom", "Event", "SideLog", "digest", "make_records", "read_events"]


#: The record header naming a chaos record.
HEADER = "chaos"


def digest(key: bytes | None, value: bytes | None) -> str:
    """A short digest of a record's key and value (a tombstone and an empty value differ)."""
    h = hashlib.blake2b(digest_size=8)
    for part in (key, value):
        if part is None:
            h.update(b"\x00")
        else:
            h.update(b"\x01" + len(part).to_bytes(4, "big") + part)
    return h.hexdigest()


def derive(seed: int, *parts: object) -> int:
    """A 64-bit seed from ``seed`` and ``parts`` (FNV-1a: stable across processes and Python versions)."""
    value = 0xCBF29CE484222325
    for byte in ":".join([str(seed), *map(str, parts)]).encode():
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return value


class ChaosRandom(SimRandom):
    """Seeded choices from the injected randomness (:class:`IdSource`), seeded from ``seed`` and ``parts``."""

    def __init__(self, seed: int, *parts: object) -> None:
        super().__init__(derive(seed, *parts))

    def uniform(self, low: float, high: float) -> float:
        return self._ids.uniform(low, high)

    def randbytes(self, n: int) -> bytes:
        return bytes.fromhex(self._ids.token((n + 1) // 2))[:n]


@dataclass(frozen=True, slots=True)
class AckedRecord:
    """One record of an append as the side log describes it."""

    ident: str
    key: bytes | None
    digest: str
    timestamp: int
    tombstone: bool


def make_records(rng: ChaosRandom, prefix: str, n: int, *, keys: int, now_ms: int,
                 tombstone_ratio: float = 0.0) -> list[Record]:
    """``n`` unique records ``{prefix}.{i}`` over ``keys`` keys, values of 40..400 random bytes."""
    out: list[Record] = []
    for i in range(n):
        ident = f"{prefix}.{i}"
        key = b"k%04d" % rng.randrange(keys)
        value: bytes | None = ident.encode() + b"|" + rng.randbytes(rng.randint(40, 400))
        if tombstone_ratio and rng.random() < tombstone_ratio:
            value = None
        out.append(Record(key, value, timestamp=now_ms, headers=((HEADER, ident.encode()),)))
    return out


def describe(records: list[Record]) -> list[list[Any]]:
    """The side-log form of ``records``: ``[ident, key hex, digest, timestamp, tombstone]`` each."""
    out: list[list[Any]] = []
    for r in records:
        ident = next(v.decode() for k, v in r.headers if k == HEADER)
        out.append([ident, None if r.key is None else r.key.hex(), digest(r.key, r.value), r.timestamp,
                    r.value is None])
    return out


@dataclass(slots=True)
class Event:
    """One side-log line: ``kind`` (start, ready, intent, ack, fail, fenced, pass, exit) and its fields."""

    kind: str
    fields: dict[str, Any] = field(default_factory=dict)

    def records(self) -> list[AckedRecord]:
        """The records of an ``intent`` line."""
        return [AckedRecord(ident, None if key is None else bytes.fromhex(key), dig, ts, tomb)
                for ident, key, dig, ts, tomb in self.fields.get("recs", [])]


class SideLog:
    """An append-only JSON-lines file, flushed to the kernel after every line (a SIGKILL keeps it)."""

    def __init__(self, path: Path) -> None:
        self._fh: IO[str] = path.open("a", encoding="utf-8")

    def write(self, kind: str, **fields: Any) -> None:
        self._fh.write(json.dumps({"k": kind, **fields}, separators=(",", ":")) + "\n")
        self._fh.flush()

    def sync(self) -> None:
        """fsync the file (once at exit; a process kill does not need it)."""
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()


def read_events(path: Path) -> Iterator[Event]:
    """The events of a side log; a torn last line (the writer was killed while writing it) is skipped.

    Raises:
        ValueError: a line other than the last one is not valid JSON (the side log itself is broken).
    """
    if not path.exists():
        return
    lines = path.read_text(encoding="utf-8").split("\n")
    for i, line in enumerate(lines):
        if not line:
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:  # no newline after it: torn by the kill
                return
            raise ValueError(f"{path}: line {i + 1} is not JSON: {line[:80]!r}") from None
        kind = obj.pop("k")
        yield Event(kind, obj)
