"""Keeping credentials out of botocore's DEBUG logs.

botocore logs every request at DEBUG: ``botocore.endpoint`` dumps the prepared request (its headers carry
``X-Amz-Security-Token`` and the ``Authorization`` signature) and ``botocore.auth`` the canonical request
(``x-amz-security-token:...``), the string to sign and the signature. :func:`install_redaction` puts one
:class:`RedactingFilter` on those loggers (once per process, whatever the number of stores) and registers
the secrets a store resolved (secret key, session token); the filter rewrites a record's message, args
included, with every registered secret, security-token value and signature replaced by ``***``.

A filter runs only for records the logger emits, i.e. only when DEBUG logging is on for botocore: no cost
otherwise.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable

__all__ = ["REDACTED_LOGGERS", "RedactingFilter", "install_redaction", "redact"]

#: the botocore loggers whose records may carry a credential or a signature
REDACTED_LOGGERS = ("botocore.auth", "botocore.endpoint", "botocore.httpsession", "botocore.parsers")

_MASK = "***"
#: a security token's value after its name, as a header (``'X-Amz-Security-Token': b'...'``), a canonical
#: header line (``x-amz-security-token:...``) or a query parameter (``X-Amz-Security-Token=...``)
_TOKEN_RE = re.compile(r"""(?i)(x-amz-security-token['"]?\s*[:=]\s*(?:b?['"])?)[^'"\s,&;}]+""")
#: a SigV4 signature (``Signature=hex`` in Authorization, ``X-Amz-Signature=hex``, botocore's ``Signature:\nhex``)
_SIGNATURE_RE = re.compile(r"(?i)(signature['\"]?\s*[:=]\s*(?:b?['\"])?)[0-9a-f]{16,}")


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each of ``secrets``, any security-token value and any signature replaced by ``***``."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, _MASK)
    text = _TOKEN_RE.sub(rf"\g<1>{_MASK}", text)
    return _SIGNATURE_RE.sub(rf"\g<1>{_MASK}", text)


class RedactingFilter(logging.Filter):
    """Rewrites records that would print a registered secret, a security token or a signature."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._secrets: frozenset[str] = frozenset()

    def add_secrets(self, secrets: Iterable[str]) -> None:
        """Also redact ``secrets`` (empty strings are ignored)."""
        with self._lock:
            self._secrets = self._secrets | {s for s in secrets if s}

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 - a record that cannot format is logging's to report, not ours
            return True
        clean = redact(text, self._secrets)
        if clean != text:
            record.msg, record.args = clean, ()
        return True


_INSTALL_LOCK = threading.Lock()
_FILTER: list[RedactingFilter] = []


def install_redaction(secrets: Iterable[str]) -> RedactingFilter:
    """Install the filter on :data:`REDACTED_LOGGERS` (the first call only) and register ``secrets``."""
    with _INSTALL_LOCK:
        if not _FILTER:
            flt = RedactingFilter()
            for name in REDACTED_LOGGERS:
                logging.getLogger(name).addFilter(flt)
            _FILTER.append(flt)
        flt = _FILTER[0]
    flt.add_secrets(secrets)
    return flt
