"""Kafka APIs: producer_ids (being built)."""

from __future__ import annotations

from s3stream.apps.kafka.api import ApiSpec

__all__ = ["APIS"]

APIS: list[ApiSpec] = []
