"""The writer's saved trim point: where a reopened log's replay starts.

Trimming deletes only whole files and never the active one, so without a record a reopen would replay
entries the caller already trimmed (after a quiet period, the whole active file). The record is an
optimization, never a source of truth: it is saved unsynced after every trim (synced only at open and
close), checked (magic, version, CRC32C) when loaded, and anything invalid or unreadable costs only a
longer replay. A point beyond the log's end (entries lost since it was saved) is lowered before new
entries can reuse those seqs.
"""

from __future__ import annotations

import logging
import struct

from wal.errors import WalError
from wal.frame import payload_crc
from wal.storage import TrimPointStorage, WalStorage

__all__ = ["TrimPoint"]

LOG = logging.getLogger(__name__)

# the persisted trim point: magic, version, seq, CRC32C of the preceding bytes
_TRIM_POINT = struct.Struct("<4sBQ")
_TRIM_MAGIC = b"SWTP"
_TRIM_CRC = struct.Struct("<I")


class TrimPoint:
    """The trim point record of one storage (nothing is kept where it is no :class:`TrimPointStorage`).

    Not thread-safe: the writer serializes :meth:`save` (its trim lock).
    """

    def __init__(self, storage: WalStorage) -> None:
        self._storage = storage
        self._marks = storage if isinstance(storage, TrimPointStorage) else None
        self._saved = 0  # the trim point last saved
        self._synced = True
        self._save_failed = False

    def load(self, next_seq: int) -> int:
        """The saved trim point (0 when none or invalid), at most ``next_seq``.

        One beyond ``next_seq`` means entries it covered were lost (written without fsync, or cut by
        recovery): seqs from ``next_seq`` will be given to new entries, so the point is saved back down
        (synced) before any of them exists.

        Raises:
            WalError: the record cannot be read or lowered.
        """
        if self._marks is None:
            return 0
        try:
            data = self._marks.load_trim_point()
        except OSError as exc:
            raise WalError(f"WAL {self._storage.location}: cannot read the trim point: {exc}") from exc
        if data is None:
            return 0
        head = _TRIM_POINT.size
        if (len(data) != head + _TRIM_CRC.size or _TRIM_CRC.unpack_from(data, head)[0] != payload_crc(data[:head])
                or _TRIM_POINT.unpack_from(data)[:2] != (_TRIM_MAGIC, 1)):
            LOG.warning("WAL %s: ignoring an invalid trim point record; replaying from the oldest file",
                        self._storage.location)
            return 0
        seq = int(_TRIM_POINT.unpack_from(data)[2])
        if seq > next_seq:
            LOG.warning("WAL %s: the trim point %d is past the last entry (next seq %d); lowering it",
                        self._storage.location, seq, next_seq)
            try:
                self._marks.save_trim_point(_encode(next_seq), sync=True)
            except OSError as exc:
                raise WalError(f"WAL {self._storage.location}: cannot lower the trim point: {exc}") from exc
            return next_seq
        return seq

    def loaded(self, seq: int) -> None:
        """``seq`` was just loaded (:meth:`load`): it is the saved, synced point."""
        self._saved, self._synced = seq, True

    def save(self, seq: int, *, sync: bool) -> None:
        """Save ``seq`` if it moved (or, with ``sync``, was not synced yet).

        A failure is only logged: the record is an optimization, and an older one costs a longer replay.
        """
        if self._marks is None or (seq == self._saved and (self._synced or not sync)):
            return
        try:
            self._marks.save_trim_point(_encode(seq), sync=sync)
        except OSError as exc:
            if not self._save_failed:
                LOG.warning("WAL %s: cannot save the trim point (%s); a reopen replays more",
                            self._storage.location, exc)
            self._save_failed = True
            return
        self._saved, self._synced, self._save_failed = seq, sync, False


def _encode(seq: int) -> bytes:
    head = _TRIM_POINT.pack(_TRIM_MAGIC, 1, seq)
    return head + _TRIM_CRC.pack(payload_crc(head))
