"""``s3stream topic ...`` and the shared behaviour of every command: store line, options, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .helpers import Cli, error_line


def test_create_list_describe_alter_delete(cli: Cli) -> None:
    created = cli.ok("topic", "create", "orders", "--partitions", "3", "--config", "segment.bytes=65536",
                     "--config", "retention.ms=3600000")
    assert f"store: {cli.url}" in created.stderr
    assert "created topic 'orders' with 3 partition(s)" in created.stderr
    cli.ok("topic", "create", "audit")
    assert cli.ok("topic", "list").stdout.splitlines() == ["audit", "orders"]

    info = json.loads(cli.ok("topic", "describe", "orders", "--json").stdout)
    assert info["partitions"] == 3
    assert info["overrides"] == {"segment.bytes": "65536", "retention.ms": "3600000"}
    assert info["config"]["cleanup.policy"] == "delete"
    assert [p["log_end_offset"] for p in info["partition_info"]] == [0, 0, 0]

    cli.ok("topic", "alter", "orders", "--config", "retention.ms=60000", "--delete-config", "segment.bytes")
    info = json.loads(cli.ok("topic", "describe", "orders", "--json").stdout)
    assert info["overrides"] == {"retention.ms": "60000"}

    cli.ok("topic", "delete", "audit")
    assert cli.ok("topic", "list").stdout.splitlines() == ["orders"]


def test_describe_tables_mark_overrides_and_show_partitions(cli: Cli) -> None:
    cli.ok("topic", "create", "t", "-p", "2", "-c", "segment.bytes=65536")
    cli.ok("produce", "t", "--partition", "1", input="a\nb\nc\n")
    out = cli.ok("topic", "describe", "t").stdout
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines() if line.startswith("│")]
    config = {row[1]: (row[0], row[2]) for row in cells if len(row) == 3}
    assert config["segment.bytes"] == ("*", "65536")
    assert config["retention.ms"] == ("", "604800000")
    partitions = [row[:3] for row in cells if len(row) == 7]
    assert partitions == [["0", "0", "0"], ["1", "0", "3"]]


@pytest.mark.parametrize("args", [
    ("topic", "describe", "nope"),
    ("topic", "delete", "nope"),
    ("topic", "alter", "nope", "--config", "retention.ms=1"),
    ("produce", "nope"),
    ("consume", "nope"),
    ("manifest", "show", "nope", "0"),
])
def test_unknown_topic_is_one_line_and_exit_1(cli: Cli, args: tuple[str, ...]) -> None:
    result = cli(*args, input="x\n")
    assert result.exit_code == 1
    assert error_line(result) == "error: unknown topic 'nope'"


def test_invalid_config_names_the_key(cli: Cli) -> None:
    result = cli("topic", "create", "t", "--config", "segment.byts=1")
    assert result.exit_code == 1
    assert "segment.byts" in error_line(result) and "segment.bytes" in error_line(result)

    cli.ok("topic", "create", "t")
    result = cli("topic", "alter", "t", "--config", "segment.bytes=abc")
    assert result.exit_code == 1
    assert "segment.bytes" in error_line(result)

    result = cli("topic", "create", "u", "--config", "segment.bytes")
    assert result.exit_code == 1
    assert "expected KEY=VALUE" in error_line(result) and "segment.bytes" in error_line(result)


def test_other_topic_errors(cli: Cli) -> None:
    cli.ok("topic", "create", "t")
    result = cli("topic", "create", "t")
    assert result.exit_code == 1 and "already exists" in error_line(result)
    result = cli("topic", "create", "bad/name")
    assert result.exit_code == 1 and "bad/name" in error_line(result)
    result = cli("topic", "alter", "t")
    assert result.exit_code == 1 and "nothing to alter" in error_line(result)
    result = cli("topic", "alter", "t", "-c", "retention.ms=1", "-d", "retention.ms")
    assert result.exit_code == 1 and "both set" in error_line(result)
    result = cli("topic", "create", "x", "--partitions", "0")
    assert result.exit_code == 2  # a usage error (click), not a store error


def test_store_options_are_validated_and_named(cli: Cli) -> None:
    result = cli("topic", "list", "--option", "flush.intervl.ms=5")
    assert result.exit_code == 1
    assert "flush.intervl.ms" in error_line(result) and "flush.interval.ms" in error_line(result)
    result = cli("topic", "list", "-o", "clock=5")  # never reaches open_store's own parameters
    assert result.exit_code == 1 and "clock" in error_line(result)
    cli.ok("topic", "list", "-o", "flush.interval.ms=50", "-o", "log.retention.hours=1")


def test_bad_url_is_one_line(cli: Cli) -> None:
    result = cli("topic", "list", "--url", "ftp://host/x")
    assert result.exit_code == 1 and "unsupported store URL scheme" in error_line(result)


def test_default_store_is_the_embedded_one_and_env_overrides(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    from s3stream.apps.cli.common import default_store_url

    assert default_store_url().startswith("file://") and default_store_url().endswith("/s3stream/data")
    monkeypatch.setenv("S3STREAM_URL", cli.url)
    result = cli("topic", "list", url=False)
    assert result.exit_code == 0 and f"store: {cli.url}" in result.stderr


def test_real_process_exit_code_and_no_traceback(cli: Cli) -> None:
    proc = subprocess.run([sys.executable, "-c", "from s3stream.apps.cli import main; main()", "topic", "describe",
                           "nope", "--url", cli.url], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "error: unknown topic 'nope'"
