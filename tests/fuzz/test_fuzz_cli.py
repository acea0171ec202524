"""Fuzzing the ``s3stream`` command line: every command, given arguments, options, store URLs, settings and
stdin of any shape, succeeds (exit 0), fails with one error line (exit 1) or with click's usage message
(exit 2); never a traceback, in-process (typer's CliRunner) or as a real process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import Result
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from s3stream.apps.cli import app

from .kit import SLOW_FUZZ

_ERROR_PREFIXES = ("error: ", "corrupt data: ", "fenced: ")

text = st.one_of(st.text(max_size=30), st.sampled_from(
    ["", "-", "--", "-1", "0", "1", "99999999999999999999999", "1e3", "all", "end", "nan", "../x", "/etc/passwd",
     "a/b", ".", "..", "t", "x" * 300, "t\x00", "\ud800", "é", "[red]markup[/]", "%s%n", "--help"]))
settings_pairs = st.one_of(text, st.builds("{}={}".format, st.sampled_from(
    ["flush.interval.ms", "ack", "segment.bytes", "cleanup.policy", "retention.ms", "wal_dir", "node_id",
     "bogus", "log.retention.hours", "max.message.bytes", "default_topic_config", "background"]), text))
urls = st.sampled_from(["memory://cli", "memory://", "file://relative", "s3://", "gs://b", "s3://b?x=1",
                        "s3://b?endpoint_url=http://user:hunter2@127.0.0.1:1", "file:///dev/null/x", ""])


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("cli-fuzz") / "store"
    runner = CliRunner()
    for argv in (["topic", "create", "t", "-p", "2"], ["produce", "t", "-p", "0"]):
        result = runner.invoke(app, [*argv, "--url", root.as_uri(), "-o", "probe=false"], input="a\nb\nc\n")
        assert result.exit_code == 0, result.output
    return root.as_uri()


@pytest.fixture(autouse=True, scope="module")
def _no_default_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A command given no --url uses the user's embedded store: point that default at a scratch directory; and
    run in another one, so a relative path the fuzzer makes up (``-o wal_dir=x``) lands there."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("S3STREAM_URL", raising=False)
        mp.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg")))
        mp.chdir(tmp_path_factory.mktemp("cwd"))
        yield


def _check(result: Result, argv: list[str]) -> None:
    """Exit 0, 1 with exactly one error line last on stderr, or 2 (usage); no traceback anywhere."""
    shown = f"argv={argv!r}\nstdout={result.stdout!r}\nstderr={result.stderr!r}"
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__}: {result.exception}\n{shown}")
    assert "Traceback" not in result.stdout + result.stderr, shown
    assert result.exit_code in (0, 1, 2), shown
    if result.exit_code == 1:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith(_ERROR_PREFIXES)]
        assert len(errors) == 1 and lines[-1] == errors[0], shown


def _run(argv: list[str], url: str | None, options: list[str], stdin: str = "") -> None:
    full = list(argv)
    if url is not None:
        full += ["--url", url]
    for pair in options:
        full += ["-o", pair]
    if not any(p.startswith("probe=") for p in options) and argv[0] not in ("dump", "wal"):
        full += ["-o", "probe=false"]
    _check(CliRunner().invoke(app, full, input=stdin), full)


_commands = st.one_of(
    st.tuples(st.just("topic"), st.just("create"), text, st.sampled_from(["-p", "--partitions"]), text,
              st.just("-c"), settings_pairs),
    st.tuples(st.just("topic"), st.sampled_from(["describe", "delete"]), text),
    st.tuples(st.just("topic"), st.just("alter"), text, st.just("-c"), settings_pairs),
    st.tuples(st.just("topic"), st.just("list")),
    st.tuples(st.just("produce"), text, st.sampled_from(["-p", "-f", "-k"]), text),
    st.tuples(st.just("consume"), text, st.sampled_from(["-p", "--offset", "--timestamp", "-n", "--poll-ms"]), text),
    st.tuples(st.just("delete-records"), text, text, text),
    st.tuples(st.just("manifest"), st.just("show"), text, text, st.just("--seq"), text),
    st.tuples(st.sampled_from(["retention", "clean", "gc"]), st.just("run")),
    st.tuples(st.just("dump"), text),
)


@SLOW_FUZZ
@given(command=_commands, options=st.lists(settings_pairs, max_size=2), stdin=st.text(max_size=40))
def test_commands_on_a_store(store_url: str, command: tuple[str, ...], options: list[str], stdin: str) -> None:
    argv = list(command)
    if argv[:2] == ["topic", "delete"] and argv[2] == "t":
        argv[2] = "not-there"  # keep the fixture's topic
    _run(argv, store_url, options, stdin)


@SLOW_FUZZ
@given(command=_commands, url=urls)
def test_commands_on_bad_urls(command: tuple[str, ...], url: str) -> None:
    _run(list(command), url, [])


@SLOW_FUZZ
@given(line=st.one_of(st.text(max_size=60), st.sampled_from([
    '{"value": 1}', '{"key": [1], "value": "v"}', '{"value": "v", "headers": {"h": 1}}', '{"value": "v",',
    '[]', 'null', '{"value": "v", "partition": -1}', '{"value": "v", "partition": 99}', '{"value": "\\ud800"}',
    '{"value": "v", "timestamp": 1.5}', '{"value": "v", "headers": [["h"]]}', '{"value": "v", "key_b64": "!!"}'])))
def test_produce_any_jsonl_line(store_url: str, line: str) -> None:
    _run(["produce", "t", "-f", "jsonl"], store_url, [], stdin=line + "\n")


def test_a_real_process_prints_one_line_not_a_traceback(tmp_path: Path) -> None:
    """The console script itself (not CliRunner, which catches what a process would print)."""
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg")}
    env.pop("S3STREAM_URL", None)
    cases = [["topic", "create", "../etc", "--url", (tmp_path / "s").as_uri()],
             ["consume", "t", "-p", "x", "--url", "memory://x"],
             ["topic", "list", "--url", "file:///%00"],
             ["dump", str(tmp_path / "missing.parquet")]]
    for argv in cases:
        proc = subprocess.run([sys.executable, "-c", "from s3stream.apps.cli import main; main()", *argv, "-o",
                               "probe=false"] if argv[0] != "dump" else
                              [sys.executable, "-c", "from s3stream.apps.cli import main; main()", *argv],
                              capture_output=True, text=True, timeout=120, env=env)
        assert proc.returncode == 1, (argv, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr + proc.stdout, (argv, proc.stderr)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert lines and lines[-1].startswith(_ERROR_PREFIXES), (argv, proc.stderr)


def test_topic_name_help_shows_the_allowed_characters() -> None:
    """Regression: rich read ``[a-zA-Z0-9._-]`` in the help text as markup and dropped it."""
    result = CliRunner().invoke(app, ["topic", "create", "--help"], terminal_width=200)
    assert "[a-zA-Z0-9._-]" in result.stdout


@pytest.mark.parametrize("line", ['{"value": "\\ud800"}', '{"key": "a\\udfffb", "value": "v"}',
                                  '{"value": "v", "headers": {"h": "\\ud800"}}',
                                  '{"value": "v", "headers": {"\\ud800": "x"}}'])
def test_produce_refuses_a_lone_surrogate_naming_the_line(store_url: str, line: str) -> None:
    """Regression: JSON's ``\\ud800`` escape is valid JSON but no UTF-8 text: encoding it raised
    UnicodeEncodeError out of ``produce`` with a traceback."""
    result = CliRunner().invoke(app, ["produce", "t", "-f", "jsonl", "--url", store_url, "-o", "probe=false"],
                                input='{"value": "ok"}\n' + line + "\n")
    _check(result, ["produce"])
    assert result.exit_code == 1
    assert "line 2" in result.stderr and "not UTF-8 text" in result.stderr
