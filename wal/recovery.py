"""Reading the WAL back from storage: recovery at open, and replay of durable entries.

Vocabulary: a WAL *file* is named ``{first_seq:020d}.log`` and holds a file header and the frames of
seqs ``[first_seq, end_seq)``; the *active* file is the last one (the only one appended to).

Invariants recovery establishes (and the writer then keeps):

* files are contiguous: each file's ``first_seq`` equals the previous file's ``end_seq``;
* every byte of every file decodes up to its *end*: the file's end, or an end mark (a zeroed frame
  header, see :class:`~wal.file_storage.FileWalStorage`: a reused file holds older bytes after it). After an
  end mark the last file is cut there (appends go where the file ends); the others are kept, the next
  file's first seq proving their frames complete;
* only a *torn tail* is ever cut: the first bad frame of the last file, when no valid frame of a live seq
  (>= the seq due there) follows it (:func:`~wal.frame.find_live_frame`). A crash cuts only the last
  write, which nobody was told is durable; older bytes of a reused file have lower seqs, so they never
  count. A bad frame in a file before the last, or one followed by live frames, is damage a crash does
  not explain, after which acknowledged entries may follow: recovery raises :class:`WalCorrupt` naming
  the file and the byte offset, and changes nothing (the operator quarantines: :mod:`wal.quarantine`);
* a damaged header is repaired only on the last file, and only when the file holds nothing beyond its
  header (a roll whose header sync a crash interrupted; no entry in it can have been acknowledged): it
  is recreated empty from its name. Any other bad header, a header that disagrees with the file's name,
  or a gap between files raises :class:`WalCorrupt`;
* an empty storage gets the file ``00000000000000000000.log``, so ``next_seq`` is always recorded
  on disk (a later open never reuses a seq, even after every entry was trimmed).

Ordering: every file is checked before anything is changed, and the only changes (cutting the last
file, recreating its header) are idempotent, so a crash during recovery leaves a state the next recovery
handles the same way.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from wal.errors import WalCorrupt, WalError
from wal.frame import (
    FILE_HEADER_SIZE,
    WalEntry,
    decode_file_header,
    encode_file_header,
    find_live_frame,
    scan_frames,
)
from wal.lock import LOCK_FILE_NAME
from wal.storage import END_MARK_BYTES, WalStorage

__all__ = ["RecoveredWal", "WalFile", "file_name", "find_damage", "log_names", "read_entries", "recover"]

LOG = logging.getLogger(__name__)
_NAME_RE = re.compile(r"^(\d{20})\.log$")


def file_name(first_seq: int) -> str:
    """The name of the WAL file whose first frame has ``first_seq``."""
    return f"{first_seq:020d}.log"


@dataclass(slots=True)
class WalFile:
    """One WAL file as the writer tracks it; ``size_bytes`` grows as batches land in the active file."""

    name: str
    first_seq: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class RecoveredWal:
    """What recovery found: the files in seq order (the last one is active) and the next seq."""

    files: list[WalFile]
    next_seq: int


def recover(storage: WalStorage) -> RecoveredWal:
    """Scan, verify and repair the WAL in ``storage`` (the caller holds its lock).

    Raises:
        WalCorrupt: damage that truncation cannot repair without dropping acknowledged entries; nothing
            was changed.
        WalError: the storage failed (wraps the ``OSError``).
    """
    try:
        return _recover(storage, repair=True)
    except OSError as exc:
        raise WalError(f"{storage.location}: WAL recovery failed: {exc}") from exc


def find_damage(storage: WalStorage) -> WalCorrupt | None:
    """The damage :func:`recover` would refuse to open (its first), or ``None``; changes nothing.

    Raises:
        WalError: the storage failed.
    """
    try:
        _recover(storage, repair=False)
    except WalCorrupt as exc:
        return exc
    except OSError as exc:
        raise WalError(f"{storage.location}: reading the WAL failed: {exc}") from exc
    return None


def _recover(storage: WalStorage, *, repair: bool) -> RecoveredWal:
    names = log_names(storage)
    files: list[WalFile] = []
    next_seq = 0
    for index, (name, name_seq) in enumerate(names):
        source = f"{storage.location}/{name}"
        if files and name_seq != next_seq:
            raise WalCorrupt(f"starts at seq {name_seq}, the previous file ends at {next_seq}", source=source,
                             offset=0)
        data = storage.read(name)
        last = index == len(names) - 1
        if not _header_ok(data, name_seq, source, torn_possible=last and len(data) <= FILE_HEADER_SIZE):
            LOG.warning("WAL %s: damaged header of the last file; recreating it empty", source)
            if repair:
                storage.delete(name)
                storage.create(name, encode_file_header(name_seq))
            files.append(WalFile(name, name_seq, FILE_HEADER_SIZE))
            next_seq = name_seq
            break
        scan = scan_frames(memoryview(data)[FILE_HEADER_SIZE:], first_seq=name_seq, base=FILE_HEADER_SIZE)
        size = FILE_HEADER_SIZE + scan.valid_len
        files.append(WalFile(name, name_seq, size))
        next_seq = name_seq + len(scan.spans)
        if scan.problem is None:
            continue
        if not last:
            if not _end_marked(data, size):  # a file before the last is complete: only an end mark may end it
                raise WalCorrupt(f"{scan.problem}, in a complete file (a later one follows)", source=source,
                                 offset=size)
            continue  # the next file's first seq proves its frames complete
        live = find_live_frame(data, size, next_seq)
        if live is not None:
            raise WalCorrupt(f"{scan.problem}, and a valid frame (seq {live[1]}) follows at byte {live[0]}: "
                             f"damage, not a torn tail; entries from seq {next_seq} on may have been "
                             "acknowledged", source=source, offset=size)
        if _end_marked(data, size):
            LOG.debug("WAL %s: ends at an end mark after seq %d (%d bytes after it)", source, next_seq - 1,
                      len(data) - size)
        else:
            LOG.warning("WAL %s: torn tail (%s); truncating to %d bytes", source, scan.problem, size)
        if repair:
            storage.truncate(name, size)  # the storage appends where the file ends
    if not files and repair:
        name = file_name(0)
        storage.create(name, encode_file_header(0))
        files.append(WalFile(name, 0, FILE_HEADER_SIZE))
    return RecoveredWal(files, next_seq)


def log_names(storage: WalStorage) -> list[tuple[str, int]]:
    """``(name, first_seq)`` of the WAL files, in seq order; other names (the lock file) are ignored."""
    found = []
    for name in storage.list_files():
        match = _NAME_RE.match(name)
        if match is not None:
            found.append((name, int(match.group(1))))
        elif name != LOCK_FILE_NAME:
            LOG.debug("WAL %s: ignoring unexpected file %s", storage.location, name)
    found.sort(key=lambda item: item[1])
    return found


def _end_marked(data: bytes, pos: int) -> bool:
    """Whether the frames of ``data`` end at ``pos`` with an end mark: a zeroed frame header (or zeros to the
    end of the data), which no frame has, written after every write into a reused file."""
    mark = data[pos:pos + END_MARK_BYTES]
    return mark.count(0) == len(mark)


def _header_ok(data: bytes, name_seq: int, source: str, *, torn_possible: bool) -> bool:
    """Whether the file header is valid; ``False`` only for a damaged header a crash explains.

    ``create`` syncs the header before anything is appended, so only the last file, holding nothing
    but (part of) its header, can have a header a crash damaged; anything else raises.
    """
    try:
        first_seq = decode_file_header(data, source)
    except WalCorrupt as exc:
        if torn_possible:
            return False
        exc.offset = 0
        raise
    if first_seq != name_seq:
        raise WalCorrupt(f"header says first seq {first_seq}, the name says {name_seq}", source=source, offset=0)
    return True


@dataclass(frozen=True, slots=True)
class FileExtent:
    """A file's durable extent at one instant: ``[first_seq, end_seq)`` in its first ``size_bytes``."""

    name: str
    first_seq: int
    end_seq: int
    size_bytes: int


def read_entries(storage: WalStorage, extents: Sequence[FileExtent], from_seq: int) -> Iterator[WalEntry]:
    """The entries with seq >= ``from_seq`` of a snapshot of the files, read from storage, in order.

    Files are read one at a time (memory stays bounded by one file). A file deleted meanwhile was
    trimmed, i.e. its entries were declared unneeded, and is skipped.

    Raises:
        WalCorrupt: a file no longer holds the frames recovery and the writer put there.
        WalError: the storage failed.
    """
    for extent in extents:
        if extent.end_seq <= from_seq:
            continue
        source = f"{storage.location}/{extent.name}"
        try:
            data = storage.read(extent.name, 0, extent.size_bytes)
        except FileNotFoundError:
            LOG.debug("WAL %s: trimmed while being read", source)
            continue
        except OSError as exc:
            raise WalError(f"{source}: read failed: {exc}") from exc
        view = _verified_frames(data, extent, source)
        scan = scan_frames(view, first_seq=extent.first_seq, base=FILE_HEADER_SIZE)
        written = extent.end_seq - extent.first_seq
        if scan.problem is not None or len(scan.spans) != written:
            problem = scan.problem or f"{len(scan.spans)} frames where {written} were written"
            raise WalCorrupt(problem, source=source)
        for seq, start, end in scan.spans[max(0, from_seq - extent.first_seq) :]:
            yield WalEntry(seq, bytes(view[start:end]))


def _verified_frames(data: bytes, extent: FileExtent, source: str) -> memoryview:
    """The frame bytes of a file read back, after checking its length and header."""
    if len(data) != extent.size_bytes:
        raise WalCorrupt(f"holds {len(data)} bytes, {extent.size_bytes} were written", source=source)
    if decode_file_header(data, source) != extent.first_seq:
        raise WalCorrupt(f"header does not say first seq {extent.first_seq}", source=source)
    return memoryview(data)[FILE_HEADER_SIZE:]
