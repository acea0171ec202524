"""What a partition needs of the engine that owns it, as a protocol (the engine imports the partitions).

Besides the store's shared parts (:class:`~s3stream.write.context.StoreContext`): this process's writer
node, opened on first use; the sealer, asked to seal in the background; the tail cache's accounting.
"""

from __future__ import annotations

from typing import Protocol

from s3stream.write.context import StoreContext
from s3stream.write.node_runtime import NodeRuntime

__all__ = ["HostedLog", "LogHost"]


class HostedLog(Protocol):
    """A partition as the engine's background work sees it: sealed in the background, its tail cache evicted."""

    @property
    def log_id(self) -> str: ...
    def has_pending_seals(self) -> bool: ...
    def seal_pending(self) -> None: ...
    def evict_memory(self, want_bytes: int) -> int: ...
    def detach(self) -> None: ...


class LogHost(StoreContext, Protocol):
    """The engine as its partitions see it."""

    def node_runtime(self) -> NodeRuntime:
        """This process's writer node, opened (and recovered) on first use."""
        ...

    def existing_node(self) -> NodeRuntime | None:
        """The node if one was opened."""
        ...

    def request_seal(self, plog: HostedLog) -> None:
        """Seal ``plog``'s rolled segments in the background."""
        ...

    def note_memory(self, plog: HostedLog, delta: int) -> None:
        """Account ``delta`` bytes of ``plog``'s tail cache (evicting when over budget)."""
        ...

    def check_open(self) -> None:
        """Raise Closed once the store is closed."""
        ...
