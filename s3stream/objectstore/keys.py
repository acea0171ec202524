"""Key validation shared by every backend (no path escapes, no surprises on any store)."""

from __future__ import annotations

import re

from s3stream.base.errors import InvalidRequest

__all__ = ["validate_key", "validate_prefix"]

_MAX_KEY_BYTES = 1024
_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f\\]")  # control characters and backslash


def validate_key(key: str) -> str:
    """Return ``key`` if it is a safe relative object key, else raise InvalidRequest."""
    if not key or key.startswith("/") or key.endswith("/"):
        raise InvalidRequest(f"invalid object key {key!r}: empty, or leading/trailing '/'")
    _check_parts(key)
    return key


def validate_prefix(prefix: str) -> str:
    """Return ``prefix`` if it is a safe listing prefix ('' lists everything)."""
    if prefix.startswith("/"):
        raise InvalidRequest(f"invalid prefix {prefix!r}: leading '/'")
    if prefix:
        _check_parts(prefix.rstrip("/") or prefix)
    return prefix


def _check_parts(key: str) -> None:
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate (a JSON "\ud800" escape): no store can name it
        raise InvalidRequest(f"invalid object key {key!r}: not encodable as UTF-8") from None
    if size > _MAX_KEY_BYTES:
        raise InvalidRequest(f"invalid object key: longer than {_MAX_KEY_BYTES} bytes")
    if _FORBIDDEN.search(key):
        raise InvalidRequest(f"invalid object key {key!r}: backslash or control character")
    for part in key.split("/"):
        if part in ("", ".", ".."):
            raise InvalidRequest(f"invalid object key {key!r}: empty, '.' or '..' path segment")
