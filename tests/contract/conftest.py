"""Contract-area fixtures: the AWS environment as it was before the session's test credentials."""

from __future__ import annotations

import os

import pytest

_AWS_ENV_NAMES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")
#: Captured at collection time, before any session fixture installs the local servers' credentials.
_ORIGINAL_AWS_ENV = {name: os.environ.get(name) for name in _AWS_ENV_NAMES}


@pytest.fixture
def original_aws_env() -> dict[str, str | None]:
    """The AWS credential variables as they were when pytest started (None: unset)."""
    return dict(_ORIGINAL_AWS_ENV)
