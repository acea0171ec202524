"""Consumer groups, the classic protocol: the rebalance state machine (``state``, ``member``), the
``__consumer_offsets`` record schemas and log (``codec``, ``offsets_log``) and the coordinator component."""

from s3stream.apps.kafka.groups.offsets_log import OFFSETS_TOPIC

__all__ = ["OFFSETS_TOPIC"]
