"""The cleaner's own small manifest edits (pure, idempotent), next to s3stream.manifest.intents."""

from __future__ import annotations

import dataclasses

from s3stream.manifest.intents import Intent
from s3stream.manifest.model import FrozenMap, Manifest

__all__ = ["HORIZON_ATTRIBUTE", "reset_checkpoint", "set_attribute", "set_checkpoint"]

#: earliest tombstone delete horizon in the cleaned data (for the opt-in idle tombstone rule)
HORIZON_ATTRIBUTE = "s3stream.cleaner.min_tombstone_horizon_ms"


def set_checkpoint(offset: int) -> Intent:
    """CLEAN-SEL-2(b) / CLEAN-CKPT-2: store ``offset`` as the cleaner checkpoint."""
    def apply(cur: Manifest) -> Manifest | None:
        if cur.cleaner_checkpoint == offset:
            return None
        return dataclasses.replace(cur, cleaner_checkpoint=offset)

    return apply


def reset_checkpoint(log_start_offset: int) -> Intent:
    """CLEAN-RANGE-1 / CLEAN-SEL-2(b): replace a checkpoint that is out of range by ``log_start_offset``.

    Re-checked against the manifest it is applied to, so a checkpoint another commit made valid
    (a cleaning round that landed first) is left alone.
    """
    def apply(cur: Manifest) -> Manifest | None:
        cp = cur.cleaner_checkpoint
        if cp is None or cur.log_start_offset <= cp <= cur.next_offset or cp == log_start_offset:
            return None
        return dataclasses.replace(cur, cleaner_checkpoint=max(log_start_offset, cur.log_start_offset))

    return apply


def set_attribute(key: str, value: str | None) -> Intent:
    """Set (or with None remove) one manifest attribute."""
    def apply(cur: Manifest) -> Manifest | None:
        attrs = dict(cur.attributes)
        if value is None:
            if key not in attrs:
                return None
            del attrs[key]
        else:
            if attrs.get(key) == value:
                return None
            attrs[key] = value
        return dataclasses.replace(cur, attributes=FrozenMap(attrs))

    return apply
