"""A store that asks a gate before every request: outage and throttling tests decide there, request by request
and from the test's own state (a flag, a manual clock), whether the endpoint answers, which a table of fault
rules (:mod:`.faults`) cannot express."""

from __future__ import annotations

from collections.abc import Iterator

from s3stream.objectstore.forwarding import ForwardingObjectStore
from s3stream.objectstore.protocol import ByteRange, ListEntry, ObjectMeta

__all__ = ["GatedObjectStore"]


class GatedObjectStore(ForwardingObjectStore):
    """Calls :meth:`gate` with the verb and the key (the prefix for ``list``) before forwarding each request;
    ``gate`` raising is the request failing. Streamed uploads reach it through ``put``."""

    def gate(self, op: str, key: str) -> None:
        """Lets every request through; subclasses raise the store's errors while their endpoint is down."""

    def put(self, key: str, data: bytes | bytearray | memoryview, *, if_none_match: bool = False,
            if_match: str | None = None) -> ObjectMeta:
        self.gate("put", key)
        return super().put(key, data, if_none_match=if_none_match, if_match=if_match)

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        self.gate("get", key)
        return super().get(key, byte_range)

    def head(self, key: str) -> ObjectMeta:
        self.gate("head", key)
        return super().head(key)

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ListEntry]:
        self.gate("list", prefix)
        return super().list(prefix, start_after=start_after)

    def delete(self, key: str) -> None:
        self.gate("delete", key)
        super().delete(key)
