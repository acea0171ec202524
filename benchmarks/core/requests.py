"""Object-store requests by the family of the key they name (for request counts by family)."""

from __future__ import annotations

__all__ = ["key_family"]


def key_family(key: str) -> str:
    """Which kind of object a key names, for request counts by family."""
    if key.startswith(("topics/", "catalog/")):
        return "topic_document"
    if key.startswith("wal/"):
        return "wal_namespace"
    if "/manifest/" in key:
        return "manifest"
    if "/segments/" in key:
        return "segment_object"
    return "other"
