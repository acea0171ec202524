"""Moving the damaged part of a WAL directory aside, so it opens again: an operator's explicit step.

Recovery refuses damage a crash does not explain (:class:`~wal.errors.WalCorrupt`) and changes nothing,
because entries after it may have been acknowledged and only the operator may decide to give them up.
:func:`quarantine` is that decision: it keeps every entry before the first damage and moves the rest
under ``quarantine/`` in the directory (a subdirectory: the WAL reads only its own files), deleting no
byte. The damaged file itself is copied there whole, then cut at the damage; later files are moved.

Order (a crash midway leaves a state a second run finishes): copy, move later files, sync both
directories, then cut.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from wal.errors import WalError
from wal.file_storage import FileWalStorage
from wal.frame import FILE_HEADER_SIZE, scan_frames
from wal.recovery import find_damage, log_names

__all__ = ["QUARANTINE_DIR", "QuarantineReport", "quarantine"]

#: The subdirectory of a WAL directory that receives quarantined files.
QUARANTINE_DIR = "quarantine"


@dataclass(frozen=True, slots=True)
class QuarantineReport:
    """What :func:`quarantine` found and did (or, with ``dry_run``, would do).

    ``damage`` is recovery's complaint (None: the directory opens as it is, nothing to do); entries with
    seq below ``kept_below_seq`` stay in the log; ``moved`` files went whole to ``moved_to``; ``cut`` is
    the file cut at ``cut_at`` bytes (its complete copy is in ``moved_to`` too).
    """

    directory: str
    damage: str | None
    kept_below_seq: int | None = None
    moved_to: str | None = None
    moved: tuple[str, ...] = ()
    cut: str | None = None
    cut_at: int | None = None
    done: bool = False


def quarantine(directory: str | os.PathLike[str], *, dry_run: bool = False) -> QuarantineReport:
    """Move the damaged part of the WAL in ``directory`` aside (see the module docstring).

    Raises:
        WalLocked: a writer (a running process) holds the directory.
        WalError: the directory does not exist or the storage failed.
    """
    path = os.path.abspath(os.fspath(directory))
    if not os.path.isdir(path):
        raise WalError(f"{path}: no such WAL directory")
    storage = FileWalStorage(path)
    handle = storage.lock()
    try:
        damage = find_damage(storage)
        if damage is None:
            return QuarantineReport(path, None)
        report = _plan(storage, path, str(damage), damage.source, damage.offset or 0)
        if not dry_run:
            try:
                _apply(storage, report)
            except OSError as exc:
                raise WalError(f"{path}: quarantine failed: {exc}") from exc
            report = replace(report, done=True)
        return report
    finally:
        storage.close()
        handle.release()


def _plan(storage: FileWalStorage, path: str, problem: str, source: str | None, offset: int) -> QuarantineReport:
    """Which files move and where the damaged one is cut."""
    names = log_names(storage)
    damaged = os.path.basename(source or "")
    index = next((i for i, (name, _) in enumerate(names) if name == damaged), None)
    if index is None:
        raise WalError(f"{path}: {problem} (not a WAL file of this directory: nothing to quarantine)")
    name, first_seq = names[index]
    later = tuple(n for n, _ in names[index + 1 :])
    cut = offset > FILE_HEADER_SIZE
    kept = first_seq
    if cut:
        kept += len(scan_frames(storage.read(name, FILE_HEADER_SIZE, offset - FILE_HEADER_SIZE),
                                first_seq=first_seq).spans)
    moved_to = _free_name(os.path.join(path, QUARANTINE_DIR, f"{name.removesuffix('.log')}-at-{offset}"))
    return QuarantineReport(path, problem, kept, moved_to, later if cut else (name, *later),
                            name if cut else None, offset if cut else None)


def _apply(storage: FileWalStorage, report: QuarantineReport) -> None:
    assert report.moved_to is not None
    os.makedirs(report.moved_to)
    _sync_dir(os.path.dirname(report.moved_to))
    _sync_dir(report.directory)
    if report.cut is not None:
        _copy(os.path.join(report.directory, report.cut), os.path.join(report.moved_to, report.cut))
    for name in report.moved:
        os.rename(os.path.join(report.directory, name), os.path.join(report.moved_to, name))
    _sync_dir(report.moved_to)
    _sync_dir(report.directory)
    if report.cut is not None and report.cut_at is not None:
        storage.truncate(report.cut, report.cut_at)


def _copy(src: str, dst: str) -> None:
    with open(src, "rb") as f:
        data = f.read()
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def _free_name(base: str) -> str:
    """``base``, or ``base-2``, ``base-3``... : the first that does not exist."""
    candidate, n = base, 1
    while os.path.exists(candidate):
        n += 1
        candidate = f"{base}-{n}"
    return candidate


def _sync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

