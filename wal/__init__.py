"""wal: the local write-ahead log, a durable, ordered log of opaque byte payloads on local disk.

A leaf package (it imports nothing of s3stream's): s3stream decides what a payload means. Entries get
consecutive seqs; :meth:`WalWriter.append` returns once the entry is fsynced, and concurrent appends
share one write and one fsync (group commit). Opening a writer recovers the log: a torn tail left by a
crash is truncated with a warning; other damage is logged as an error and truncated too, unless that
would break the log's continuity (a bad header of an earlier file, a gap between files), which raises
:class:`WalCorrupt`.

Modules: ``frame`` (the byte format, pure), ``queue`` (frames waiting for the syncer), ``storage``
(the storage port: files, memory), ``recovery`` (scan, repair, replay), ``writer`` (appends, group
commit, trim), ``lock`` (one writer per directory), ``errors``.
"""

from wal.errors import WalClosed, WalCorrupt, WalError, WalLocked
from wal.frame import MAX_PAYLOAD_BYTES, WalEntry, decode_frames, encode_frame
from wal.storage import FileWalStorage, MemoryWalStorage, WalLockHandle, WalStorage
from wal.writer import WalWriter

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "FileWalStorage",
    "MemoryWalStorage",
    "WalClosed",
    "WalCorrupt",
    "WalEntry",
    "WalError",
    "WalLockHandle",
    "WalLocked",
    "WalStorage",
    "WalWriter",
    "decode_frames",
    "encode_frame",
]
