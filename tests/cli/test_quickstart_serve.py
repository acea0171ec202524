"""``s3stream quickstart`` (the tour and its step list) and ``s3stream serve`` (its loop and metrics)."""

from __future__ import annotations

import tempfile
import threading
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console

import s3stream
from s3stream.apps.quickstart import DEFAULT_STEPS, QuickstartContext, Step, kafka_clients, run_quickstart
from s3stream.apps.serve import ServeLoop
from s3stream.base.errors import Closed, InternalError, TransientError

from .helpers import Cli, error_line


def test_quickstart_cli_runs_and_leaves_nothing_behind(cli: Cli, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    result = cli("quickstart", "--records", "600", url=False)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    out = result.stdout
    for text in ("created topic quickstart", "produced 600 records", "counts, offsets and order verified",
                 "through the Kafka protocol", "confluent-kafka produced 5 records to quickstart-kafka",
                 "consumed them back: same keys, values and order",
                 "objects in the bucket", "segments", "manifests", "WAL objects", "topic documents",
                 "manifest of quickstart/0", "object store requests", "PUT", "quickstart finished"):
        assert text in out, text
    assert list(scratch.iterdir()) == []  # the temporary store was removed


def test_quickstart_on_a_given_store_with_an_extra_step(cli: Cli) -> None:
    seen: list[str] = []

    def extra(ctx: QuickstartContext) -> None:
        seen.append(ctx.topic)
        ctx.console.print("extra step ran")

    console = Console(file=open("/dev/null", "w"), width=120)
    try:
        ctx = run_quickstart(cli.url, records=500, console=console, steps=[*DEFAULT_STEPS, Step("extra", extra)])
        again = run_quickstart(cli.url, records=50, console=console)
    finally:
        console.file.close()
    assert seen == ["quickstart"] and again.topic.startswith("quickstart-")  # the topic existed: a new name
    assert sum(len(v) for v in ctx.produced.values()) == 500
    objects = ctx.notes["objects"]
    assert objects["segments"][0] >= 3 and objects["manifests"][0] >= 3 and objects["topic documents"][0] >= 3
    assert ctx.notes["segments_p0"] >= 1 and ctx.notes["requests"]["PUT"] > 0
    listed = set(cli.ok("topic", "list").stdout.split())
    expected = {"quickstart", "quickstart-compacted", "quickstart-kafka", again.topic, f"{again.topic}-compacted",
                f"{again.topic}-kafka"}
    assert expected <= listed and listed - expected <= {"__consumer_offsets"}  # librdkafka asks for a coordinator
    assert ctx.notes["kafka"]["client"] == "confluent-kafka" and ctx.notes["kafka"]["records"] == 5
    assert ctx.notes["kafka"]["bootstrap"].startswith("127.0.0.1:")
    assert ctx.notes["compaction"].records_kept == 500  # 500 records of 997 keys: no duplicate to drop
    assert ctx.notes["retention"].partitions_checked == 3 + 1 + ("__consumer_offsets" in listed)  # + the Kafka step


def test_quickstart_kafka_step_falls_back_to_kafka_python_and_skips_without_a_client(
        cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real_find_spec = importlib.util.find_spec
    hidden: set[str] = set()

    def find_spec(name: str, *args: Any) -> Any:
        return None if name in hidden else real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    console = Console(file=open("/dev/null", "w"), width=120)
    steps = [DEFAULT_STEPS[0], next(s for s in DEFAULT_STEPS if s.run is kafka_clients)]
    try:
        hidden.add("confluent_kafka")
        ctx = run_quickstart(cli.url, records=10, console=console, steps=steps)
        assert ctx.notes["kafka"]["client"] == "kafka-python" and ctx.notes["kafka"]["records"] == 5
        hidden.add("kafka")
        ctx = run_quickstart(cli.url, records=10, console=console, steps=steps)
        assert ctx.notes["kafka"] is None
    finally:
        console.file.close()


def test_quickstart_failure_is_reported(cli: Cli) -> None:
    def broken(ctx: QuickstartContext) -> None:
        raise InternalError("quickstart: partition 0 returned 1 records, 2 were produced")

    with pytest.raises(InternalError):
        run_quickstart(cli.url, records=10, console=Console(quiet=True), steps=[DEFAULT_STEPS[0], Step("x", broken)])
    result = cli("quickstart", "--records", "0", url=False)
    assert result.exit_code == 2  # usage error: at least one record


# ------------------------------------------------------------------------------------------------ serve


def _fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


@pytest.mark.timeout(60)
def test_serve_loop_runs_one_iteration_and_stops_on_the_event(cli: Cli) -> None:
    cli.ok("topic", "create", "t")
    store = s3stream.open_store(cli.url, probe=False)
    try:
        store.partition("t", 0).append([s3stream.Record(None, b"x")])
        loop = ServeLoop(store, metrics_port=0)
        stop = threading.Event()
        thread = threading.Thread(target=loop.run, args=(stop,))
        thread.start()
        try:
            for _ in range(200):
                if loop.iterations >= 1 and loop.metrics_address is not None:
                    break
                threading.Event().wait(0.05)
            assert loop.iterations == 1  # the next pass is an interval away
            host, port = loop.metrics_address or ("", 0)
            assert host == "127.0.0.1"
            body = _fetch(f"http://{host}:{port}/metrics")
            assert 's3stream_records_in_total{topic="t"} 1.0' in body
        finally:
            stop.set()
            thread.join(10)
        assert not thread.is_alive()
        assert loop.metrics_address is None  # the HTTP server was shut down
        with pytest.raises(OSError):
            _fetch(f"http://{host}:{port}/metrics")
    finally:
        store.close()


class _StubStore:
    """Just what ServeLoop uses, with scripted task outcomes."""

    def __init__(self, retention: Any, gc: Any) -> None:
        self.clock = s3stream.SystemClock()
        self.settings = SimpleNamespace(log_retention_check_interval_ms=3_600_000, log_cleaner_enable=False)
        self.metrics_registry = None
        self._retention, self._gc = retention, gc
        self.calls: list[str] = []
        self.cleaner = SimpleNamespace(runtime=self)  # what CleanerService reads: settings and clock

    def run_retention(self) -> Any:
        self.calls.append("retention")
        if isinstance(self._retention, BaseException):
            raise self._retention
        return self._retention

    def collect_garbage(self) -> Any:
        self.calls.append("gc")
        if isinstance(self._gc, BaseException):
            raise self._gc
        return self._gc


def test_serve_disables_missing_capabilities_and_retries_failures() -> None:
    store = _StubStore(ModuleNotFoundError("No module named 's3stream.maintenance.retention'"), TransientError("503"))
    loop = ServeLoop(store, metrics_port=None, gc_interval_ms=1)  # type: ignore[arg-type]
    stop = threading.Event()
    stop.set()
    loop.run(stop)  # a set event still gets exactly one iteration
    assert loop.iterations == 1 and store.calls == ["retention", "gc"]
    retention, gc = loop.tasks
    assert retention.disabled is not None and "maintenance.retention" in retention.disabled
    assert gc.disabled is None and gc.failures == 1
    threading.Event().wait(0.01)
    loop.run_once()
    assert store.calls == ["retention", "gc", "gc"]  # retention stays off, gc is retried when due


def test_serve_stops_when_the_store_is_closed() -> None:
    loop = ServeLoop(_StubStore("ok", Closed("store closed")), metrics_port=None)  # type: ignore[arg-type]
    with pytest.raises(Closed):
        loop.run(threading.Event())
    assert loop.tasks[0].runs == 1


def test_serve_cli_once(cli: Cli) -> None:
    cli.ok("topic", "create", "t")
    result = cli.ok("serve", "--once", "--metrics-port", "0")
    assert "stopped after 1 iteration(s); store closed" in result.stderr
    result = cli("serve", "--once", "--no-metrics", "-o", "nope=1")
    assert result.exit_code == 1 and "nope" in error_line(result)
