"""Nullability checks the decoders share: Arrow's IPC reader and ``validate(full=True)`` do not check a
field's ``nullable=False``, so a batch decoded from bytes may hold nulls where RECORD_SCHEMA allows none.
Arrow compute only (``null_count``): no per-record Python loop."""

from __future__ import annotations

import pyarrow as pa

__all__ = ["headers_present", "required_present"]


def headers_present(headers: pa.ListArray) -> bool:
    """No null header item (struct) and no null header key in a ``headers`` column (a null list, no
    headers, and a null header value are allowed, as in Kafka)."""
    if headers.null_count == len(headers):
        return True
    items = headers.flatten()  # the header structs of the non-null lists (slicing taken care of)
    return int(items.null_count) == 0 and int(items.field("key").null_count) == 0


def required_present(batch: pa.RecordBatch) -> bool:
    """No null offset, timestamp, header or header key in a RECORD_SCHEMA batch: a null there would reach
    readers as a record no writer can produce."""
    if batch.column("offset").null_count or batch.column("timestamp").null_count:
        return False
    return headers_present(batch.column("headers"))
