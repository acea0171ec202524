"""Fixtures of the fault tests: a unique memory:// namespace per test (the engine tests' fixture)."""

from __future__ import annotations

from tests.engine.conftest import mem_url

__all__ = ["mem_url"]
