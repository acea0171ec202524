"""wal: the local write-ahead log, a durable, ordered log of opaque byte payloads on local disk.

A leaf package (it imports nothing of s3stream's): s3stream decides what a payload means. Entries get
consecutive seqs; :meth:`WalWriter.append` returns once the entry is fsynced, and concurrent appends
share one write and one fsync (group commit). Opening a writer recovers the log: a torn tail left by a
crash (a bad last frame with nothing valid after it) is truncated with a warning; any other damage (a
bad frame followed by valid ones, a bad header of an earlier file, a gap between files) raises
:class:`WalCorrupt` naming the file and byte offset, and changes nothing: :func:`quarantine` moves the
damaged part aside when the operator decides to. A full disk stops the writer with :class:`WalFull`
until :meth:`WalWriter.resume`.

Modules: ``frame`` (the byte format, pure), ``queue`` (frames waiting for the syncer), ``storage``
(the storage port) with ``file_storage`` and ``memory_storage`` (its directory and simulated-disk
implementations), ``recovery`` (scan, repair, replay), ``writer`` (the writer's API: open, append, trim,
resume, close), ``group_commit`` (seqs, batches and the syncer and fsyncer threads), ``trim_point`` (the
saved replay start), ``quarantine`` (moving damage aside), ``lock`` (one writer per directory), ``errors``.
"""

from wal.errors import WalClosed, WalCorrupt, WalError, WalFull, WalLocked
from wal.file_storage import FileWalStorage
from wal.frame import MAX_PAYLOAD_BYTES, WalEntry, decode_frames, encode_frame
from wal.memory_storage import MemoryWalStorage
from wal.quarantine import QuarantineReport, quarantine
from wal.storage import WalLockHandle, WalStorage
from wal.writer import WalWriter

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "FileWalStorage",
    "MemoryWalStorage",
    "QuarantineReport",
    "WalClosed",
    "WalCorrupt",
    "WalEntry",
    "WalError",
    "WalFull",
    "WalLockHandle",
    "WalLocked",
    "WalStorage",
    "WalWriter",
    "decode_frames",
    "encode_frame",
    "quarantine",
]
