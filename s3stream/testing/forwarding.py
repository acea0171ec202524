"""Kept for existing imports: :class:`ForwardingObjectStore` lives in :mod:`s3stream.objectstore.forwarding`."""

from __future__ import annotations

from s3stream.objectstore.forwarding import ForwardingObjectStore

__all__ = ["ForwardingObjectStore"]
