"""``retention run``, ``delete-records``, ``clean run`` and ``gc run`` against a real file:// store."""

from __future__ import annotations

import s3stream

from .helpers import Cli, error_line, lines


def _open(cli: Cli) -> s3stream.Store:
    return s3stream.open_store(cli.url, probe=False)


def test_delete_records_then_retention_drops_whole_segments(cli: Cli) -> None:
    cli.ok("topic", "create", "t", "--config", "segment.bytes=200")
    for batch in range(4):  # each produce is one append of 10 records (280 bytes): every append rolls (ROLL-1)
        cli.ok("produce", "t", input=lines(f"value-{batch * 10 + i}" for i in range(10)))
    result = cli.ok("delete-records", "t", "0", "25")
    assert "log start offset is now 25" in result.stdout
    report = cli.ok("retention", "run")
    assert "log_start_offset: 2 segments" in report.stdout  # [0-9] and [10-19] lie wholly below 25 (RET-5)
    with _open(cli) as store:
        log = store.partition("t", 0)
        assert log.log_start_offset == 25
        assert [s.base_offset for s in log.segments()][:2] == [20, 30]
    assert "log start offset is now 40" in cli.ok("delete-records", "t", "0", "end").stdout


def test_delete_records_on_a_compact_only_topic_is_a_policy_violation(cli: Cli) -> None:
    cli.ok("topic", "create", "c", "--config", "cleanup.policy=compact")
    cli.ok("produce", "c", "--key-separator", ":", input="k:v\n")
    result = cli("delete-records", "c", "0", "1")
    assert result.exit_code == 1
    assert "cleanup.policy" in error_line(result)


def test_delete_records_rejects_a_non_offset(cli: Cli) -> None:
    cli.ok("topic", "create", "t")
    assert cli("delete-records", "t", "0", "x").exit_code == 2


def test_clean_run_compacts_and_prints_stats(cli: Cli) -> None:
    cli.ok("topic", "create", "c", "--config", "cleanup.policy=compact", "--config", "segment.bytes=300")
    cli.ok("produce", "c", "--key-separator", ":", input=lines(f"k{i % 3}:v{i}" for i in range(30)))
    with _open(cli) as store:
        store.partition("c", 0).roll()
    result = cli.ok("clean", "run")
    assert "records removed" in result.stdout
    with _open(cli) as store:
        values = {r.key: r.value for r in store.partition("c", 0).read(0, max_bytes=1 << 20)}
    assert values == {b"k0": b"v27", b"k1": b"v28", b"k2": b"v29"}


def test_clean_run_with_nothing_to_clean_and_gc_dry_run(cli: Cli) -> None:
    cli.ok("topic", "create", "t")
    assert "nothing to clean" in cli.ok("clean", "run").stdout
    assert "nothing to collect" in cli.ok("gc", "run", "--dry-run").stdout
